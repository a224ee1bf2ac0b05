"""Training objectives. Causal LM with the shift done in exactly one place (`_shift`).

A batch is `tokens[B, T+1]`: the model reads `tokens[:, :-1]` and its output at position t is
scored against `tokens[:, t+1]` (the shift by one of every causal LM). Cross-entropy is computed in
fp32 even when the logits come out of a bf16 autocast region.

Packed batches from the loader carry more than tokens. `clm_loss_batch` / `token_nll_batch` take
any object with these attributes (duck-typed; the loader's `Batch` is one):

    tokens     int  [B, T+1]
    positions  int  [B, T] | None   RoPE position of input token t (None: 0..T-1)
    segments   int  [B, T] | None   document index of input token t (None: no document mask)
    loss_mask  bool [B, T] | None   whether target t, i.e. tokens[:, t+1], counts (None: all)

positions and segments describe the model's inputs; loss_mask describes the targets. Deciding
which targets count (padding, the first token of a document predicted from the previous one's
EOS) is the loader's job; here the mask is applied exactly.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.model import corruption as C
from tokenmill.model.corruption import CorruptedBatch

IGNORE = C.IGNORE  # -100, F.cross_entropy's ignore_index: ignored targets give 0 loss and 0 gradient


class PackedBatch(Protocol):
    # read-only members: a batch whose loss_mask is always a Tensor (eval's windows) is one too
    @property
    def tokens(self) -> torch.Tensor: ...
    @property
    def positions(self) -> torch.Tensor | None: ...
    @property
    def segments(self) -> torch.Tensor | None: ...
    @property
    def loss_mask(self) -> torch.Tensor | None: ...


def _shift(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens[B, T+1] -> (inputs[B, T], targets[B, T]) with targets[:, t] = tokens[:, t+1]."""
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"expected tokens of shape [B, T+1] with T >= 1, got {tuple(tokens.shape)}")
    return tokens[:, :-1], tokens[:, 1:]


def _logits_and_targets(model: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = _shift(tokens)
    logits = model(inputs)
    return logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1)


def clm_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over all B·T target positions."""
    logits, targets = _logits_and_targets(model, tokens)
    return F.cross_entropy(logits, targets)


def token_nll(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Per-target NLL in nats, shape [B, T]: entry [b, t] is -log p(tokens[b, t+1] | tokens[b, :t+1])."""
    logits, targets = _logits_and_targets(model, tokens)
    return F.cross_entropy(logits, targets, reduction="none").view(tokens.shape[0], -1)


def _batch_field(batch: Any, name: str, shape: torch.Size) -> torch.Tensor | None:
    value = getattr(batch, name, None)
    if value is not None and value.shape != shape:
        raise ValueError(f"batch.{name} must have shape {tuple(shape)} (one entry per input token), got {tuple(value.shape)}")
    return value


def counted_targets(batch: PackedBatch) -> int:
    """Targets of a packed batch that count in the loss: the loss_mask's True entries, else all B·T."""
    _, targets = _shift(batch.tokens)
    mask = _batch_field(batch, "loss_mask", targets.shape)
    return int(targets.numel() if mask is None else mask.sum())


