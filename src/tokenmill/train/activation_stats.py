"""Activation RMS and attention-logit maximum per layer ("aggressive monitoring":
activation magnitudes per layer; growing attention logits are the classic precursor of a loss
spike, the reason for QK-norm and z-loss).

`ActivationProbe.measure(batch)` runs one no-grad forward of a few rows of a batch through the
bare (uncompiled, unwrapped) model with forward hooks on its blocks and attention modules; the
hooks exist only for the length of that call, so every other forward pays nothing. It never
touches a gradient, an optimizer state or a random generator: training is the same with it. The
forward is the causal one of a packed batch (its positions and document segments), whatever the
training objective: under MLM / span / prefix-LM the magnitudes are those of that forward.

- act_rms[l]: sqrt(mean(h²)) of block l's output h (the residual stream), in fp32;
- attn_logit_max[l]: the largest pre-softmax score scale·q·kᵀ of layer l over the *allowed*
  (query, key) pairs (causal, document mask, sliding window or an explicit mask: whatever mask
  the layer received). SDPA and FlexAttention never materialise the scores, so the hook rebuilds
  q and k from the layer's input as the layer does (projections, QK-norm, RoPE) and scores
  `queries` query positions per row (evenly spaced, the last one included) against all keys:
  at most rows · queries · T · heads scores per layer, e.g. 4 · 64 · 256 · 4 = 262,144.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from tokenmill.model.transformer import AdditiveMask, Attention, Block, apply_rope, document_causal_mask


def query_rows(T: int, queries: int) -> torch.Tensor:
    """`queries` query positions of 0..T-1, evenly spaced, first and last included (all when T <= queries)."""
    if queries >= T:
        return torch.arange(T)
    return torch.linspace(0, T - 1, queries).round().long().unique()


def rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square of every element, computed in fp32 (a 0-dim tensor: no device sync)."""
    return x.detach().float().pow(2).mean().sqrt()


def allowed_pairs(mask: Any, rows: torch.Tensor, T: int, segments: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """Bool [B or 1, 1, len(rows), T]: may query rows[i] attend to key s under `mask` (the
    argument the attention layer got: None = causal; a bool [B, 1, T, T] mask; an AdditiveMask;
    a FlexAttention BlockMask, which is document-causal over `segments`)."""
    rows = rows.to(device)
    if mask is None:
        return (torch.arange(T, device=device)[None, :] <= rows[:, None])[None, None]
    if isinstance(mask, AdditiveMask):
        bias = mask.bias if mask.bias.ndim == 4 else mask.bias[None, None]
        return bias.index_select(2, rows) == 0
    if isinstance(mask, torch.Tensor):
        return mask.index_select(2, rows).bool()
    if segments is None:
        raise ValueError("a FlexAttention block mask needs the batch's segments to rebuild its pairs")
    return document_causal_mask(segments.to(device)).index_select(2, rows)


def attention_logit_max(
    attn: Attention, x: torch.Tensor, cos: Any, sin: Any, mask: Any, queries: int, segments: torch.Tensor | None = None
) -> torch.Tensor:
    """max over allowed pairs (query rows per `query_rows`, all keys) of scale·q·kᵀ, in fp32 (a
    0-dim tensor), with q and k built from the layer input `x` [B, T, d] as `Attention.forward` does."""
    B, T, _ = x.shape
    q, k, _ = attn.project_qkv(x)
    if attn.q_norm is not None and attn.k_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if cos is not None and sin is not None:
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    rows = query_rows(T, queries).to(x.device)
    scale = attn.scale if attn.scale is not None else 1.0 / math.sqrt(attn.head_dim)
    scores = (q.index_select(2, rows).float() @ k.float().transpose(-2, -1)) * scale  # [B, H, R, T]
    allowed = allowed_pairs(mask, rows, T, segments, x.device)
    return scores.masked_fill(~allowed, float("-inf")).amax()


class ActivationProbe:
    """Per-layer act_rms and attn_logit_max of one batch; see the module docstring."""

    def __init__(self, model: nn.Module, rows: int = 4, queries: int = 64):
        self.model, self.rows, self.queries = model, rows, queries
        self.blocks = [m for m in model.modules() if isinstance(m, Block)]
        self._rms: list[torch.Tensor] = []
        self._logits: list[torch.Tensor] = []
        self._segments: torch.Tensor | None = None

    def _on_block(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        self._rms.append(rms(output))

    def _on_attention(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        x, cos, sin, mask = (*args, None, None, None)[:4]
        with torch.autocast(x.device.type, enabled=False):
            # the hook is registered on Attention modules only (see attach)
            self._logits.append(attention_logit_max(cast(Attention, module), x, cos, sin, mask, self.queries, self._segments))

    @torch.no_grad()
    def measure(self, batch: Any) -> dict[str, list[float]]:
        """{"act_rms": [per block], "attn_logit_max": [per block]} of the first `rows` rows of a
        packed batch (tokens [B, T+1], positions/segments [B, T] or None), in model order."""
        tokens = batch.tokens[: self.rows, :-1]
        kwargs = {
            name: value[: self.rows] for name in ("positions", "segments") if (value := getattr(batch, name, None)) is not None
        }
        self._rms, self._logits = [], []
        self._segments = kwargs.get("segments")
        handles = [b.register_forward_hook(self._on_block) for b in self.blocks]
        handles += [b.self_attn.register_forward_hook(self._on_attention) for b in self.blocks]
        try:
            self.model(tokens, **kwargs)
        finally:
            for h in handles:
                h.remove()
            self._segments = None
        values = torch.stack([*self._rms, *self._logits]).tolist()  # one device sync for all layers
        n = len(self._rms)
        return {"act_rms": values[:n], "attn_logit_max": values[n:]}
