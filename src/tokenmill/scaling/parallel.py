"""Memory per device of a model under a parallel layout (DP, ZeRO-1/2/3 / FSDP, TP, PP), and the
pipeline bubble.

This is the planner's model of a Megatron/DeepSpeed-style 3D-parallel run on GPUs, not of this
repo's trainer (scaling/memory.py counts that one byte by byte on one device).

Model and optimizer state, bytes per parameter (mixed precision, ZeRO paper: Rajbhandari et al.
2020 §3): bf16 weights 2, bf16 gradients 2, Adam m and v in fp32 8, plus an fp32 master copy 4
unless `master_weights` is off (bf16-only recipes count Adam as 8 B/param and no master
copy). Tensor parallelism (t) and pipeline parallelism (p) split every one of them t·p ways (the
embedding, norms and head are assumed split too, as in the seed: N/(t·p)); ZeRO then shards over
the d data-parallel ranks: stage 1 the optimizer state, stage 2 also the gradients, stage 3
(= FSDP full sharding) also the weights. ZeRO-3 adds the gathered bf16 weights of two layers (the
one running and the prefetched one).

Activations per layer, bytes for one micro-batch of b sequences of s tokens, bf16 (Korthikanti
et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.1), generalized
to gated FFNs, grouped K/V heads and flash attention:

    norm inputs                       2 · 2sbh
    attention  input of QKV            2sbh
               Q, K, V                 2sbh + 2 · 2sb·h_kv
               scores (materialized)   softmax output 2·a·s²·b (+ dropout mask a·s²·b and its
                                       output 2·a·s²·b); flash attention keeps only the output's
                                       log-sum-exp, 4·s·b·a (fp32)
               input of the output proj 2sbh (+ dropout mask sbh)
    FFN        input                   2sbh
               GELU: its input and output 2 · 2sbF; SwiGLU: gate and up 2 · 2sbF, the product 2sbF
               (+ dropout mask sbh)

With dropout, a GELU FFN of F = 4h, full heads and materialized scores this is exactly the paper's
sbh(34 + 5as/h). Tensor parallelism divides the attention and FFN interiors by t; the norm
inputs, the QKV and FFN inputs and the dropout masks are replicated over the t ranks unless
sequence parallelism shards them too (then everything is /t, the paper's sbh(34 + 5as/h)/t).
Full activation checkpointing keeps only each layer's input, 2sbh (/t with sequence parallelism),
and recomputes one layer at a time in the backward, whose full activations are then alive too.

Pipeline (1F1B schedule): the first stage holds min(p, m) micro-batches in flight, each with its
L/p layers' activations; the last stage holds one micro-batch plus the fp32 logits (4·s·b·V/t,
the vocabulary split over TP ranks). The reported activation memory is the larger of the two.
Bubble: the fraction of a step the stages idle while the pipeline fills and drains,
(p-1)/(m+p-1) for m micro-batches per step.

Not counted, hence `reserve`: NCCL buffers, allocator fragmentation, kernels' scratch (a few GB
on an 80 GB GPU).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from pydantic import Field

from tokenmill.config_base import Strict
from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import resolve_ffn_hidden
from tokenmill.scaling.flops import param_count

BF16 = 2
F32 = 4
ADAM_BYTES = 2 * F32  # m and v
MASTER_BYTES = F32


class Layout(Strict):
    """How a run is split over devices, and the activation settings that decide its memory."""

    tp: int = Field(1, ge=1, description="Tensor-parallel ranks (each matmul split t ways).")
    pp: int = Field(1, ge=1, description="Pipeline stages (layers split p ways).")
    dp: int = Field(1, ge=1, description="Data-parallel ranks (replicas, or ZeRO shards).")
    zero: int = Field(
        1, ge=0, le=3, description="ZeRO stage over the DP ranks: 0 plain DP, 1 optimizer, 2 +gradients, 3 (FSDP) +weights."
    )
    seq_len: int = Field(4096, ge=1, description="Tokens per sequence.")
    micro_batch: int = Field(1, ge=1, description="Sequences per micro-batch (per DP rank).")
    micro_batches: int = Field(1, ge=1, description="Micro-batches per optimizer step per pipeline (m).")
    checkpointing: bool = Field(False, description="Full activation checkpointing: keep each layer's input only.")
    sequence_parallel: bool = Field(True, description="Shard the replicated activations over TP ranks too.")
    flash_attention: bool = Field(True, description="Attention kernel that never stores the s×s scores.")
    dropout: bool = Field(False, description="Dropout in the blocks (its masks are kept).")
    master_weights: bool = Field(True, description="Keep an fp32 master copy of the weights (4 B/param).")
    reserve_bytes: float = Field(5e9, ge=0, description="Per-device buffers not modelled (NCCL, scratch, fragmentation).")

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes on the busiest device of a layout."""

    weights: float
    grads: float
    optimizer: float
    gathered: float  # ZeRO-3: the unsharded weights of the running and the prefetched layer
    activations: float
    reserve: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.gathered + self.activations + self.reserve

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """Pipeline bubble (p-1)/(m+p-1): the idle share of a step with p stages and m micro-batches."""
    if pp < 1 or micro_batches < 1:
        raise ValueError(f"pp={pp} and micro_batches={micro_batches} must be >= 1")
    return (pp - 1) / (micro_batches + pp - 1)


