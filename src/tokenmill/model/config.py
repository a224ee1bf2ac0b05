"""The transformer's shape and options.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tokenmill.config_base import Strict


class ModelConfig(Strict):
    """Llama-style decoder: RMSNorm pre-norm, RoPE, SwiGLU, untied or tied embeddings; options for
    LayerNorm, GELU, learned positions, RoPE scaling, QK-norm, sliding window, z-loss, MoE and μP."""

    vocab_size: int | None = Field(None, ge=1, description="None: take the tokenizer's vocabulary size.")
    d_model: int = Field(256, ge=1, description="Width of the residual stream.")
    n_layers: int = Field(4, ge=1, description="Transformer blocks.")
    n_heads: int = Field(4, ge=1, description="Attention (query) heads.")
    n_kv_heads: int | None = Field(None, ge=1, description="Key/value heads (GQA); None: n_heads.")
    ffn_hidden: int | None = Field(None, ge=1, description="SwiGLU hidden size; None: 8/3·d rounded to 64.")
    max_seq_len: int = Field(256, ge=1, description="Longest sequence the RoPE tables cover.")
    rope_theta: float = Field(10_000.0, gt=0.0, description="RoPE base frequency.")
    norm_eps: float = Field(1e-5, gt=0.0, description="RMSNorm epsilon.")
    tie_embeddings: bool = Field(True, description="Share input embedding and output head.")
    init_std: float = Field(0.02, gt=0.0, description="Std of the normal init; residual outputs scaled by 1/√(2L).")
    # Architecture options (docs/training.md); the defaults are the Llama recipe above.
    norm: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="Pre-norm type (LayerNorm has no bias).")
    ffn: Literal["swiglu", "gelu"] = Field("swiglu", description="FFN type; GELU's default hidden size is 4·d.")
    position: Literal["rope", "learned"] = Field("rope", description="Rotary or learned absolute positions.")
    rope_scaling: Literal["none", "linear", "ntk", "yarn"] = Field(
        "none",
        description="Context extension (model/rope.py): linear divides positions by the factor, ntk "
        "raises the base, yarn interpolates the slow frequencies only and scales attention.",
    )
    rope_scaling_factor: float = Field(1.0, gt=0.0, description="Factor of rope_scaling (ignored for 'none').")
    rope_original_max_seq_len: int | None = Field(
        None, ge=1, description="YaRN: the context the frequencies were trained for (None: max_seq_len / factor)."
    )
    qk_norm: bool = Field(
        False, description="Normalize queries and keys per head before RoPE (Dehghani et al. 2023; Wortsman et al. 2023)."
    )
    sliding_window: int | None = Field(None, ge=1, description="A query sees only keys fewer than this many tokens away.")
    z_loss: float = Field(0.0, ge=0.0, description="Coefficient of the z-loss on the output log-partition (0: off).")
    n_experts: int = Field(0, ge=0, description="MoE experts per FFN (0: dense FFN).")
    top_k: int = Field(2, ge=1, description="Experts each token is routed to (MoE).")
    moe_aux_coef: float = Field(0.01, ge=0.0, description="Load-balancing auxiliary loss coefficient (MoE).")
    moe_z_coef: float = Field(0.0, ge=0.0, description="Router z-loss coefficient (MoE; 0: off).")
    mup: bool = Field(False, description="μP: width-scaled init, output multiplier and per-layer LR (Yang et al. 2022).")
    mup_base_width: int = Field(256, ge=1, description="μP base width: the d_model whose hyperparameters transfer.")

    @model_validator(mode="after")
    def _shape_fits(self) -> "ModelConfig":
        problem = shape_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self


def shape_problem(cfg: ModelConfig) -> str | None:
    """Why the config's shape cannot build a model (the vocabulary aside: it may come from the
    tokenizer later), or None. Checked when the config is read, and again before a build because
    `model_copy` does not validate."""
    if cfg.d_model % cfg.n_heads:
        return f"model.d_model={cfg.d_model} is not divisible by model.n_heads={cfg.n_heads}"
    if cfg.position == "rope" and (cfg.d_model // cfg.n_heads) % 2:
        return f"head dim {cfg.d_model // cfg.n_heads} (model.d_model / model.n_heads) must be even for RoPE"
    n_kv = cfg.n_kv_heads or cfg.n_heads
    if n_kv <= 0 or cfg.n_heads % n_kv:
        return f"model.n_heads={cfg.n_heads} is not a multiple of model.n_kv_heads={n_kv}"
    if cfg.n_experts and not 1 <= cfg.top_k <= cfg.n_experts:
        return f"model.top_k={cfg.top_k} must be in [1, model.n_experts={cfg.n_experts}]"
    return None