def token_nll_batch(model: nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Per-target NLL [B, T] (fp32) of a packed batch; exactly 0, with no gradient, where loss_mask is False.

    So `token_nll_batch(m, b).sum() / b.loss_mask.sum()` is `clm_loss_batch(m, b)`, and summing
    over micro-batches before dividing gives a token-weighted mean across gradient accumulation.
    """
    inputs, targets = _shift(batch.tokens)
    kwargs: dict[str, Any] = {
        name: value for name in ("positions", "segments") if (value := _batch_field(batch, name, inputs.shape)) is not None
    }
    if (prebuilt := getattr(batch, "prebuilt_mask", None)) is not None:  # staged by the trainer (train/staging.py)
        kwargs["prebuilt_mask"] = prebuilt
    loss_mask = _batch_field(batch, "loss_mask", targets.shape)
    if loss_mask is not None:
        if loss_mask.dtype != torch.bool:
            raise ValueError(f"batch.loss_mask must be bool, got {loss_mask.dtype}")
        targets = targets.masked_fill(~loss_mask, IGNORE)
    if fused_nll_ok(model):
        return model(inputs, targets=targets, **kwargs)
    logits = model(inputs, **kwargs)  # no kwargs for an unpacked batch: any LM callable works
    nll = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE, reduction="none"
    )
    return nll.view(targets.shape)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DDP (`.module`) and torch.compile (`._orig_mod`) wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def fused_nll_ok(model: nn.Module) -> bool:
    """Whether `model(inputs, targets=...)` returns the per-token NLL (tokenmill's Transformer),
    so the logits never need to exist. Not with a z-loss, which is a function of the logits."""
    inner = unwrap(model)
    cfg = getattr(inner, "config", None)
    return getattr(inner, "supports_targets", False) and cfg is not None and not float(getattr(cfg, "z_loss", 0.0) or 0.0) > 0


def clm_loss_batch(model: nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over the counted targets (loss_mask True) only.

    A batch with no counted target gives 0 (and zero gradients) rather than NaN.
    """
    nll = token_nll_batch(model, batch)
    mask = getattr(batch, "loss_mask", None)
    counted = nll.new_tensor(nll.numel()) if mask is None else mask.sum()
    return nll.sum() / counted.clamp(min=1)  # a tensor clamp: no host sync on CUDA


# --------------------------------------------------------------------------- other objectives
def corrupted_batch(batch: PackedBatch, cfg: Any, vocab_size: int, seed: int, step: int, micro: int) -> CorruptedBatch:
    """The MLM / span / prefix-LM view of a packed batch, as `cfg.objective` (a TrainConfig) says.

    Its randomness is a function of (seed, step, micro) only (see `corruption`)."""
    gen = C.corruption_generator(seed, step, micro, cfg.objective)
    segments = getattr(batch, "segments", None)
    positions = getattr(batch, "positions", None)
    if cfg.objective == "mlm":
        return C.mlm_batch(batch.tokens, segments, positions, vocab_size, gen, cfg.mlm_prob)
    if cfg.objective == "prefix_lm":
        B, T = batch.tokens.shape[0], batch.tokens.shape[1] - 1
        prefix = C.sample_prefix_len(B, T, gen, cfg.prefix_fraction)
        return C.prefix_lm_batch(batch.tokens, segments, positions, getattr(batch, "loss_mask", None), prefix)
    if cfg.objective == "span":
        return C.span_batch(batch.tokens, gen, cfg.span_noise_density, cfg.span_mean_length)
    raise ValueError(f"no corrupted view for objective {cfg.objective!r}")


def corrupted_nll(model: nn.Module, cb: CorruptedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ NLL over the scored labels (fp32), number scored) of a corrupted batch.

    The model must take `attn_mask` (bool [B, T, T], True = may attend), which replaces its causal
    rule; positions are passed only when the batch has them."""
    kwargs: dict[str, Any] = {"attn_mask": cb.attn_mask}
    if cb.positions is not None:
        kwargs["positions"] = cb.positions
    logits = model(cb.inputs, **kwargs)
    nll = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), cb.labels.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return nll, (cb.labels != IGNORE).sum()


def objective_loss(model: nn.Module, batch: PackedBatch, cfg: Any, seed: int, step: int, micro: int) -> torch.Tensor:
    """Mean loss (nats) of one micro-batch under `cfg.objective` (a TrainConfig).

    "clm" is exactly `clm_loss_batch`; the others score only their labelled positions (a batch
    with none gives 0, not NaN)."""
    if cfg.objective == "clm":
        return clm_loss_batch(model, batch)
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab_size is None:
        raise ValueError("objective_loss needs model.config.vocab_size for the non-causal objectives")
    cb = corrupted_batch(batch, cfg, int(vocab_size), seed, step, micro)
    nll, n = corrupted_nll(model, cb)
    return nll / n.clamp(min=1)
