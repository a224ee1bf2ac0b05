"""Output projection + cross-entropy in one pass over token chunks, without the full logits.

The plain path materialises logits [N, V], upcasts them to fp32 (another N·V copy), runs
log-softmax, and in backward walks the same N·V arrays twice more. At the demo's shape (N = 4096
tokens, V = 4096) that is ~200 MB of memory traffic per micro-batch for an op with little
arithmetic, about a sixth of a CPU training step. Here, for each chunk of tokens that fits in
cache, the logits are computed, reduced to the per-token NLL, and turned at once into the
gradient (softmax - onehot), which is multiplied back into dh and dW while still hot; nothing of
size N·V outlives its chunk (the idea of Liger-Kernel's fused linear cross-entropy).

Backward: grad_h of token i only depends on token i, so the saved dh is scaled per token for any
upstream gradient. dW sums over tokens, so the saved dW is exact only when the upstream gradient
is the same for every counted token — the case of a sum or mean of the NLL, which is what
training uses. Any other upstream gradient is handled by recomputing the chunks (exact, slower).
The matmuls run in the autocast dtype when autocast is on (bf16 logits, as `nn.Linear` would give
them), the softmax in fp32, the accumulation of dW in fp32.
"""

from __future__ import annotations

import torch

IGNORE = -100
CHUNK = 512  # tokens per chunk: the fastest of 128..4096 at the demo shape (V = 4096), fp32 and bf16
# On CUDA one cuBLAS product over all of [N, V] and one softmax beat the chunk loop: at N = V = 32768
# on an H200 (bf16) the plain loss's forward + backward took 19.6 ms, the fused one 45.3 ms at
# 512-token chunks and 28.6 ms at 8192 (BENCHMARKS.md, "CUDA"). So CUDA materialises the logits
# while their fp32 copy stays under PLAIN_MAX_LOGIT_BYTES, and beyond it chunks of ~CUDA_CHUNK_BYTES.
PLAIN_MAX_LOGIT_BYTES = 8 << 30
CUDA_CHUNK_BYTES = 1 << 30


def loss_kernel(device_type: str, n_tokens: int, vocab: int, choice: str = "auto") -> str:
    """'fused' or 'plain': how the output projection + cross-entropy of `n_tokens` rows over a
    vocabulary of `vocab` runs on this device. Shared by the model and the memory estimate."""
    if choice == "auto":
        plain = device_type == "cuda" and 4 * n_tokens * vocab <= PLAIN_MAX_LOGIT_BYTES
        return "plain" if plain else "fused"
    if choice not in ("fused", "plain"):
        raise ValueError(f"loss_kernel must be 'auto', 'fused' or 'plain', got {choice!r}")
    return choice


