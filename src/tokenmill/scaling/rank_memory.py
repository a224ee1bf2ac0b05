"""Training memory of one rank of a dp × tp × pp job of tokenmill's own trainer, in bytes, from the
configs alone: scaling/memory.py's byte-by-byte model of one process, split the way
train/tensor_parallel.py and train/pipeline_parallel.py split the model.

Persistent state on a rank (fp32 weights, fp32 gradients, AdamW m and v):
- tensor parallel: every block matrix /tp, the norms' gains whole; embedding, final norm and head
  whole (replicated) on every tp rank. Sequence parallelism (train.parallel.sequence_parallel, the
  default with tp > 1) also splits each block's residual stream and norm activations /tp (and a
  checkpointed block's kept input); the stack's edges, the head and a stage's output stay whole.
- pipeline: the stage's L/pp blocks; the embedding on the first stage; the final norm and the head
  on the last, whose head is a copy of the embedding when the embeddings are tied (two stages
  hold that table; in one process it is one tensor).
- ZeRO over dp (> 1; `zero`, train.parallel.zero), the same inside a pipeline stage: 3 (FSDP2)
  all of it /dp, plus the unsharded root and two blocks while they run; 2 (FSDP2 without
  resharding after forward) gradients and m, v /dp, the parameters /dp at rest but the whole stage
  unsharded from the forward to the backward; 1 m, v /dp, gradients reduced whole through one flat
  buffer of their size (DDP's buckets, or a stage's flat all-reduce after the schedule); 0 that
  buffer only. Without a pipeline the trainer's default is 3, around one 0.

Activations of one micro-batch on a stage: its blocks (`layer_activation_bytes` with the per-head
and per-column terms /tp), the token ids on the first stage, the head's on the last. A pipeline
stage holds several micro-batches' at once: under 1F1B stage s of p runs up to min(p - s, m)
forwards ahead of its backwards (the first stage the most), under GPipe all m; and a non-last
stage keeps each in-flight micro-batch's output, f·B·T·d, for the backward the next stage sends.
The peak is the largest of the moments memory.py defines (the loss backward on the last stage,
each block's backward, the optimizer step), with the other in-flight micro-batches' activations
added. Not counted, as in memory.py: allocator fragmentation, gloo/NCCL buffers, kernels' scratch.
"""

from __future__ import annotations

from typing import Any

import torch

from tokenmill.model.config import ModelConfig
from tokenmill.train.config import TrainConfig
from tokenmill.model.transformer import resolve_ffn_hidden
from tokenmill.scaling.flops import param_count
from tokenmill.scaling.memory import (
    F32,
    I64,
    _dtype,
    fused_loss_default,
    head_activation_bytes,
    held_once_bytes,
    kept_layer_bytes,
    layer_activation_bytes,
    layer_backward_transient,
    logits_bytes,
    loss_chunk,
    matmul_weights,
    weight_copy_bytes,
)


def in_flight(pp: int, stage: int, micro_batches: int, schedule: str = "1f1b") -> int:
    """Micro-batches whose activations stage `stage` holds at once."""
    if pp == 1:
        return 1  # one after another: each backward frees its forward's activations
    return micro_batches if schedule == "gpipe" else min(pp - stage, micro_batches)


def stage_params(cfg: ModelConfig, tp: int, pp: int, stage: int) -> dict[str, int]:
    """Parameters (elements) on one rank of stage `stage`: total, per block, root (non-block)."""
    assert cfg.vocab_size is not None
    counts, mm = param_count(cfg), matmul_weights(cfg)
    per_layer = counts["per_layer"] - mm["per_layer"] + mm["per_layer"] // tp
    layers = cfg.n_layers // pp
    first, last = stage == 0, stage == pp - 1
    embed = cfg.vocab_size * cfg.d_model + (cfg.max_seq_len * cfg.d_model if cfg.position == "learned" else 0)
    root = embed if first else 0
    if last:
        root += (2 if cfg.norm == "layernorm" else 1) * cfg.d_model  # final norm
        if not cfg.tie_embeddings or not first:  # an untied head, or the tied table's copy on the last stage
            root += cfg.vocab_size * cfg.d_model
    return {"total": layers * per_layer + root, "per_layer": per_layer, "root": root, "layers": layers}


