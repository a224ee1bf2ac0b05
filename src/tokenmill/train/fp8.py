"""FP8 training (train.fp8): torchao's Float8Linear in place of the blocks' matmuls, on CUDA only.

The recipe is torchao's "tensorwise" one: one dynamic scale per tensor, computed from the tensor
itself at each cast (e4m3 for inputs and weights, e5m2 for gradients). It is the fastest of
torchao's recipes (rowwise scaling is more accurate and slower: torchtitan measured tensorwise at
~1.1x rowwise's tokens/s on Llama 3 8B), and, being dynamic, it keeps no state besides the
weights: a checkpoint is the fp32 master weights under their usual names, a resume restores the
same run, and a run without torchao loads it.

Only the transformer blocks' projections are converted (qkv_proj, o_proj, gate_up_proj/up_proj,
down_proj), and only those whose both dimensions are multiples of 16 (what FP8 tensor-core matmuls
need). The embedding is a lookup, not a matmul; the LM head stays bf16 because its output, the
logits, feeds the softmax directly: e4m3 keeps 3 mantissa bits, so logits a few nats apart would be
rounded together (and its gradient is the loss's sharpest). The MoE router stays too (its logits
pick the experts) and the experts (their token counts vary per step, and the weight gradient's
inner dimension, the token count, must be a multiple of 16).

FP8 runs on top of bf16 autocast: the matmuls are FP8, the rest of the step bf16, the weights and
the optimizer fp32. The conversion happens on the built model, before FSDP wraps it and before
torch.compile, as torchao requires.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# the Linear layers of Attention, MLP and GeluMLP (model/transformer.py)
FP8_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "up_proj", "down_proj")
MIN_CAPABILITY = (8, 9)  # Ada and Hopper: the first GPUs with FP8 tensor cores


def fp8_launch_problem(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why train.fp8 cannot run on this device and dtype (one line), or None when it can."""
    if device.type != "cuda":
        return (
            f"train.fp8 needs a CUDA GPU with FP8 matmuls (compute capability >= "
            f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}); this run is on {device.type}"
        )
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < MIN_CAPABILITY:
        return (
            f"train.fp8 needs a GPU with FP8 matmuls (compute capability >= {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}, "
            f"Ada or Hopper); {torch.cuda.get_device_name(device)} is {major}.{minor}: set train.fp8=false"
        )
    if dtype != torch.bfloat16:
        return f"train.fp8 runs on top of bf16 autocast, but this run's dtype resolves to {dtype}: set train.dtype=bfloat16"
    try:
        import torchao.float8  # noqa: F401
    except ImportError as exc:
        return f"train.fp8 needs torchao (pip install torchao, or pip install 'tokenmill[fp8]'): {exc}"
    return None


def is_fp8_linear(module: nn.Module, fqn: str) -> bool:
    """The filter: a block projection (never the head, the embedding, the router or an MoE
    expert) whose in and out dimensions are both multiples of 16."""
    if not isinstance(module, nn.Linear) or ".experts." in f".{fqn}.":
        return False
    if fqn.rsplit(".", 1)[-1] not in FP8_LINEARS:
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert_to_fp8(model: nn.Module) -> list[str]:
    """Swap the filtered Linear layers of `model` for torchao's Float8Linear (tensorwise recipe),
    in place; returns the converted layers' names. Parameter names and values stay as they were."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    converted: list[str] = []

    def keep(module: nn.Module, fqn: str) -> bool:
        chosen = is_fp8_linear(module, fqn)
        if chosen:
            converted.append(fqn)
        return chosen

    config: Any = Float8LinearConfig.from_recipe_name("tensorwise")
    convert_to_float8_training(model, module_filter_fn=keep, config=config)
    return converted
