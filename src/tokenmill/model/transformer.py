"""A Llama-style decoder-only transformer in one readable file.

    idx ─► embed_tokens ─► [ x + Attn(RMSNorm(x)) ; x + MLP(RMSNorm(x)) ] × L ─► RMSNorm ─► lm_head

- RMSNorm pre-norm (statistics in fp32, like HF `LlamaRMSNorm`);
- rotary position embeddings, "rotate-half" convention (HF Llama), tables precomputed up to
  `max_seq_len` in fp32 and kept as non-persistent buffers (never written to checkpoints);
- grouped-query attention: `n_kv_heads` key/value heads shared by `n_heads // n_kv_heads`
  query heads each (head i uses kv head i // n_rep, as HF `repeat_kv`);
- attention through `F.scaled_dot_product_attention(is_causal=True)`, so CUDA picks the
  flash / memory-efficient kernels; on CPU in bf16 at short rows (T <= 256) through
  `explicit_attention` (two batched matmuls around an fp32 softmax), which torch's CPU flash
  kernel is 1.4-3x slower than there (see "Explicit attention" below);
- document masking for packed rows (Llama 3, Dubey et al. 2024): `forward(idx, positions, segments)`
  takes per-token RoPE positions and a per-token document index; a query then sees only keys
  at or before it in the same document (block-diagonal causal). See "Document masking" below
  for the two kernels and their trade-off;
- SwiGLU MLP: down(silu(gate(x)) * up(x)), no biases anywhere (q/k/v and gate/up each one fused matmul);
- init: normal(0, init_std) for every matrix, residual output projections (o_proj, down_proj)
  scaled by 1/sqrt(2·n_layers) (GPT-2 / nanoGPT), norm gains 1.

Options (ModelConfig; the defaults are exactly the model above): LayerNorm instead of RMSNorm, GELU
FFN (up/down, hidden 4·d), learned absolute positions (`embed_positions`) instead of RoPE, RoPE
linear/NTK scaling, QK-norm (`q_norm`/`k_norm` per head, before RoPE), sliding-window attention
(AND-ed with causal / explicit and document masks; always the dense SDPA mask path), an explicit
`attn_mask` [B, T, T] replacing the causal rule (MLM, prefix LM), a z-loss helper
(`Transformer.z_loss`), a Mixture-of-Experts FFN (moe.py; `aux_loss()`, `moe_stats()`) and μP
(mup.py: init, attention scale, output multiplier; the LR multipliers live in the optimizer).

Module names follow HF `LlamaForCausalLM` (embed_tokens, layers.i.self_attn.o_proj,
layers.i.mlp.down_proj, input_layernorm, post_attention_layernorm, norm, lm_head) except the fused
projections: layers.i.self_attn.qkv_proj (q, k and v in one matmul) and layers.i.mlp.gate_up_proj
(gate and up in one), laid out as model/fused.py describes. A state dict with HF's separate
q/k/v_proj and gate/up_proj matrices (an old checkpoint, an HF import) loads into them; the HF
export splits them again.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import Any, Callable, Iterable, Literal, NamedTuple, TypeVar

import torch
import torch.utils.checkpoint
import torch.nn.functional as F
from torch import nn

from tokenmill.model.config import ModelConfig, shape_problem
from tokenmill.model.rope import rope_tables, tables_for  # noqa: F401  (rope_tables: re-exported)
from tokenmill.model import fused, mup
from tokenmill.model.fused_ce import IGNORE, fused_chunk, linear_cross_entropy, loss_kernel
from tokenmill.model.moe import MoE

try:  # FlexAttention (torch >= 2.5). Only the CUDA path needs it: CPU must import without it.
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # pragma: no cover - depends on the installed torch
    create_block_mask = flex_attention = None  # type: ignore[assignment]

DocMaskBackend = Literal["auto", "sdpa", "flex"]
# train.activation_checkpointing: False (keep everything), True (recompute each whole block) or
# "selective" (recompute all but the matmuls' and the attention kernels' outputs, SELECTIVE_SAVE)
CheckpointMode = bool | Literal["selective"]
# What the attention layers receive: None (plain causal), a boolean SDPA mask, or a BlockMask.
AttnMask = Any


def resolve_ffn_hidden(cfg: ModelConfig) -> int:
    """FFN hidden size: the configured one, else 4·d for GELU, else (SwiGLU) int(8/3·d) rounded up
    to a multiple of 64 (SwiGLU's third matrix is paid for with a narrower hidden layer)."""
    if cfg.ffn_hidden is not None:
        return int(cfg.ffn_hidden)
    if cfg.ffn == "gelu":
        return 4 * cfg.d_model
    hidden = int(8 * cfg.d_model / 3)
    return 64 * math.ceil(hidden / 64)


def validate_config(cfg: ModelConfig) -> None:
    """Raise ValueError naming the field when a ModelConfig cannot build a model."""
    if cfg.vocab_size is None or cfg.vocab_size <= 0:
        raise ValueError("model.vocab_size must be set (take it from the token store) before building")
    problem = shape_problem(cfg)
    if problem is not None:
        raise ValueError(problem)
    if cfg.n_layers <= 0 or cfg.max_seq_len <= 0:
        raise ValueError("model.n_layers and model.max_seq_len must be positive")
    if cfg.sliding_window is not None and cfg.sliding_window <= 0:
        raise ValueError(f"model.sliding_window={cfg.sliding_window} must be positive (or None)")
    if cfg.rope_scaling_factor <= 0:
        raise ValueError(f"model.rope_scaling_factor={cfg.rope_scaling_factor} must be positive")
    if cfg.mup_base_width <= 0:
        raise ValueError(f"model.mup_base_width={cfg.mup_base_width} must be positive")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


def make_norm(cfg: ModelConfig, dim: int) -> nn.Module:
    """RMSNorm (default) or bias-free LayerNorm (weight named `weight` either way)."""
    if cfg.norm == "layernorm":
        return nn.LayerNorm(dim, eps=cfg.norm_eps, bias=False)
    return RMSNorm(dim, cfg.norm_eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, hd]; cos/sin: [T, hd] (shared positions) or [B, 1, T, hd] (per-row positions).

    Rotates channel pairs (i, i + hd/2) by angle t·f_i.
    """
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------- document masking
# A packed row holds several documents. With `segments` (a document index per token) attention
# is block-diagonal causal: query t sees key s iff s <= t and both lie in the same document.
# Two kernels build it:
# - SDPA with a boolean mask [B, 1, T, T]: works everywhere (the CPU path). It costs B·T² bytes
#   for the mask (64 MiB at B=16, T=2048) and, on CUDA, loses the flash kernel (a mask sends
#   SDPA to the memory-efficient or math kernel), and every masked-out tile is still computed.
# - FlexAttention with a BlockMask (CUDA, torch >= 2.5 with Triton): the mask is a per-128×128
#   tile index, O(B·(T/128)²), and tiles wholly outside every document are skipped, so a row of
#   short documents costs less than plain causal attention. Costs: a torch.compile on first use
#   (and once per new (B, T) shape), and building the BlockMask once per forward.
# "auto" picks flex on CUDA when it is available and SDPA otherwise.


def _document_runs(segments: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B, T] run index: 0 for the first document of a row, +1 at every change.

    Masking compares run indices rather than raw labels, so a label reused later in the same row
    (a loader bug, or a pad label on both sides) can never join two separate spans.
    """
    change = (segments[:, 1:] != segments[:, :-1]).to(torch.int32)
    return torch.cat([torch.zeros_like(change[:, :1]), change.cumsum(1, dtype=torch.int32)], dim=1)


def document_positions(segments: torch.Tensor) -> torch.Tensor:
    """Position ids [B, T] (int64) that restart at 0 at every document boundary of `segments`."""
    B, T = segments.shape
    t = torch.arange(T, device=segments.device).expand(B, T)
    starts_here = torch.ones_like(segments, dtype=torch.bool)
    starts_here[:, 1:] = segments[:, 1:] != segments[:, :-1]
    start = torch.where(starts_here, t, torch.zeros_like(t)).cummax(dim=1).values
    return t - start


def same_document_mask(segments: torch.Tensor) -> torch.Tensor:
    """Boolean [B, 1, T, T]: True where query t and key s lie in the same document (no causal rule)."""
    runs = _document_runs(segments)
    return (runs[:, :, None] == runs[:, None, :]).unsqueeze(1)


def document_causal_mask(segments: torch.Tensor) -> torch.Tensor:
    """Boolean SDPA mask [B, 1, T, T]: True where query t may attend to key s (s <= t, same doc)."""
    runs = _document_runs(segments)
    T = runs.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=runs.device).tril()
    return ((runs[:, :, None] == runs[:, None, :]) & causal).unsqueeze(1)