def estimate_rank_memory(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    dtype: torch.dtype | str,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    stage: int | None = None,
    doc_masking: bool = False,
    device: str = "cpu",
    fused_loss: bool | None = None,
    schedule: str = "1f1b",
    cp: int = 1,
    zero: int | None = None,
) -> dict[str, Any]:
    """Bytes of one rank of stage `stage` (None: the stage with the largest peak), same parts and
    moments as `estimate_train_memory`, plus "stage" and "in_flight". `cp` > 1: a rank of a
    dp × cp job (tp = pp = 1), `context_parallel_rank_memory`. `zero`: the ZeRO stage over
    dp (None: the trainer's default, layout.zero_stage: 3 without a pipeline, 0 around one)."""
    if model_cfg.vocab_size is None:
        raise ValueError("model.vocab_size must be set to estimate memory (take it from the token store)")
    if cp > 1:
        return context_parallel_rank_memory(model_cfg, train_cfg, dtype, dp, cp, doc_masking, device, fused_loss)
    if stage is None:
        per_stage = [
            estimate_rank_memory(model_cfg, train_cfg, dtype, dp, tp, pp, s, doc_masking, device, fused_loss, schedule, zero=zero)
            for s in range(pp)
        ]
        return max(per_stage, key=lambda e: e["peak"])
    dt = _dtype(dtype)
    if fused_loss is None:
        fused_loss = fused_loss_default(model_cfg, train_cfg, device)
    B, T, m = train_cfg.micro_batch, train_cfg.seq_len, train_cfg.grad_accum
    first, last = stage == 0, stage == pp - 1
    sp = stage_params(model_cfg, tp, pp, stage)
    zero = (3 if pp == 1 else 0) if zero is None else zero
    zero = zero if dp > 1 else 0
    layers, shard = sp["layers"], dp if zero >= 2 else 1
    params, grads, optimizer, flat, fsdp = _state_bytes(sp, dp, zero)
    mm = matmul_weights(model_cfg)
    head_copy = mm["lm_head"] if last and not fused_loss else 0
    copies = weight_copy_bytes(mm, layers, dt, head_copy, train_cfg.activation_checkpointing, tp)
    seq = tp > 1 and train_cfg.parallel.sequence_parallel  # the residual stream and norms /tp
    layer = layer_activation_bytes(model_cfg, B, T, dt, doc_masking, device, tp, seq)
    kept = kept_layer_bytes(model_cfg, B, T, dt, train_cfg.activation_checkpointing, doc_masking, device, tp, seq)
    ids = I64 * B * (T + 1) if first and not last else 0  # the head's own count has them on a last stage
    head = head_activation_bytes(model_cfg, B, T, dt, doc_masking, fused_loss) if last else 0
    sent = 0 if last else F32 * B * T * model_cfg.d_model  # the stage's output, kept for the next stage's gradient
    shared = held_once_bytes(model_cfg, B, T, dt, doc_masking, device, train_cfg.activation_checkpointing)
    # a checkpointed stack's first block keeps its whole input: the sequence split happens inside it
    edge = F32 * B * T * model_cfg.d_model * (tp - 1) // tp if seq and train_cfg.activation_checkpointing else 0
    per_micro = layers * kept + edge + ids + head + sent + shared
    flight = in_flight(pp, stage, m, schedule)
    others = (flight - 1) * per_micro  # the other micro-batches in flight
    loss = logits_bytes(model_cfg, B, T, dt, fused_loss, loss_chunk(model_cfg, device)) if last else 0
    ddp = flat if pp == 1 else 0  # DDP's buckets live as long as the wrapper
    base = params + optimizer + copies + fsdp + ddp
    accumulated = grads if m > 1 else 0
    loss_backward = (base + accumulated + others + per_micro + loss) if last else 0
    transient = layer_backward_transient(model_cfg, B, T, dt, device, tp)
    # the head's backward is done; the ids, targets and per-row tables are still alive
    alive = others + layer + shared + sent + I64 * B * (2 * T + 1) + transient
    layers_backward = _layers_backward_peak(sp, shard, last, grads if accumulated else 0, base + alive, kept)
    step_tmp = _optimizer_step_temporaries(model_cfg, sp, tp, device)
    optimizer_step = params + grads + optimizer + step_tmp + ddp
    dp_reduce = base + grads + flat if flat and pp > 1 else 0  # after the schedule: the gradients and their flat copy
    out = {"stage": stage, "in_flight": flight, "params": params, "grads": grads, "optimizer": optimizer, "weight_copies": copies}
    out |= {"activations": flight * per_micro, "logits": loss, "optimizer_step": step_tmp, "fsdp_unsharded": fsdp}
    out |= {"ddp_buckets": ddp, "zero": zero, "loss_backward": loss_backward, "layers_backward": layers_backward}
    out |= {"optimizer_step_total": optimizer_step, "dp_reduce_total": dp_reduce}
    out["peak"] = max(loss_backward, layers_backward, optimizer_step, dp_reduce)
    return out