def layer_activation_bytes(cfg: ModelConfig, layout: Layout) -> float:
    """Bytes one layer keeps for the backward of one micro-batch on one TP rank, no checkpointing
    (module doc)."""
    s, b, t = layout.seq_len, layout.micro_batch, layout.tp
    h = cfg.n_heads * (cfg.d_model // cfg.n_heads)
    h_kv = (cfg.n_kv_heads or cfg.n_heads) * (cfg.d_model // cfg.n_heads)
    a, F = cfg.n_heads, resolve_ffn_hidden(cfg)
    sb = s * b
    drop = 1 if layout.dropout else 0
    # replicated over TP ranks without sequence parallelism: norm inputs, QKV/FFN inputs, dropout masks
    replicated = sb * (2 * BF16 * cfg.d_model + BF16 * cfg.d_model + BF16 * cfg.d_model + 2 * drop * cfg.d_model)
    if layout.flash_attention:
        scores = F32 * sb * a
    else:
        scores = (BF16 + drop * (1 + BF16)) * a * s * s * b
    attention = BF16 * sb * (h + 2 * h_kv) + scores + BF16 * sb * h
    ffn = (3 if cfg.ffn == "swiglu" else 2) * BF16 * sb * F
    sharded = attention + ffn
    return (replicated + sharded) / t if layout.sequence_parallel else replicated + sharded / t


def checkpoint_bytes(cfg: ModelConfig, layout: Layout) -> float:
    """Bytes a checkpointed layer keeps: its bf16 input (/t with sequence parallelism)."""
    kept = BF16 * layout.seq_len * layout.micro_batch * cfg.d_model
    return kept / layout.tp if layout.sequence_parallel else kept


def activation_bytes(cfg: ModelConfig, layout: Layout) -> float:
    """Activation bytes of the busiest pipeline stage (1F1B; module doc)."""
    assert cfg.vocab_size is not None
    layers = math.ceil(cfg.n_layers / layout.pp)
    full = layer_activation_bytes(cfg, layout)
    kept = checkpoint_bytes(cfg, layout) if layout.checkpointing else full
    recompute = full if layout.checkpointing else 0.0  # one layer re-run in the backward
    in_flight = min(layout.pp, layout.micro_batches)
    first = in_flight * layers * kept + recompute
    logits = F32 * layout.seq_len * layout.micro_batch * cfg.vocab_size / layout.tp
    last = layers * kept + recompute + logits
    return max(first, last)


def device_memory(cfg: ModelConfig, layout: Layout) -> DeviceMemory:
    """Bytes per device for `cfg` under `layout` (module doc)."""
    if cfg.vocab_size is None:
        raise ValueError("model.vocab_size must be set to plan memory")
    counts = param_count(cfg)
    per_mp = counts["total"] / (layout.tp * layout.pp)  # parameters on one TP×PP rank
    d = layout.dp
    optimizer_bytes = ADAM_BYTES + (MASTER_BYTES if layout.master_weights else 0)
    weights = BF16 * per_mp / (d if layout.zero >= 3 else 1)
    grads = BF16 * per_mp / (d if layout.zero >= 2 else 1)
    optimizer = optimizer_bytes * per_mp / (d if layout.zero >= 1 else 1)
    gathered = 2 * BF16 * counts["per_layer"] / layout.tp if layout.zero >= 3 and d > 1 else 0.0
    return DeviceMemory(
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        gathered=gathered,
        activations=activation_bytes(cfg, layout),
        reserve=layout.reserve_bytes,
    )