# --------------------------------------------------------------------------- explicit attention
# torch's CPU flash-attention kernel is tuned for long rows: measured on 2 Zen 4 cores in bf16
# (forward + backward, 4 heads of 64), it takes 41 ms at T=128 x 32 rows where two batched matmuls
# around an fp32 softmax take 14 ms, and 40 vs 28 ms at T=256 x 16 rows; from T=512 up it wins, as
# it never stores the T x T probabilities (benchmarks/profile_train_step.py, BENCHMARKS.md). In fp32
# the flash kernel is as fast or faster at every length. So "auto" takes the explicit form on CPU,
# in bf16, up to EXPLICIT_MAX_T; CUDA always keeps SDPA (flash) or FlexAttention.
EXPLICIT_MAX_T = 256
AttnKernel = Literal["auto", "sdpa", "explicit"]


class AdditiveMask(NamedTuple):
    """An fp32 mask added to the attention scores (0 where allowed, -inf elsewhere): [T, T] causal,
    or [B, 1, T, T] block-diagonal causal for packed documents. Marks the explicit path."""

    bias: torch.Tensor


class ContextShard(NamedTuple):
    """The mask of a context-parallel forward (train/context_parallel.py): the queries are this
    rank's share of the row, the keys the whole row, whose K and V `gather` collects from the
    other ranks. `mask` is boolean [B or 1, 1, T_local, T] over the gathered key order."""

    mask: torch.Tensor
    gather: Callable[[torch.Tensor], torch.Tensor]