def fused_chunk(device_type: str, vocab: int) -> int:
    """Tokens per chunk of the fused loss: cache-sized on a CPU, ~1 GiB of fp32 logits on CUDA."""
    if device_type != "cuda":
        return CHUNK
    return max(CHUNK, min(8192, CUDA_CHUNK_BYTES // (4 * vocab)))


def _compute_dtype(h: torch.Tensor) -> torch.dtype:
    kind = h.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return h.dtype


def _chunk_pass(
    h: torch.Tensor,
    w: torch.Tensor,
    targets: torch.Tensor,
    scale: float,
    chunk: int,
    dtype: torch.dtype,
    want_grads: bool,
    row_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(nll [N] fp32, dh [N, d] fp32 or None, dW [V, d] fp32 or None) for grad 1 per counted token
    (or `row_weight` per token)."""
    n = h.shape[0]
    hc_all, wc = h.to(dtype), w.to(dtype)
    nll = torch.zeros(n, dtype=torch.float32, device=h.device)
    dh = torch.zeros(n, h.shape[1], dtype=torch.float32, device=h.device) if want_grads else None
    dw = torch.zeros(w.shape, dtype=torch.float32, device=h.device) if want_grads else None
    for s in range(0, n, chunk):
        hc, t = hc_all[s : s + chunk], targets[s : s + chunk]
        logits = (hc @ wc.t()).float()
        if scale != 1.0:
            logits.mul_(scale)
        keep = t != IGNORE
        safe_t = torch.where(keep, t, 0)
        lse = torch.logsumexp(logits, dim=-1)
        nll[s : s + chunk] = torch.where(keep, lse - logits.gather(1, safe_t[:, None]).squeeze(1), 0.0)
        if not want_grads:
            continue
        assert dh is not None and dw is not None  # allocated above whenever want_grads
        g = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
        g[torch.arange(g.shape[0], device=g.device), safe_t] -= 1.0
        weight = keep.float() if row_weight is None else row_weight[s : s + chunk] * keep
        g.mul_((weight * scale)[:, None])
        g = g.to(dtype)
        dh[s : s + chunk] = (g @ wc).float()
        dw.add_((g.t() @ hc).float())
    return nll, dh, dw


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, scale: float, chunk: int, out_shape: tuple[int, ...]
    ):
        dtype = _compute_dtype(h)
        with torch.autocast(h.device.type, enabled=False):
            nll, dh, dw = _chunk_pass(h, w, targets, scale, chunk, dtype, want_grads=True)
        ctx.save_for_backward(h, w, targets, dh, dw)
        ctx.scale, ctx.chunk, ctx.dtype = scale, chunk, dtype
        # Shaped here, not by the caller: a view of the output would trip FSDP2's view check.
        return nll.view(out_shape)

    @staticmethod
    def backward(ctx, grad_nll: torch.Tensor):
        h, w, targets, dh, dw = ctx.saved_tensors
        grad_h, grad_w = _lce_backward(grad_nll, h, w, targets, dh, dw, ctx.scale, ctx.chunk, ctx.dtype)
        return grad_h, grad_w, None, None, None, None


# The backward picks its path from the upstream gradient's values (uniform: scale the saved grads;
# not: recompute). A custom op keeps that choice out of torch.compile's view: traced, the boolean
# index and the branch were graph breaks in every compiled training step (tests/train/test_compilation.py).
@torch.library.custom_op("tokenmill::linear_ce_backward", mutates_args=())
def _lce_backward(
    grad_nll: torch.Tensor,
    h: torch.Tensor,
    w: torch.Tensor,
    targets: torch.Tensor,
    dh: torch.Tensor,
    dw: torch.Tensor,
    scale: float,
    chunk: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    keep = targets != IGNORE
    go = grad_nll.reshape(-1).float()
    counted = go[keep]
    if counted.numel() == 0:
        return torch.zeros_like(h), torch.zeros_like(w)
    if bool((counted == counted[0]).all()):
        c = counted[0]
        return (dh * c).to(h.dtype), (dw * c).to(w.dtype)
    # a non-uniform upstream gradient: dW must be recomputed with it
    with torch.autocast(h.device.type, enabled=False):
        _, dh2, dw2 = _chunk_pass(h, w, targets, scale, chunk, dtype, True, row_weight=go)
    assert dh2 is not None and dw2 is not None  # want_grads=True returns both
    return dh2.to(h.dtype), dw2.to(w.dtype)


@_lce_backward.register_fake
def _(grad_nll, h, w, targets, dh, dw, scale, chunk, dtype):
    return torch.empty_like(h), torch.empty_like(w)


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, scale: float = 1.0, chunk: int = CHUNK
) -> torch.Tensor:
    """Per-token NLL (fp32, the shape of `targets`) of logits = scale · h @ weight.T; exactly 0
    where targets == IGNORE (-100). h [..., d] with one row per target, weight [V, d].
    Differentiable in h and weight."""
    out_shape = tuple(targets.shape)
    if h.shape[:-1] != targets.shape:
        raise ValueError(
            f"linear_cross_entropy wants h [..., d] and targets [...] with the same leading "
            f"shape, got {tuple(h.shape)} and {out_shape}"
        )
    h, targets = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    if not (torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)):
        dtype = _compute_dtype(h)
        with torch.autocast(h.device.type, enabled=False):
            return _chunk_pass(h, weight, targets, scale, chunk, dtype, want_grads=False)[0].view(out_shape)
    return _LinearCrossEntropy.apply(h, weight, targets, float(scale), int(chunk), out_shape)
