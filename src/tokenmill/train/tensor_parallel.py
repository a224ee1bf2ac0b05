"""Tensor parallelism (Megatron-style, Shoeybi et al. 2019) applied to the Transformer from the
outside with torch's DTensor plans, as torchtitan does: the model code stays free of it.

Per block: the fused qkv and gate/up projections are column-parallel (each rank computes n_heads / tp
heads, n_kv_heads / tp key/value heads and hidden / tp FFN columns: their weights are laid out so
that the r-th of tp equal row blocks holds whole kv-head groups of q, k and v, and matching gate
and up rows, model/fused.py), o_proj and down_proj are
row-parallel (their outputs are summed over the tp ranks, one all-reduce per sub-block in the
forward and one in the backward). Attention runs on the rank's own heads; the model reads its
head counts from the projections' shapes, so GQA, RoPE, document masking and every attention
kernel work unchanged. QK-norm gains (one per head dim, shared by all heads) are Replicate DTensors
over the rank's heads, so their gradients are summed over tp.

Sequence parallelism (Korthikanti et al. 2022, `train.parallel.sequence_parallel`, on by default):
between the tensor-parallel regions the residual stream and the two pre-norms of every block are
split along the sequence, rank r holding tokens [r·T/tp, (r+1)·T/tp) as a plain [B, T/tp, d]
tensor. The row-parallel all-reduce becomes a reduce-scatter onto those shards, and an all-gather
before each column-parallel region restores the whole sequence (the same bytes on the wire as the
all-reduce it replaces). The norms run on the rank's tokens with their gains as Replicate DTensors
(their gradients are summed over tp by DTensor). Attention itself runs on the whole sequence, so the
RoPE tables and document masks the model builds from the global positions and segments are
unchanged. The stack's edges stay whole: the first block splits its (replicated) input with no
communication, the last block all-gathers its output, so the embedding, the final norm, lm_head and
the fused cross-entropy, and the activations a pipeline stage sends, are what they are without it.

Everything else (embedding, final norm, lm_head and the fused loss) stays a plain tensor replicated
on the tp ranks: their inputs are identical on every rank and so are their gradients, so no extra
collective is needed for them and the fused cross-entropy never materialises the logits.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from tokenmill.train.layout import LayoutError

COLUMN = ("self_attn.qkv_proj", "mlp.gate_up_proj", "mlp.up_proj")  # mlp.up_proj: the GELU FFN's
ROW = ("self_attn.o_proj", "mlp.down_proj")
NORMS = ("input_layernorm", "post_attention_layernorm")  # sequence-parallel under SP
QK_NORMS = ("self_attn.q_norm", "self_attn.k_norm")
SEQ = Shard(1)  # [B, T, d] split along T


def block_plan(block: nn.Module, sequence_parallel: bool = False) -> dict[str, ParallelStyle]:
    """{submodule name: style} for one block (SwiGLU or GELU FFN: those linears it has)."""
    names = {name for name, _ in block.named_modules()}
    # QK-norm gains are shared by all heads but each rank normalises only its own: as Replicate
    # DTensors over q/k [B, heads, T, hd] split on dim 1, their gradients are summed over tp
    per_head = {n: SequenceParallel(sequence_dim=1, use_local_output=True) for n in QK_NORMS if n in names}
    if not sequence_parallel:
        plan: dict[str, ParallelStyle] = {n: ColwiseParallel() for n in COLUMN if n in names}
        plan.update({n: RowwiseParallel() for n in ROW if n in names})
        return {**plan, **per_head}
    # Block.forward calls self_attn(h, cos, sin, mask) and mlp(h): only h changes layout
    gather = {
        "self_attn": PrepareModuleInput(
            input_layouts=(SEQ, None, None, None), desired_input_layouts=(Replicate(), None, None, None), use_local_output=True
        ),
        "mlp": PrepareModuleInput(input_layouts=(SEQ,), desired_input_layouts=(Replicate(),), use_local_output=True),
    }
    plan = {n: SequenceParallel() for n in NORMS}
    plan.update(gather)
    plan.update({n: ColwiseParallel() for n in COLUMN if n in names})
    plan.update({n: RowwiseParallel(output_layouts=SEQ) for n in ROW if n in names})
    return {**plan, **per_head}


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh, sequence_parallel: bool = False) -> nn.Module:
    """Shard every block of `model` over the 1-D `tp_mesh` in place; returns `model`."""
    layers = model.layers
    assert isinstance(layers, (nn.ModuleDict, nn.ModuleList)), "tensor parallelism shards tokenmill's Transformer blocks"
    blocks = list(layers.values() if isinstance(layers, nn.ModuleDict) else layers)  # a pipeline stage's: a ModuleDict
    for block in blocks:
        parallelize_module(block, tp_mesh, block_plan(block, sequence_parallel))
    if sequence_parallel and blocks:
        _shard_stack_edges(blocks[0], blocks[-1], tp_mesh)
    return model


def _shard_stack_edges(first: nn.Module, last: nn.Module, tp_mesh: DeviceMesh) -> None:
    """The first block takes the whole residual stream and keeps its rank's tokens (a local split;
    its backward all-gathers the gradient), the last block gives the whole stream back (an
    all-gather; its backward keeps the rank's part of the gradient)."""
    tp = tp_mesh.size()

    def check_length(_: nn.Module, args: tuple[Any, ...]) -> None:
        T = args[0].shape[1]
        if T % tp:  # an uneven split would mis-size every shard
            raise LayoutError(f"sequence parallelism over tp={tp} needs rows whose length divides by {tp}, got {T} tokens")

    first.register_forward_pre_hook(check_length)
    split = PrepareModuleInput(
        input_layouts=(Replicate(), None, None, None), desired_input_layouts=(SEQ, None, None, None), use_local_output=True
    )
    parallelize_module(first, tp_mesh, split)
    parallelize_module(last, tp_mesh, PrepareModuleOutput(output_layouts=SEQ, desired_output_layouts=Replicate()))