def attention_kernel(device_type: str, compute_dtype: torch.dtype, T: int, choice: AttnKernel = "auto") -> str:
    """'explicit' or 'sdpa': the kernel a causal (optionally document-masked) attention of rows of
    T tokens runs on this device in this compute dtype. Shared by the model and the memory estimate."""
    if choice == "auto":
        short_bf16_cpu = device_type == "cpu" and compute_dtype == torch.bfloat16 and T <= EXPLICIT_MAX_T
        return "explicit" if short_bf16_cpu else "sdpa"
    if choice not in ("sdpa", "explicit"):
        raise ValueError(f"attn_kernel must be 'auto', 'sdpa' or 'explicit', got {choice!r}")
    return choice


def causal_bias(T: int, device: torch.device, segments: torch.Tensor | None = None) -> AdditiveMask:
    """The AdditiveMask of plain causal attention ([T, T]) or, with `segments`, of document-masked
    causal attention ([B, 1, T, T], the additive form of `document_causal_mask`)."""
    if segments is None:
        return AdditiveMask(torch.full((T, T), float("-inf"), device=device).triu(1))
    allowed = document_causal_mask(segments)
    return AdditiveMask(torch.zeros(allowed.shape, device=device).masked_fill_(~allowed, float("-inf")))


class _ExplicitAttention(torch.autograd.Function):
    """softmax(scale·q·kᵀ + bias)·v with the scores and the softmax in fp32 and the matmuls in
    q's dtype. Saves q, k, v and the fp32 probabilities (4 bytes per score, where plain autograd
    over the same ops would keep 6: the softmax output and its cast for the second matmul)."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
        with torch.autocast(q.device.type, enabled=False):
            acc = torch.promote_types(q.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs
            scores = q @ k.transpose(-1, -2)
            # in place only on a fresh fp32 copy: selective checkpointing keeps the matmul's output
            scores = scores.to(acc).mul_(scale) if scores.dtype != acc else scores * scale
            p = torch.softmax(scores.add_(bias), dim=-1)
            out = p.to(q.dtype) @ v
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        q, k, v, p = ctx.saved_tensors
        with torch.autocast(q.device.type, enabled=False):
            grad_out = grad_out.to(q.dtype)
            grad_v = p.to(q.dtype).transpose(-1, -2) @ grad_out
            dp = (grad_out @ v.transpose(-1, -2)).to(p.dtype)
            # softmax backward: dS = P ⊙ (dP − rowsum(dP ⊙ P)), then the scale of the scores
            # (in dp's buffer: p stays intact for a second backward under retain_graph)
            ds = dp.sub_((dp * p).sum(-1, keepdim=True)).mul_(p).mul_(ctx.scale).to(q.dtype)
            grad_q = ds @ k
            grad_k = ds.transpose(-1, -2) @ q
        return grad_q, grad_k, grad_v, None, None


def explicit_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AdditiveMask, scale: float | None = None
) -> torch.Tensor:
    """Attention of q, k, v [B, H, T, hd] (k, v already repeated to H heads) under an AdditiveMask;
    `scale` None is 1/sqrt(hd), as SDPA's."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    kind = q.device.type
    if torch.is_autocast_enabled(kind):  # as autocast casts SDPA's inputs (QK-norm leaves q, k in fp32)
        dt = torch.get_autocast_dtype(kind)
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    return _ExplicitAttention.apply(q, k, v, mask.bias, float(scale))


@functools.cache
def _triton_present() -> bool:
    return importlib.util.find_spec("triton") is not None


def flex_available(device: torch.device, head_dim: int = 64) -> bool:
    """FlexAttention's fused kernel can run here: CUDA, torch ships it, Triton is present, and the
    head dim is a power of two >= 16 (conservative: the shapes its Triton kernels are tuned for)."""
    return (
        device.type == "cuda"
        and flex_attention is not None
        and _triton_present()
        and head_dim >= 16
        and head_dim & (head_dim - 1) == 0
    )


def window_mask(T: int, window: int, device: torch.device) -> torch.Tensor:
    """[T, T] boolean: True where |t - s| < window (combined with causal it keeps the last `window` keys)."""
    t = torch.arange(T, device=device)
    return (t[:, None] - t[None, :]).abs() < window


