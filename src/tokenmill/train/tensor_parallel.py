"""Tensor parallelism (Megatron-style, Shoeybi et al. 2019) applied to the Transformer from the
outside with torch's DTensor plans, as torchtitan does: the model code stays free of it.

Per block: the fused qkv and gate/up projections are column-parallel (each rank computes n_heads / tp
heads, n_kv_heads / tp key/value heads and hidden / tp FFN columns: their weights are laid out so
that the r-th of tp equal row blocks holds whole kv-head groups of q, k and v, and matching gate
and up rows, model/fused.py), o_proj and down_proj are
row-parallel (their outputs are summed over the tp ranks, one all-reduce per sub-block in the
forward and one in the backward). Attention runs on the rank's own heads; the model reads its
head counts from the projections' shapes, so GQA, RoPE, document masking, QK-norm and every
attention kernel work unchanged.

Everything else (embedding, norms, lm_head and the fused loss) stays a plain tensor replicated
on the tp ranks: their inputs are identical on every rank (the row-parallel all-reduce restores
the full residual stream) and so are their gradients (the column-parallel input's gradient is
all-reduced on the way back), so no extra collective is needed for them and the fused
cross-entropy never materialises the logits. Sequence parallelism (sharding the norms'
activations too) is not applied: at the sizes this trains on CPUs the replicated activations are
small, and it would need the norms as DTensors.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, parallelize_module

COLUMN = ("self_attn.qkv_proj", "mlp.gate_up_proj", "mlp.up_proj")  # mlp.up_proj: the GELU FFN's
ROW = ("self_attn.o_proj", "mlp.down_proj")


def block_plan(block: nn.Module) -> dict[str, ParallelStyle]:
    """{submodule name: style} for one block (SwiGLU or GELU FFN: those linears it has)."""
    names = {name for name, _ in block.named_modules()}
    plan: dict[str, ParallelStyle] = {n: ColwiseParallel() for n in COLUMN if n in names}
    plan.update({n: RowwiseParallel() for n in ROW if n in names})
    return plan


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    """Shard every block of `model` over the 1-D `tp_mesh` in place; returns `model`."""
    blocks = model.layers.values() if isinstance(model.layers, nn.ModuleDict) else model.layers  # a pipeline stage's
    for block in blocks:  # type: ignore[union-attr]
        parallelize_module(block, tp_mesh, block_plan(block))
    return model
