"""Training memory of one process, in bytes, from the configs alone (no model is built).

Persistent state (mixed precision keeps fp32 master weights, Rajbhandari et al. 2020, ZeRO): fp32 parameters
(4·N), fp32 gradients (4·N), AdamW's m and v (8·N); `mode="fsdp"` divides all three by the world
size (FSDP2 / ZeRO-3). N counts tied weights once (`param_count`).

Activations: what autograd keeps for the backward pass of one micro-batch (B = micro_batch rows of
T = seq_len tokens), read off `tokenmill.model.transformer` op by op, the accounting of
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", §4:
sbh(34 + 5as/h) bytes per layer with fp16 activations, dropout and materialised attention) redone
for this model: no dropout, no biases, pre-norm RMSNorm/LayerNorm, SwiGLU/GELU, SDPA with a
fused kernel that keeps the output and a log-sum-exp per query instead of the T×T scores. Per
layer, with c = bytes of the compute dtype (4 fp32, 2 under bf16 autocast) and f = 4:

    residual-stream inputs of both norms        2 · f·BTd   (the residual stream is fp32: the
                                                             embedding is fp32 and x + bf16 promotes)
    RMSNorm: normalized x before its gain        2 · f·BTd   (+ rsqrt f·BT each; LayerNorm keeps
                                                             mean and rstd, 2·f·BT, instead)
    projection inputs                           fp32: the norm outputs, 2 · f·BTd. bf16: autocast
                                                casts the fp32 norm output once per Linear: the
                                                fused qkv and the fused gate-up (or up), 2 · c·BTd
    SDPA: q, k, v, output                       4 · c·BT·(n_heads·head_dim)  (k and v after the GQA
                                                repeat, so GQA saves no activation memory)
          log-sum-exp                           f·B·n_heads·T
          document/window mask                  c·T·T (·B with document masking): SDPA converts
                                                the boolean mask to an additive one per layer
    explicit attention (CPU, bf16, T <= 256:    q, k, v and the out-projection's input (the
    `attention_kernel` in model.transformer)    output made contiguous), 4 · c·BT·hq, and the fp32
                                                probabilities f·B·n_heads·T·T; no log-sum-exp, and
                                                the additive mask is built once per forward
    QK-norm (RMSNorm): q, k in and normalized   fp32: 2 · f·BT·(hq + hkv); bf16: the fp32 upcast
                                                and the bf16 normalized copy, (f + c)·BT·(hq + hkv)
            (LayerNorm)                         c·BT·(2·hq + hkv) (measured: q is kept twice)
    RoPE in bf16                                the cos/sin tables cast per use, 4 · c·T·hd (per
                                                row positions: ·B); fp32 RoPE keeps no copy
    FFN                                         SwiGLU 4 · c·BTF (gate, silu, up, product);
                                                GELU 2 · c·BTF; MoE: the same per routed token
                                                slot (B·T·top_k), plus the router's fp32 tensors

Head: the final norm's input (and output for RMSNorm) and the token ids, then one of two losses.
Plain (logits materialised): the lm_head input; the cross-entropy runs in fp32 and keeps the
log-probabilities [B·T, V]; its peak, counted as `logits`, is the backward of log_softmax holding
the log-probabilities, their gradient and the logits' gradient at once, 3 · f·BTV. Fused
(model/fused_ce.py, what the trainer uses unless a z-loss needs the logits): it keeps the fp32
head input and the gradients it computed in the forward, dh [B·T, d] and dW [V, d] in fp32, and
its peak is one chunk of logits (`logits_bytes`).

Autocast makes a bf16 copy of every Linear weight (incl. a tied lm_head, except under the fused
loss, which casts the head itself), which the matmul keeps from the forward to the end of its
backward (`weight_copies`); under activation checkpointing only the running block's (its
recompute makes them again; autocast's cache is off, train/device.py). With activation checkpointing (each block
recomputed in backward, torch.utils.checkpoint non-reentrant) a layer keeps only its fp32 input
f·BTd, and the recomputation of one block holds that block's activations again. Selective
checkpointing (`train.activation_checkpointing: selective`) keeps the fp32 input plus the outputs
of the block's matmuls and attention kernel (`selective_saved_bytes`), and recomputes the rest.

The peak is the largest of three moments: the loss backward (persistent state, gradients
already accumulated from earlier micro-batches when grad_accum > 1, weight copies, all
activations and the loss buffers); the backward of each block (the gradients of the blocks
above it and of the head allocated, its own activations held, recomputed under checkpointing,
plus the activation gradients alive inside it, `layer_backward_transient`); and the optimizer
step (parameters, gradients, m, v and the step's temporaries: torch's single-tensor AdamW on CPU
makes two parameter-sized temporaries of its largest tensor; the fused CUDA kernel none).
DDP adds its gradient buckets (4·N, a flat copy of the gradients); FSDP adds the unsharded fp32
parameters of the root module (embeddings, final norm, head; gathered for the whole forward)
plus two blocks (the one running and the one prefetched), and one block's unsharded gradients
before its reduce-scatter. The DDP and FSDP terms follow the libraries' documented behaviour and
are not measured here.

Not counted: the CPU allocator's or CUDA caching allocator's fragmentation and rounding (glibc
keeps freed heap pages resident: benchmarks/bench_train_memory.py shows RSS up to ~35% above the
live bytes with its defaults, equal to them with MALLOC_MMAP_THRESHOLD_=65536), the CUDA context
(~0.5 GiB), kernels' scratch space, the data loader's pinned buffers and torch.compile's own
buffers. `tests/scaling/test_memory.py` checks the activation count against the bytes autograd
actually saves (equal for dense models, within 0.5% for MoE) and the peak against a profiled
training step (the estimate between 10% below and 15% above it on a tiny model; on the demo
model at smoke size within 1-8%, benchmarks/bench_train_memory.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Literal

import torch

from tokenmill.model.config import ModelConfig
from tokenmill.train.config import TrainConfig
from tokenmill.model.transformer import CheckpointMode, attention_kernel, resolve_ffn_hidden
from tokenmill.scaling.flops import param_count

Mode = Literal["single", "ddp", "fsdp"]
F32 = 4
I64 = 8
FUSED_CHUNK = 1024  # tokens per chunk of the fused projection + cross-entropy (model/fused_ce.py)


def _dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    named = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in named:
        raise ValueError(f"dtype {dtype!r}: expected float32, bfloat16 or float16")
    return named[dtype]


def matmul_weights(cfg: ModelConfig) -> dict[str, int]:
    """Elements of the Linear weights: per layer (attention q/k/v/o, FFN incl. the MoE router),
    the lm_head (V·d, also when tied), and the largest single tensor (for the optimizer step)."""
    assert cfg.vocab_size is not None
    d, hd = cfg.d_model, cfg.d_model // cfg.n_heads
    hq, hkv = cfg.n_heads * hd, (cfg.n_kv_heads or cfg.n_heads) * hd
    h = resolve_ffn_hidden(cfg)
    attn = 2 * d * hq + 2 * d * hkv
    expert = (2 if cfg.ffn == "gelu" else 3) * d * h
    ffn = d * cfg.n_experts + cfg.n_experts * expert if cfg.n_experts > 0 else expert
    largest = max(cfg.vocab_size * d, d * h, d * hq, cfg.max_seq_len * d if cfg.position == "learned" else 0)
    return {"per_layer": attn + ffn, "lm_head": cfg.vocab_size * d, "largest_tensor": largest}


def layer_activation_bytes(
    cfg: ModelConfig,
    B: int,
    T: int,
    dtype: torch.dtype | str,
    doc_masking: bool = False,
    device: str = "cpu",
    tp: int = 1,
    sequence_parallel: bool = False,
) -> int:
    """Bytes one transformer block keeps for its backward (see the module doc, term by term).

    `tp`: on one rank of a tensor-parallel block (train/tensor_parallel.py) everything per head
    and per FFN column is /tp; the projections' (replicated, all-gathered) inputs, the RoPE tables
    and the masks are whole on every rank, and so are the residual stream and the norms unless
    `sequence_parallel` splits them along the sequence (/tp)."""
    c = _dtype(dtype).itemsize
    bf = c != F32
    d, hd = cfg.d_model, cfg.d_model // cfg.n_heads
    hq, hkv = cfg.n_heads * hd, (cfg.n_kv_heads or cfg.n_heads) * hd
    BT = B * T
    rms = cfg.norm == "rmsnorm"
    explicit = uses_explicit_attention(cfg, T, dtype, device)
    n = 0
    # two pre-norms on the fp32 residual stream
    n += 2 * (F32 * BT * d + (F32 * BT * d + F32 * BT if rms else 2 * F32 * BT)) // (tp if sequence_parallel else 1)
    # attention projections' input
    n += c * BT * d if bf else F32 * BT * d  # under bf16 cast once, for the one fused qkv matmul
    if cfg.qk_norm:
        # RMSNorm upcasts to fp32 and keeps its input and normalized value (the latter in c);
        # LayerNorm runs in the input's dtype and keeps a contiguous copy of its input and its
        # statistics, and for q one more q-sized tensor under SDPA (measured: the strided
        # projection output; the explicit kernel's matmul keeps none)
        heads = cfg.n_heads + (cfg.n_kv_heads or cfg.n_heads)
        if rms:
            n += (((F32 + c) if bf else 2 * F32) * BT * (hq + hkv) + F32 * B * heads * T) // tp
        else:
            n += (c * BT * ((1 if explicit else 2) * hq + hkv) + 2 * F32 * B * heads * T) // tp
    rope_cast = bf and not (cfg.qk_norm and rms)  # RMSNorm's fp32 output meets fp32 tables: no copy
    if rope_cast and cfg.position == "rope":
        n += 4 * c * T * hd * (B if doc_masking else 1)
    if explicit:
        n += (4 * c * BT * hq + F32 * B * cfg.n_heads * T * T) // tp  # q, k, v, out-proj input; probabilities
    else:
        n += (4 * c * BT * hq + F32 * B * cfg.n_heads * T) // tp  # SDPA q, k, v, out; log-sum-exp
        if doc_masking or cfg.sliding_window is not None:
            n += c * (B if doc_masking else 1) * T * T
    n += _ffn_activation_bytes(cfg, BT, c, tp)
    return n


def selective_saved_bytes(cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str, device: str = "cpu", tp: int = 1) -> int:
    """Bytes selective checkpointing (model.transformer.SELECTIVE_SAVE) keeps per block besides its
    fp32 input: the matmuls' outputs in the compute dtype, c·BT·(hq + 2·hkv) for the fused qkv,
    c·BTd for o_proj and down_proj, c·BT·2F for the fused gate-up (GELU: up, c·BTF; MoE: per
    routed slot, plus the router's c·BT·n_experts), and the attention kernel's: SDPA / flex keep
    their output and fp32 log-sum-exp, c·BT·hq + f·B·n_heads·T; the explicit kernel its two
    batched matmuls, the scores c·B·n_heads·T·T and the output c·BT·hq. Per head and per FFN
    column /tp; o_proj's and down_proj's outputs are whole on every rank."""
    c = _dtype(dtype).itemsize
    d, hd = cfg.d_model, cfg.d_model // cfg.n_heads
    hq, hkv = cfg.n_heads * hd, (cfg.n_kv_heads or cfg.n_heads) * hd
    BT, h = B * T, resolve_ffn_hidden(cfg)
    n = c * BT * (hq + 2 * hkv) // tp + c * BT * d
    if uses_explicit_attention(cfg, T, dtype, device):
        n += (c * B * cfg.n_heads * T * T + c * BT * hq) // tp
    else:
        n += (c * BT * hq + F32 * B * cfg.n_heads * T) // tp
    hidden = (1 if cfg.ffn == "gelu" else 2) * c * h
    if cfg.n_experts == 0:
        return n + BT * (hidden // tp + c * d)
    return n + c * BT * cfg.n_experts + BT * cfg.top_k * (hidden + c * d)


def kept_layer_bytes(
    cfg: ModelConfig,
    B: int,
    T: int,
    dtype: torch.dtype | str,
    checkpointing: CheckpointMode = False,
    doc_masking: bool = False,
    device: str = "cpu",
    tp: int = 1,
    sequence_parallel: bool = False,
) -> int:
    """Bytes one block keeps from its forward to its backward under `train.activation_checkpointing`:
    all its activations (False), its fp32 input (True; /tp under sequence parallelism), or that plus
    `selective_saved_bytes`."""
    if not checkpointing:
        return layer_activation_bytes(cfg, B, T, dtype, doc_masking, device, tp, sequence_parallel)
    block_input = F32 * B * T * cfg.d_model // (tp if sequence_parallel else 1)
    if checkpointing == "selective":
        return block_input + selective_saved_bytes(cfg, B, T, dtype, device, tp)
    return block_input


def uses_explicit_attention(cfg: ModelConfig, T: int, dtype: torch.dtype | str, device: str) -> bool:
    """Whether the model's attention takes the explicit kernel (no sliding window, 'auto' rule)."""
    kind = torch.device(device).type
    return cfg.sliding_window is None and attention_kernel(kind, _dtype(dtype), T) == "explicit"


def _ffn_activation_bytes(cfg: ModelConfig, BT: int, c: int, tp: int = 1) -> int:
    d, h = cfg.d_model, resolve_ffn_hidden(cfg)
    bf = c != F32
    gelu = cfg.ffn == "gelu"
    hidden = (2 if gelu else 4) * c * h
    if cfg.n_experts == 0:
        casts = c * d if bf else F32 * d  # the replicated input, cast once (up, or the fused gate-up)
        return BT * (casts + hidden // tp)
    slots = BT * cfg.top_k
    # per routed slot: the expert's input (cast per Linear under bf16), its output, the gate's
    # product, the gate value and the token index
    inputs = ((1 if gelu else 2) * c + F32) * d if bf else 2 * F32 * d
    per_slot = inputs + c * d + hidden + F32 + I64
    n_e, k = cfg.n_experts, cfg.top_k
    router = BT * ((c if bf else F32) * d + 2 * F32 * n_e + F32 * k + I64 * k + 3 * F32) + 2 * F32 * n_e
    return slots * per_slot + router


def head_activation_bytes(
    cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str, doc_masking: bool = False, fused_loss: bool = False
) -> int:
    """Bytes the embedding, final norm and head keep (the plain loss's log-probabilities are in
    `logits_bytes`). The fused projection + cross-entropy (model.fused_ce) keeps the fp32 norm
    output and the gradients it computed in its forward, dh [B·T, d] and dW [V, d], both fp32."""
    assert cfg.vocab_size is not None
    c = _dtype(dtype).itemsize
    d, BT = cfg.d_model, B * T
    n = F32 * BT * d + (F32 * BT * d + F32 * BT if cfg.norm == "rmsnorm" else 2 * F32 * BT)
    n += 2 * F32 * BT * d + F32 * cfg.vocab_size * d if fused_loss else c * BT * d  # the head's input
    n += I64 * B * (T + 1) + I64 * BT  # token ids (the embedding's indices) and targets
    if cfg.position == "learned":
        n += I64 * T * (B if doc_masking else 1)  # position ids (per row with document masking)
    return n


def logits_bytes(
    cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str = "float32", fused_loss: bool = False, chunk: int = FUSED_CHUNK
) -> int:
    """Peak of the loss head beyond what it keeps. Plain: in the backward of log_softmax, the
    log-probabilities, their gradient and the logits' gradient, 3 · f·BTV. Fused, the larger of
    its forward and its backward (the returned fp32 gradients of h and W). Forward: under bf16
    the bf16 copies of its input and weight, the per-token NLL, and per chunk of `chunk` tokens
    either the fp32 logits with logsumexp's equal-sized temporary, or (later) the logits turned
    in place into the softmax gradient, its bf16 copy and the chunk's dW product (c and fp32).
    Not counted: oneDNN's scratch buffers of the bf16 matmuls (0.8 MB at a 512-token chunk of a
    512-word vocabulary, none seen at the demo's 4096; tests/scaling/test_memory.py)."""
    assert cfg.vocab_size is not None
    V, d, BT = cfg.vocab_size, cfg.d_model, B * T
    if not fused_loss:
        return 3 * F32 * BT * V
    c = _dtype(dtype).itemsize
    cb = c if c != F32 else 0  # bytes of a bf16 copy, 0 when the compute dtype is fp32
    rows = min(chunk, BT)
    chunk_peak = max(2 * F32 * rows * V, (F32 + cb) * (rows * V + V * d) + (F32 + c) * rows * d)
    forward = cb * (BT + V) * d + F32 * BT + chunk_peak
    backward = F32 * (BT + V) * d
    return max(forward, backward)


def loss_chunk(model_cfg: ModelConfig, device: str = "cpu") -> int:
    """Tokens per chunk of the fused loss on this device (model.fused_ce.fused_chunk)."""
    from tokenmill.model.fused_ce import fused_chunk

    assert model_cfg.vocab_size is not None
    return FUSED_CHUNK if not device.startswith("cuda") else fused_chunk("cuda", model_cfg.vocab_size)


def fused_loss_default(model_cfg: ModelConfig, train_cfg: TrainConfig, device: str = "cpu") -> bool:
    """What the trainer's loss does (model.objectives.token_nll_batch): the fused projection +
    cross-entropy when the model's forward takes targets, for the causal objective without z-loss,
    where `fused_ce.loss_kernel` picks it for this device and micro-batch (on CUDA, only logits
    too large to materialise)."""
    import inspect

    from tokenmill.model.fused_ce import loss_kernel
    from tokenmill.model.transformer import Transformer

    assert model_cfg.vocab_size is not None
    kind = loss_kernel(device.split(":")[0], train_cfg.micro_batch * train_cfg.seq_len, model_cfg.vocab_size)
    return (
        "targets" in inspect.signature(Transformer.forward).parameters
        and model_cfg.z_loss == 0
        and getattr(train_cfg, "objective", "clm") == "clm"
        and kind == "fused"
    )


def _shared_bytes(cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str, doc_masking: bool) -> int:
    """The per-row cos/sin tables gathered once per forward and kept in fp32 (document masking)."""
    fp32_rope = _dtype(dtype) == torch.float32 or (cfg.qk_norm and cfg.norm == "rmsnorm")
    rope_rows = cfg.position == "rope" and doc_masking and fp32_rope
    return 2 * F32 * B * T * (cfg.d_model // cfg.n_heads) if rope_rows else 0


def checkpoint_args_bytes(cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str, doc_masking: bool, device: str) -> int:
    """What the checkpointed blocks' shared arguments hold, once for all blocks: the attention mask
    (the explicit kernel's fp32 additive one; SDPA's boolean one with document masking or a window;
    none for plain causal SDPA or a FlexAttention BlockMask) and, with document masking, the
    per-row fp32 RoPE tables where `_shared_bytes` has not counted them (bf16: without
    checkpointing each block keeps its own bf16 cast instead)."""
    rows = B if doc_masking else 1
    if uses_explicit_attention(cfg, T, dtype, device):
        n = F32 * rows * T * T
    elif cfg.sliding_window is not None or (doc_masking and not device.startswith("cuda")):
        n = rows * T * T
    else:
        n = 0
    if cfg.position == "rope" and doc_masking and not _shared_bytes(cfg, B, T, dtype, doc_masking):
        n += 2 * F32 * B * T * (cfg.d_model // cfg.n_heads)
    return n


def held_once_bytes(
    cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str, doc_masking: bool, device: str, checkpointing: CheckpointMode
) -> int:
    """What a forward holds once for all its blocks: `_shared_bytes`, and under checkpointing
    `checkpoint_args_bytes`."""
    args = checkpoint_args_bytes(cfg, B, T, dtype, doc_masking, device) if checkpointing else 0
    return _shared_bytes(cfg, B, T, dtype, doc_masking) + args


def activation_bytes(
    cfg: ModelConfig,
    B: int,
    T: int,
    dtype: torch.dtype | str,
    doc_masking: bool = False,
    checkpointing: CheckpointMode = False,
    fused_loss: bool = False,
    device: str = "cpu",
) -> int:
    """Bytes kept for the backward of one micro-batch at the end of the forward: all layers plus
    the head (the loss buffers apart). With checkpointing only each block's fp32 input, and under
    "selective" its matmul and attention outputs (`kept_layer_bytes`)."""
    kept = kept_layer_bytes(cfg, B, T, dtype, checkpointing, doc_masking, device)
    return (
        cfg.n_layers * kept
        + held_once_bytes(cfg, B, T, dtype, doc_masking, device, checkpointing)
        + head_activation_bytes(cfg, B, T, dtype, doc_masking, fused_loss)
    )


def layer_backward_transient(cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str, device: str = "cpu", tp: int = 1) -> int:
    """Activation gradients alive inside one block's backward: the residual-stream gradient and
    its partial sums (2·f·BTd) plus the widest step, the FFN's (SwiGLU: grad of the product, of
    silu and of up, 3·c·BTF; GELU 2·c·BTF) or the attention's (grad of q, k, v and out,
    4·c·BT·hq; the explicit kernel also holds the fp32 probabilities' gradient and one
    temporary of its size, 2·f·B·n_heads·T·T); the FFN and attention parts /tp on a
    tensor-parallel rank."""
    c = _dtype(dtype).itemsize
    BT = B * T
    h = resolve_ffn_hidden(cfg)
    slots = BT * (cfg.top_k if cfg.n_experts > 0 else 1)
    ffn = (2 if cfg.ffn == "gelu" else 3) * c * slots * h
    attn = 4 * c * BT * cfg.d_model
    if uses_explicit_attention(cfg, T, dtype, device):
        attn += 2 * F32 * B * cfg.n_heads * T * T
    return 2 * F32 * BT * cfg.d_model + max(ffn, attn) // tp


def estimate_train_memory(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    dtype: torch.dtype | str,
    world_size: int = 1,
    mode: Mode = "single",
    doc_masking: bool = False,
    device: str = "cpu",
    fused_loss: bool | None = None,
) -> dict[str, int]:
    """Bytes per process of one training step (see the module doc for what is counted).

    Parts: params, grads, optimizer (m, v), weight_copies, activations (end of the forward),
    logits (loss-head buffers), optimizer_step (its temporaries), ddp_buckets, fsdp_unsharded.
    Moments: loss_backward, layers_backward (the worst layer of the backward), optimizer_step_total;
    `peak` is the largest. `doc_masking`: the mixture's document masking (a per-row attention
    mask); `device` "cuda" means the fused AdamW (no temporaries); `fused_loss`: the loss through
    `Transformer.forward(..., targets=...)` (model/fused_ce.py) instead of materialised logits
    (None: what the trainer does, `fused_loss_default`)."""
    if model_cfg.vocab_size is None:
        raise ValueError("model.vocab_size must be set to estimate memory (take it from the token store)")
    if mode not in ("single", "ddp", "fsdp"):
        raise ValueError(f"mode={mode!r}: expected 'single', 'ddp' or 'fsdp'")
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be >= 1")
    dt = _dtype(dtype)
    if fused_loss is None:
        fused_loss = fused_loss_default(model_cfg, train_cfg, device)
    B, T, L = train_cfg.micro_batch, train_cfg.seq_len, model_cfg.n_layers
    ckpt = train_cfg.activation_checkpointing
    counts = param_count(model_cfg)
    N = counts["total"]
    shard = world_size if mode == "fsdp" else 1
    params, grads, optimizer = (-(-k * F32 * N // shard) for k in (1, 1, 2))
    mm = matmul_weights(model_cfg)
    # the fused loss casts the head's weight itself and keeps no copy
    head_copy = 0 if fused_loss else mm["lm_head"]
    copies = weight_copy_bytes(mm, L, dt, head_copy, ckpt)
    acts = activation_bytes(model_cfg, B, T, dt, doc_masking, ckpt, fused_loss, device)
    loss = logits_bytes(model_cfg, B, T, dt, fused_loss, loss_chunk(model_cfg, device))
    step_tmp = 0 if device.startswith("cuda") else 2 * F32 * mm["largest_tensor"]
    ddp = F32 * N if mode == "ddp" and world_size > 1 else 0
    fsdp = 0
    if mode == "fsdp" and world_size > 1:
        root = N - L * counts["per_layer"]
        fsdp = F32 * (root + 2 * counts["per_layer"]) + F32 * counts["per_layer"]
    base = params + optimizer + copies + ddp + fsdp
    accumulated = grads if train_cfg.grad_accum > 1 else 0
    loss_backward = base + accumulated + acts + loss

    # backward of the block k-th from the top: the blocks above are done (their activations freed,
    # their gradients allocated), this one holds its activations (recomputed under checkpointing)
    layer = layer_activation_bytes(model_cfg, B, T, dt, doc_masking, device)
    kept = kept_layer_bytes(model_cfg, B, T, dt, ckpt, doc_masking, device)
    head_grads = F32 * (N - L * counts["per_layer"]) // shard
    layer_grads = F32 * counts["per_layer"] // shard
    shared = held_once_bytes(model_cfg, B, T, dt, doc_masking, device, ckpt) + I64 * B * (2 * T + 1)
    transient = layer_backward_transient(model_cfg, B, T, dt, device)
    layers_backward = 0
    for done in range(L):
        g = grads if accumulated else head_grads + (done + 1) * layer_grads
        held = (L - done - 1) * kept + layer
        layers_backward = max(layers_backward, base + g + held + shared + transient)
    optimizer_step = params + grads + optimizer + step_tmp + ddp
    return {
        "params": params,
        "grads": grads,
        "optimizer": optimizer,
        "weight_copies": copies,
        "activations": acts,
        "logits": loss,
        "optimizer_step": step_tmp,
        "ddp_buckets": ddp,
        "fsdp_unsharded": fsdp,
        "loss_backward": loss_backward,
        "layers_backward": layers_backward,
        "optimizer_step_total": optimizer_step,
        "peak": max(loss_backward, layers_backward, optimizer_step),
    }


def weight_copy_bytes(
    mm: dict[str, int], layers: int, dtype: torch.dtype, head_copy: int, checkpointing: bool | str, tp: int = 1
) -> int:
    """Bytes of the bf16/fp16 weight copies autocast makes (none in fp32): every block's without
    checkpointing (each matmul saves its copy for its backward), one block's with it (full or
    selective: the casts are recomputed with the block, and train/device.py turns autocast's
    cache off so the forward does not keep them either); plus the head's copy."""
    if dtype == torch.float32:
        return 0
    blocks = min(layers, 1) if checkpointing else layers
    return dtype.itemsize * (blocks * mm["per_layer"] // tp + head_copy)


def profiled_peak_bytes(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(peak, result): the most bytes that blocks allocated while `fn()` runs held at once on the
    CPU, read from torch.profiler's allocation events (every CPU allocation and free is reported
    with the profiler's running total). Blocks that existed before the call (parameters, optimizer
    state) are not in the total: add them. The CUDA equivalent is torch.cuda.max_memory_allocated."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    peak = 0
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            peak = max(peak, int(event.extra_fields.total_allocated))
        stack.extend(event.children)
    return peak, result


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (a shared storage counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def context_parallel_layer_bytes(cfg: ModelConfig, B: int, T: int, dtype: torch.dtype | str, doc_masking: bool, cp: int) -> int:
    """`layer_activation_bytes` of one block on one of `cp` context-parallel ranks
    (train/context_parallel.py): everything per token is that of T/cp tokens, except that the
    attention keeps the all-gathered K and V of the whole row (after the GQA repeat, 2·c·B·T·hq
    instead of 2·c·B·(T/cp)·hq) and SDPA's additive mask of T/cp queries by T keys (c·T/cp·T, ·B
    with document masking; context parallelism always passes a mask). RoPE tables are per row."""
    c = _dtype(dtype).itemsize
    t = T // cp
    hd = cfg.d_model // cfg.n_heads
    # the SDPA path ("cuda" never picks the explicit kernel), no mask term: the cp mask is added below
    layer = layer_activation_bytes(cfg, B, t, dtype, doc_masking=False, device="cuda")
    if cfg.sliding_window is not None:
        layer -= c * t * t
    if c != F32 and cfg.position == "rope" and not (cfg.qk_norm and cfg.norm == "rmsnorm"):
        layer += 4 * c * t * hd * (B - 1)  # per-row RoPE casts
    return layer + 2 * c * B * (T - t) * cfg.n_heads * hd + c * (B if doc_masking else 1) * t * T


def context_parallel_activation_bytes(
    cfg: ModelConfig,
    B: int,
    T: int,
    dtype: torch.dtype | str,
    doc_masking: bool = False,
    cp: int = 1,
    fused_loss: bool = False,
) -> int:
    """`activation_bytes` on one of `cp` context-parallel ranks, no activation checkpointing: the
    blocks' `context_parallel_layer_bytes`, the per-row RoPE tables and the head of T/cp tokens."""
    if cp == 1:
        return activation_bytes(cfg, B, T, dtype, doc_masking, fused_loss=fused_loss)
    t = T // cp
    layer = context_parallel_layer_bytes(cfg, B, T, dtype, doc_masking, cp)
    return (
        cfg.n_layers * layer + _shared_bytes(cfg, B, t, dtype, True) + head_activation_bytes(cfg, B, t, dtype, True, fused_loss)
    )