def document_block_mask(segments: torch.Tensor) -> Any:
    """FlexAttention BlockMask equivalent to `document_causal_mask(segments)`."""
    if create_block_mask is None:
        raise RuntimeError("this torch has no torch.nn.attention.flex_attention; use the 'sdpa' backend")
    runs = _document_runs(segments)
    B, T = runs.shape

    def doc_causal(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (kv <= q) & (runs[b, q] == runs[b, kv])

    # Compiled mask construction avoids materialising the dense [B, T, T] mask on the GPU.
    return create_block_mask(doc_causal, B, None, T, T, device=runs.device, _compile=runs.is_cuda)


_compiled_flex: Any = None


def _flex_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: Any, scale: float | None = None
) -> torch.Tensor:
    """FlexAttention, compiled on CUDA (its only fused path); eager elsewhere (tests only: slow)."""
    global _compiled_flex
    fn = flex_attention
    if q.is_cuda:
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=False)
        fn = _compiled_flex
    # GQA natively: k/v keep n_kv_heads, no repeat_interleave copy.
    return fn(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads or cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        d = cfg.d_model
        # q, k and v in one matmul, grouped by kv head (model/fused.py: whole heads per TP rank)
        self.qkv_proj = nn.Linear(d, (self.n_heads + 2 * self.n_kv_heads) * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)
        # QK-norm (Dehghani et al. 2023): bounds attention logits, a common fix for loss spikes at high LR
        self.q_norm = make_norm(cfg, self.head_dim) if cfg.qk_norm else None
        self.k_norm = make_norm(cfg, self.head_dim) if cfg.qk_norm else None
        self.scale = mup.attention_scale(cfg)  # None: SDPA's 1/sqrt(head_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None, mask: AttnMask = None) -> torch.Tensor:
        """mask: None (plain causal), a boolean [B, 1, T, T] SDPA mask, or a FlexAttention BlockMask.
        cos/sin None: no rotary embedding (learned absolute positions)."""
        B, T, _ = x.shape
        # RoPE makes new q and k itself and saves neither: then only v needs copying out
        q, k, v = self.project_qkv(x, copy_qk=cos is None or self.q_norm is not None)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if cos is not None and sin is not None:
            q = apply_rope(q, cos, sin)
            k = apply_rope(k, cos, sin)
        if isinstance(mask, ContextShard):  # keys and values of the whole row, from every cp rank
            k, v, mask = mask.gather(k), mask.gather(v), mask.mask
        if mask is not None and not isinstance(mask, (torch.Tensor, AdditiveMask)):
            y = _flex_attention(q, k, v, mask, self.scale)
        else:
            if k.shape[1] != q.shape[1]:
                rep = q.shape[1] // k.shape[1]
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            if isinstance(mask, AdditiveMask):
                y = explicit_attention(q, k, v, mask, self.scale)
            else:  # mask None keeps is_causal=True, so CUDA can still pick the flash kernel
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=self.scale)
        y = y.transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(y)

    def project_qkv(self, x: torch.Tensor, copy_qk: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q [B, H, T, hd], k and v [B, KV, T, hd]) of x [B, T, d] from the one fused matmul.

        Head counts come from the projection's output, not the config: under tensor parallelism
        (applied from outside, train/tensor_parallel.py) a rank holds n_kv_heads / tp groups."""
        B, T, _ = x.shape
        rep = self.n_heads // self.n_kv_heads
        groups = self.qkv_proj(x).view(B, T, -1, rep + 2, self.head_dim)
        # v, and q and k with copy_qk, are copied out of the fused output: a view that reaches an
        # op saving its input for the backward (SDPA, QK-norm) would keep all of the output
        # alive until then, up to 2·d more bytes per token per layer than separate projections
        # kept (tests/scaling/test_memory.py counts them). q's reshape already copies when rep > 1.
        q = groups[:, :, :, :rep].reshape(B, T, -1, self.head_dim)
        k, v = groups[:, :, :, rep], groups[:, :, :, rep + 1].contiguous()
        if copy_qk:
            q, k = q.contiguous(), k.contiguous()
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # an old checkpoint's separate q/k/v matrices (or HF's) load into the fused one
        names = [prefix + n.removeprefix("self_attn.") for n in fused.SEPARATE_QKV]
        if all(n in state_dict for n in names):
            q, k, v = (state_dict.pop(n) for n in names)
            state_dict[prefix + "qkv_proj.weight"] = fused.pack_qkv(q, k, v, self.head_dim)
        super()._load_from_state_dict(state_dict, prefix, *args)

    @torch.no_grad()
    def init_qkv_(self, std: float, generator: torch.Generator | None) -> None:
        """Draw q, k, v as separate matrices in that order, then pack: the same numbers as the
        separate projections drew (a fused draw would permute them)."""
        w, d = self.qkv_proj.weight, self.qkv_proj.in_features
        parts = [w.new_empty(n * self.head_dim, d) for n in (self.n_heads, self.n_kv_heads, self.n_kv_heads)]
        for part in parts:
            _normal_(part, std, generator)
        w.copy_(fused.pack_qkv(parts[0], parts[1], parts[2], self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = resolve_ffn_hidden(cfg)
        # gate and up in one matmul, rows interleaved (model/fused.py: matching columns per TP rank)
        self.gate_up_proj = nn.Linear(cfg.d_model, 2 * hidden, bias=False)
        self.down_proj = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pairs = self.gate_up_proj(x).unflatten(-1, (-1, 2))
        return self.down_proj(F.silu(pairs[..., 0]) * pairs[..., 1])

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # an old checkpoint's separate gate/up matrices (or HF's) load into the fused one
        names = [prefix + n for n in fused.SEPARATE_GATE_UP]
        if all(n in state_dict for n in names):
            gate, up = (state_dict.pop(n) for n in names)
            state_dict[prefix + "gate_up_proj.weight"] = fused.pack_gate_up(gate, up)
        super()._load_from_state_dict(state_dict, prefix, *args)

    @torch.no_grad()
    def init_gate_up_(self, std: float, generator: torch.Generator | None) -> None:
        """Draw gate, then up, as separate matrices, then interleave (the separate layout's numbers)."""
        w = self.gate_up_proj.weight
        gate, up = w.new_empty(w.shape[0] // 2, w.shape[1]), w.new_empty(w.shape[0] // 2, w.shape[1])
        _normal_(gate, std, generator)
        _normal_(up, std, generator)
        w.copy_(fused.pack_gate_up(gate, up))


class GeluMLP(nn.Module):
    """GPT-2 style FFN: down(gelu(up(x))) (tanh approximation), no biases."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = resolve_ffn_hidden(cfg)
        self.up_proj = nn.Linear(cfg.d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))


def make_ffn(cfg: ModelConfig) -> nn.Module:
    expert: type[nn.Module] = GeluMLP if cfg.ffn == "gelu" else MLP
    return MoE(cfg, expert) if cfg.n_experts > 0 else expert(cfg)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = make_norm(cfg, cfg.d_model)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = make_norm(cfg, cfg.d_model)
        self.mlp = make_ffn(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None, mask: AttnMask = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


# --------------------------------------------------------------------------- selective checkpointing
# Op-level selective activation checkpointing (the idea of Korthikanti et al. 2022 §5: recompute
# what is cheap per byte; torchtitan's "op" mode keeps matmuls and the SDPA kernels). The outputs
# of every matmul (q/k/v, o, gate-up/up, down; the explicit attention's two batched matmuls) and
# of the fused attention kernels are kept; everything else in a block (the norms, the bf16 casts,
# RoPE, the q/k/v copies, SiLU and its product, the explicit softmax) is recomputed in backward
# from the block's input and those outputs: elementwise work only, no matmul, where full
# checkpointing redoes the whole forward (~1/3 more compute). scaling/memory.py counts what it
# keeps (`selective_saved_bytes`).
def _ops(*names: str) -> frozenset[Any]:
    """The aten / higher-order ops of these names this torch build has (CUDA-only kernels included)."""
    found = []
    for name in names:
        space, _, op = name.rpartition(".")
        packet = getattr(getattr(torch.ops, space), op, None)
        if packet is not None:
            found.append(getattr(packet, "default", packet))
    return frozenset(found)


SELECTIVE_SAVE = _ops(
    "aten.mm",
    "aten.addmm",
    "aten.bmm",
    "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_flash_attention",
    "aten._scaled_dot_product_efficient_attention",
    "aten._scaled_dot_product_cudnn_attention",
    "higher_order.flex_attention",
)


def _selective_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> torch.utils.checkpoint.CheckpointPolicy:
    policy = torch.utils.checkpoint.CheckpointPolicy
    return policy.MUST_SAVE if op in SELECTIVE_SAVE else policy.PREFER_RECOMPUTE


def selective_checkpoint_contexts() -> tuple[Any, Any]:
    """The (forward, recompute) contexts of torch.utils.checkpoint under the selective policy."""
    return torch.utils.checkpoint.create_selective_checkpoint_contexts(_selective_policy)


_Part = TypeVar("_Part", bound=nn.Module)


def held(part: _Part | None, name: str) -> _Part:
    """A part of a Transformer that a pipeline stage not running it has dropped (then None)."""
    if part is None:
        raise RuntimeError(f"this model holds no {name}: it is a pipeline stage that does not run it")
    return part


class Transformer(nn.Module):
    """Decoder-only LM. `forward(idx[B, T], positions=None, segments=None) -> logits[B, T, vocab]`.

    T <= max_seq_len. `doc_mask_backend` ("auto" | "sdpa" | "flex") picks the kernel used when
    `segments` is given; it is a plain attribute (not config, not in checkpoints): a kernel choice
    belongs to the machine, and both compute the same function.
    """

    doc_mask_backend: DocMaskBackend = "auto"
    attn_kernel: AttnKernel = "auto"  # "explicit" / "sdpa" force a kernel (tests, benchmarks)
    loss_kernel: str = "auto"  # "fused" / "plain" force the loss path (fused_ce.loss_kernel)
    context_parallel: Any = None  # train/context_parallel.py's ContextParallel: training forward on a share of each row
    rope_cos: torch.Tensor  # buffers registered in __init__ when cfg.position == "rope"
    rope_sin: torch.Tensor
    # A pipeline stage (train/pipeline_parallel.py prune_to_stage) drops the parts it does not run:
    # they are None there, and its blocks a ModuleDict keyed by their index in the whole model. A
    # whole model has them all; `held` gets one, failing clearly where a stage has none.
    embed_tokens: nn.Embedding | None
    norm: nn.Module | None
    lm_head: nn.Linear | None
    layers: nn.ModuleList | nn.ModuleDict

    def __init__(self, cfg: ModelConfig, generator: torch.Generator | None = None):
        super().__init__()
        validate_config(cfg)
        self.config = cfg
        assert cfg.vocab_size is not None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.embed_positions = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.position == "learned" else None
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.activation_checkpointing: CheckpointMode = False  # set by the trainer (train.activation_checkpointing)
        self.supports_targets = True  # forward(..., targets=) returns the fused per-token NLL
        self.norm = make_norm(cfg, cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.output_mult = mup.output_multiplier(cfg)  # 1/width_mult under μP, else 1 (not applied)
        if cfg.position == "rope":
            cos, sin = tables_for(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters(generator)

    def set_rope(self, cfg: ModelConfig) -> None:
        """Rebuild the RoPE tables for `cfg` (a curriculum phase's length and scaling, model/rope.py);
        the weights are untouched. `cfg` must describe the same parameters."""
        if cfg.position != "rope":
            return
        cos, sin = tables_for(cfg)
        self.rope_cos = cos.to(self.rope_cos.device)
        self.rope_sin = sin.to(self.rope_sin.device)
        self.config = cfg

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """normal(0, init_std) everywhere; o_proj/down_proj std / sqrt(2L); norm gains 1.

        Pass a CPU `generator` for an init that does not touch (or depend on) global RNG state.
        """
        modules = dict(self.named_modules())
        for name, p in self.named_parameters():  # shared (tied) parameters are visited once
            owner = modules[name.rpartition(".")[0].rpartition(".")[0]]  # "layers.0.self_attn"
            if p.ndim == 1:
                p.fill_(1.0)
            elif isinstance(owner, Attention) and name.endswith("qkv_proj.weight"):
                owner.init_qkv_(self.init_std_of(name), generator)
            elif isinstance(owner, MLP) and name.endswith("gate_up_proj.weight"):
                owner.init_gate_up_(self.init_std_of(name), generator)
            else:
                _normal_(p, self.init_std_of(name), generator)

    def init_std_of(self, name: str) -> float:
        """init_std, / sqrt(2L) for residual outputs (o_proj, down_proj), and under μP / sqrt(width_mult)
        for hidden matrices (variance ∝ 1/fan_in, Yang et al. 2022)."""
        std = self.config.init_std
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            std = std / math.sqrt(2 * self.config.n_layers)
        if mup.is_hidden_matrix(name):
            std = std * mup.hidden_init_scale(self.config)
        return std

    def forward(
        self,
        idx: torch.Tensor,
        positions: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        targets: torch.Tensor | None = None,
        prebuilt_mask: AttnMask = None,
    ) -> torch.Tensor:
        """Logits [B, T, V] for token ids idx[B, T]; with `targets` [B, T] (-100: not counted), the
        per-token NLL [B, T] (fp32, 0 where not counted) instead: on a CPU (or beyond
        fused_ce.PLAIN_MAX_LOGIT_BYTES of logits) by the fused output projection + cross-entropy
        (`fused_ce`), which never materialises the logits; on CUDA from the whole logits, which is
        faster there (`fused_ce.loss_kernel`; `self.loss_kernel` forces either). Passing
        targets through forward (nanoGPT's way) keeps DDP, FSDP2 and torch.compile wrappers in the
        path.

        positions: int [B, T] position of each token (None: 0..T-1 in every row).
        segments: int [B, T] document index of each token; a document is a run of equal values,
            and attention stays inside it (None: plain causal attention over the whole row).
        attn_mask: bool [B, T, T], True where query t may attend to key s. It REPLACES the causal
            rule (bidirectional MLM, prefix LM); segments and sliding_window are still AND-ed in.
        prebuilt_mask: what `self.mask_for(T, device, segments, attn_mask)` returns for these
            inputs under the same autocast, built ahead of the forward (the trainer builds it once
            per micro-batch when it stages the batch: `prebuild_mask`); None: built here.
        A packed row run with `segments` and `document_positions(segments)` gives each document
        the logits it would get alone.
        """
        self._check_inputs(idx, positions, segments, attn_mask)
        if self.context_parallel is not None and self.training and attn_mask is None:
            return self.context_parallel.forward(self, idx, positions, segments, targets)
        x = self.embed(idx, positions)
        cos, sin, mask = self.block_inputs(idx.shape[1], idx.device, positions, segments, attn_mask, prebuilt_mask)
        for layer in self.blocks():
            x = self.run_block(layer, x, cos, sin, mask)
        return self.output(x, targets)

    def blocks(self) -> Iterable[nn.Module]:
        """The blocks this model holds, in order (all of them, or a pipeline stage's)."""
        return self.layers.values() if isinstance(self.layers, nn.ModuleDict) else self.layers

    # The pieces of forward, in order. A pipeline stage (train/pipeline_parallel.py) runs the ones
    # its part of the model holds: embed on the first stage, blocks everywhere, output on the last.
    def embed(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings [B, T, d] (plus learned absolute positions when configured)."""
        x = held(self.embed_tokens, "embed_tokens")(idx)
        if self.embed_positions is not None:
            T = idx.shape[1]
            x = x + self.embed_positions(torch.arange(T, device=idx.device) if positions is None else positions)
        return x

    def block_inputs(
        self,
        T: int,
        device: torch.device,
        positions: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        prebuilt_mask: AttnMask = None,
    ) -> tuple[Any, Any, AttnMask]:
        """(cos, sin, mask) every block of a forward over rows of T tokens takes; the mask is
        `prebuilt_mask` when one is given (see forward), else built here once for all blocks.

        RoPE: cos/sin are slices (or a per-token gather) of the buffers `rope_cos`/`rope_sin`, and
        `apply_rope` is plain elementwise torch, so under torch.compile the rotation is traced into
        the model's one graph, where Inductor fuses the gather, casts, products and rotate_half into
        the pointwise kernels reading q and k (no graph break: tests/model/test_fused.py)."""
        cos = sin = None
        if self.embed_positions is None and positions is None:
            cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        elif self.embed_positions is None:  # gather per token; [B, 1, T, hd] broadcasts over heads
            cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)
        mask = self.mask_for(T, device, segments, attn_mask) if prebuilt_mask is None else prebuilt_mask
        return cos, sin, mask

    def mask_for(
        self, T: int, device: torch.device, segments: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None
    ) -> AttnMask:
        """The attention mask every block of a forward over rows of T tokens takes, in the form the
        kernel chosen here consumes (AdditiveMask, FlexAttention BlockMask, boolean or None). The
        kernel choice reads autocast's dtype: call it under the autocast the forward runs in."""
        if attn_mask is None and self.config.sliding_window is None:
            if self.uses_explicit_attention(T, device):
                return causal_bias(T, device, segments)
            return None if segments is None else self.attention_mask(segments)
        return self.dense_mask(T, device, segments, attn_mask)

    def run_block(self, layer: nn.Module, x: torch.Tensor, cos: Any, sin: Any, mask: AttnMask) -> torch.Tensor:
        mode = self.activation_checkpointing
        if mode and self.training and torch.is_grad_enabled():
            # Keep only each block's input; backward recomputes the block (non-reentrant: works
            # with autocast, DDP and FSDP2, and replays the same RNG-free computation exactly).
            # "selective" also keeps the outputs of the ops in SELECTIVE_SAVE, so the recompute
            # runs only the cheap elementwise ops (norms, RoPE, SwiGLU, softmax, casts).
            if mode == "selective":
                return torch.utils.checkpoint.checkpoint(
                    layer, x, cos, sin, mask, use_reentrant=False, context_fn=selective_checkpoint_contexts
                )
            return torch.utils.checkpoint.checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
        return layer(x, cos, sin, mask)

    def output(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Final norm, then the logits, or with `targets` the fused per-token NLL (see forward)."""
        h = held(self.norm, "norm")(x)
        lm_head = held(self.lm_head, "lm_head")
        scale = self.output_mult if self.config.mup else 1.0
        if targets is not None:
            vocab = lm_head.weight.shape[0]
            if loss_kernel(h.device.type, targets.numel(), vocab, self.loss_kernel) == "fused":
                return linear_cross_entropy(h, lm_head.weight, targets, scale, fused_chunk(h.device.type, vocab))
            logits = lm_head(h).float()
            logits = logits * scale if scale != 1.0 else logits
            nll = F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE, reduction="none")
            return nll.view(targets.shape)
        logits = lm_head(h)
        if self.config.mup:
            logits = logits * self.output_mult
        return logits

    def dense_mask(
        self, T: int, device: torch.device, segments: torch.Tensor | None, attn_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Boolean SDPA mask [B or 1, 1, T, T] = (attn_mask or causal) & window & same document.

        Always the dense SDPA path: an arbitrary attn_mask has no block structure to exploit, and a
        sliding window over short rows rarely pays for FlexAttention's compile.
        """
        if attn_mask is not None:
            mask = attn_mask.unsqueeze(1)
        else:
            mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None, None]
        if self.config.sliding_window is not None:
            mask = mask & window_mask(T, self.config.sliding_window, device)
        if segments is not None:
            mask = mask & same_document_mask(segments)
        return mask

    def z_loss(self, logits: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """config.z_loss · mean(logsumexp(logits)²) over the positions where `keep` is True (all if
        None); a scalar 0 when the coefficient is 0. The trainer adds it to the objective's loss."""
        if self.config.z_loss == 0:
            return logits.new_zeros((), dtype=torch.float32)
        return self.config.z_loss * z_loss(logits, keep)

    def moe_layers(self) -> list[MoE]:
        return [m for m in self.modules() if isinstance(m, MoE)]

    def aux_loss(self) -> torch.Tensor:
        """Σ over MoE layers of moe_aux_coef·load-balancing + moe_z_coef·router z-loss, from the last
        forward (a scalar 0 for a dense model). Add it to the training loss."""
        total = held(self.lm_head, "lm_head").weight.new_zeros((), dtype=torch.float32)
        for m in self.moe_layers():
            if m.last_aux is not None and m.last_z is not None:
                total = total + self.config.moe_aux_coef * m.last_aux + self.config.moe_z_coef * m.last_z
        return total

    def moe_stats(self) -> dict[str, Any]:
        """Expert utilization of the last forward for the event log: per layer, the fraction of the
        routing slots each expert received (1/n each when balanced), plus the mean aux loss."""
        # a forward sets both the utilization and the aux loss of every MoE layer
        last = [
            (m.last_utilization, m.last_aux)
            for m in self.moe_layers()
            if m.last_utilization is not None and m.last_aux is not None
        ]
        if not last:
            return {}
        return {
            "expert_utilization": [u.tolist() for u, _ in last],
            "moe_aux": sum(float(a.item()) for _, a in last) / len(last),
        }

    def uses_explicit_attention(self, T: int, device: torch.device) -> bool:
        """Whether causal attention over rows of T tokens takes `explicit_attention` here: the
        compute dtype is autocast's when it is on, else the parameters'."""
        kind = device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else next(self.parameters()).dtype
        return attention_kernel(kind, dtype, T, self.attn_kernel) == "explicit"

    def attention_mask(self, segments: torch.Tensor) -> AttnMask:
        """The document mask for `segments` in the form the chosen backend consumes."""
        backend = self.doc_mask_backend
        if backend == "auto":
            head_dim = self.config.d_model // self.config.n_heads
            backend = "flex" if flex_available(segments.device, head_dim) else "sdpa"
        if backend == "flex":
            return document_block_mask(segments)
        if backend == "sdpa":
            return document_causal_mask(segments)
        raise ValueError(f"doc_mask_backend must be 'auto', 'sdpa' or 'flex', got {backend!r}")

    def _check_inputs(
        self,
        idx: torch.Tensor,
        positions: torch.Tensor | None,
        segments: torch.Tensor | None,
        attn_mask: torch.Tensor | None = None,
    ) -> None:
        if idx.ndim != 2:
            raise ValueError(f"expected token ids of shape [B, T], got {tuple(idx.shape)}")
        T = idx.shape[1]
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence of {T} tokens exceeds model.max_seq_len={self.config.max_seq_len}")
        for name, t in (("positions", positions), ("segments", segments)):
            if t is None:
                continue
            if t.shape != idx.shape or t.dtype.is_floating_point or t.dtype == torch.bool:
                raise ValueError(f"{name} must be an integer tensor of shape {tuple(idx.shape)}, got {t.dtype} {tuple(t.shape)}")
        if attn_mask is not None and (attn_mask.dtype != torch.bool or attn_mask.shape != (idx.shape[0], T, T)):
            raise ValueError(
                f"attn_mask must be a bool tensor of shape {(idx.shape[0], T, T)}, got {attn_mask.dtype} {tuple(attn_mask.shape)}"
            )
        # Range check on CPU only: on CUDA it would cost a host sync every step, and an
        # out-of-range gather there fails loudly (device-side assert) rather than silently. Not
        # under torch.compile either: reading the values breaks the graph, and Inductor's own
        # bounds assert on the gather fails loudly too.
        if positions is not None and positions.device.type == "cpu" and positions.numel() and not torch.compiler.is_compiling():
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0 or hi >= self.config.max_seq_len:
                raise ValueError(
                    f"positions span [{lo}, {hi}], outside the RoPE table [0, {self.config.max_seq_len - 1}] (model.max_seq_len)"
                )

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count, tied weights counted once.

        exclude_embeddings=True leaves out the input embedding table (vocab·d; a lookup, not a
        matmul) — Kaplan et al.'s "non-embedding" N. An untied lm_head stays in the count; a tied
        one is the embedding table and so leaves with it.
        """
        n = sum(p.numel() for p in self.parameters())  # parameters() deduplicates shared tensors
        if exclude_embeddings:
            n -= held(self.embed_tokens, "embed_tokens").weight.numel()
        return n


def z_loss(logits: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """mean(logsumexp(logits)²) in fp32 (PaLM's z-loss, Chowdhery et al. 2022): pulls the log-partition toward 0
    so the softmax normaliser cannot drift and overflow in bf16. keep: bool [B, T] positions to count."""
    lse2 = torch.logsumexp(logits.float(), dim=-1).pow(2)
    if keep is None:
        return lse2.mean()
    return (lse2 * keep).sum() / keep.sum().clamp(min=1)


def _normal_(p: torch.Tensor, std: float, generator: torch.Generator | None) -> None:
    if generator is None or p.device == generator.device:
        nn.init.normal_(p, 0.0, std, generator=generator)
    else:  # draw on the generator's device, copy over: same numbers wherever the model lives
        p.copy_(torch.empty(p.shape, dtype=p.dtype).normal_(0.0, std, generator=generator))
