"""μP (Maximal Update Parameterization, Yang et al. 2022, "Tensor Programs V") for the Transformer, with Adam.

width_mult = d_model / mup_base_width. At the base width μP is the standard parameterization
(every factor below is 1), so hyperparameters tuned there transfer to wider models:
- hidden matrices (everything inside `layers.*`: attention, FFN, experts, router): init variance
  ∝ 1/fan_in, i.e. std · 1/sqrt(width_mult), and Adam LR · 1/width_mult. Adam's update is ~lr per
  entry whatever the gradient scale, so a d×d matrix moves its output by ~lr·d: the LR must shrink
  as 1/d for the per-layer update to stay O(1);
- embeddings (input tokens, learned positions) and 1-D gains: init and LR unchanged;
- output logits multiplied by 1/width_mult (the readout sums d coordinates that become correlated
  with the hidden state during training, growing ∝ d without it);
- attention scores scaled by 1/head_dim rather than 1/sqrt(head_dim) (as sqrt(hd_base)/hd, so it
  equals the standard scale at the base width): q·k grows ∝ hd once q and k align. This assumes
  the model is widened by widening heads (n_heads as in the base model), the μTransfer default.

With `model.mup` False every function here returns the factor that leaves the model unchanged.
"""

from __future__ import annotations

import math

from tokenmill.model.config import ModelConfig


def width_mult(cfg: ModelConfig) -> float:
    return cfg.d_model / cfg.mup_base_width if cfg.mup else 1.0


def is_hidden_matrix(name: str) -> bool:
    """A weight matrix inside the transformer blocks (fan-in grows with width): `layers.*.weight`
    of a Linear. Norm gains are 1-D and are excluded by their callers (they check ndim)."""
    return name.startswith("layers.") and name.endswith(("_proj.weight", "router.weight"))


def hidden_init_scale(cfg: ModelConfig) -> float:
    """Multiplier of the hidden matrices' init std: 1/sqrt(width_mult) (variance ∝ 1/fan_in)."""
    return 1.0 / math.sqrt(width_mult(cfg))


def hidden_lr_mult(cfg: ModelConfig) -> float:
    """Adam LR multiplier of the hidden matrices: 1/width_mult."""
    return 1.0 / width_mult(cfg)


def output_multiplier(cfg: ModelConfig) -> float:
    """Multiplier on the logits: 1/width_mult."""
    return 1.0 / width_mult(cfg)


def attention_scale(cfg: ModelConfig) -> float | None:
    """Softmax scale under μP: sqrt(hd_base)/hd (= 1/sqrt(hd) at the base width); None (SDPA's
    default 1/sqrt(hd)) otherwise, so the standard model's kernels see exactly today's call."""
    if not cfg.mup:
        return None
    hd = cfg.d_model // cfg.n_heads
    hd_base = cfg.mup_base_width / cfg.n_heads
    return math.sqrt(hd_base) / hd
