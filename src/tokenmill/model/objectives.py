"""Training objectives. Causal LM with the shift done in exactly one place (`_shift`).

A batch is `tokens[B, T+1]`: the model reads `tokens[:, :-1]` and its output at position t is
scored against `tokens[:, t+1]` (seed 000, "the shift trick"). Cross-entropy is computed in
fp32 even when the logits come out of a bf16 autocast region.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