def _state_bytes(sp: dict[str, int], dp: int, zero: int) -> tuple[int, int, int, int, int]:
    """(params, grads, AdamW's m and v, the flat reduce buffer, FSDP's unsharded blocks) of one
    rank. zero 2/3: FSDP2 shards parameters (at rest), gradients and m, v over dp; zero 1 only m, v
    (whole tensors per owner, train/zero.py); zero 0/1 reduce replicated gradients through one flat
    buffer of their size (DDP's buckets, or a pipeline stage's flat all-reduce). Unsharded while
    they run: zero 3 the root and two or three blocks; zero 2 keeps every block gathered from its
    forward to its backward, so the whole stage at the start of the backward."""
    shard = dp if zero >= 2 else 1
    flat = F32 * sp["total"] if zero <= 1 and dp > 1 else 0
    params = grads = -(-F32 * sp["total"] // shard)
    optimizer = -(-2 * F32 * sp["total"] // (dp if zero >= 1 else 1))
    fsdp = F32 * (sp["root"] + 3 * sp["per_layer"]) if zero == 3 else F32 * sp["total"] if zero == 2 else 0
    return params, grads, optimizer, flat, fsdp


def _layers_backward_peak(sp: dict[str, int], shard: int, last: bool, accumulated: int, fixed: int, kept: int) -> int:
    """The largest moment of the blocks' backward: `fixed` bytes always alive, the blocks not yet
    back-propagated still holding `kept` each, and the gradients so far (all of them when they
    accumulate over micro-batches, else the head's on a last stage and one block's per block done)."""
    peak, layers = 0, sp["layers"]
    root_grads, layer_grads = F32 * sp["root"] // shard, F32 * sp["per_layer"] // shard
    for done in range(layers):
        g = accumulated if accumulated else root_grads * last + (done + 1) * layer_grads
        peak = max(peak, fixed + g + (layers - done - 1) * kept)
    return peak


def _optimizer_step_temporaries(model_cfg: ModelConfig, sp: dict[str, int], tp: int, device: str) -> int:
    """CPU AdamW's two temporaries are the size of the rank's largest tensor: the embedding or head
    when the stage holds one, else the widest block matrix's shard (none with CUDA's fused kernel)."""
    assert model_cfg.vocab_size is not None  # estimate_rank_memory checked it
    table = model_cfg.vocab_size * model_cfg.d_model
    block = max(model_cfg.d_model * resolve_ffn_hidden(model_cfg), model_cfg.d_model * model_cfg.d_model) // tp
    largest = table if sp["root"] >= table else block
    return 0 if device.startswith("cuda") else 2 * F32 * largest


def context_parallel_rank_memory(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    dtype: torch.dtype | str,
    dp: int,
    cp: int,
    doc_masking: bool = False,
    device: str = "cpu",
    fused_loss: bool | None = None,
) -> dict[str, Any]:
    """One rank of a dp × cp job (train/context_parallel.py): the one-process estimate of rows of
    T/cp tokens under the trainer's DDP or FSDP2 over dp · cp ranks, plus what does not shrink
    with cp in each block — the gathered K and V of the whole row and the T/cp × T mask
    (`context_parallel_layer_bytes`): in every kept block without checkpointing, in the block
    being recomputed with it. The loss head and the per-token terms are those of T/cp tokens."""
    from tokenmill.scaling.memory import context_parallel_layer_bytes, estimate_train_memory

    B, T, L = train_cfg.micro_batch, train_cfg.seq_len, model_cfg.n_layers
    local = train_cfg.model_copy(update={"seq_len": T // cp})
    if fused_loss is None:
        fused_loss = fused_loss_default(model_cfg, local, device)
    mode = train_cfg.distributed if dp * cp > 1 else "single"
    est: dict[str, Any] = estimate_train_memory(model_cfg, local, dtype, dp * cp, mode, True, device, fused_loss)
    extra = context_parallel_layer_bytes(model_cfg, B, T, dtype, doc_masking, cp) - layer_activation_bytes(
        model_cfg, B, T // cp, dtype, True, device
    )
    kept = 0 if train_cfg.activation_checkpointing else L * extra
    est["activations"] += kept
    est["loss_backward"] += kept
    est["layers_backward"] += kept if kept else extra
    est["peak"] = max(est["loss_backward"], est["layers_backward"], est["optimizer_step_total"])
    return {**est, "stage": 0, "in_flight": 1}
