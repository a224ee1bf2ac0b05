"""The transformer's shape and options.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from tokenmill.config_base import Strict


class ModelConfig(Strict):
    """Llama-style decoder: RMSNorm pre-norm, RoPE, SwiGLU, untied or tied embeddings; options for
    LayerNorm, GELU, learned positions, RoPE scaling, QK-norm, sliding window, z-loss, MoE and μP."""

    vocab_size: int | None = Field(None, description="None: take the tokenizer's vocabulary size.")
    d_model: int = Field(256, description="Width of the residual stream.")
    n_layers: int = Field(4, description="Transformer blocks.")
    n_heads: int = Field(4, description="Attention (query) heads.")
    n_kv_heads: int | None = Field(None, description="Key/value heads (GQA); None: n_heads.")
    ffn_hidden: int | None = Field(None, description="SwiGLU hidden size; None: 8/3·d rounded to 64.")
    max_seq_len: int = Field(256, description="Longest sequence the RoPE tables cover.")
    rope_theta: float = Field(10_000.0, description="RoPE base frequency.")
    norm_eps: float = Field(1e-5, description="RMSNorm epsilon.")
    tie_embeddings: bool = Field(True, description="Share input embedding and output head.")
    init_std: float = Field(0.02, description="Std of the normal init; residual outputs scaled by 1/√(2L).")
    # Architecture options (seeds 000/001); the defaults are the Llama recipe above.
    norm: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="Pre-norm type (LayerNorm has no bias).")
    ffn: Literal["swiglu", "gelu"] = Field("swiglu", description="FFN type; GELU's default hidden size is 4·d.")
    position: Literal["rope", "learned"] = Field("rope", description="Rotary or learned absolute positions.")
    rope_scaling: Literal["none", "linear", "ntk", "yarn"] = Field(
        "none", description="Context extension (model/rope.py): linear divides positions by the factor, ntk "
                            "raises the base, yarn interpolates the slow frequencies only and scales attention.")
    rope_scaling_factor: float = Field(1.0, description="Factor of rope_scaling (ignored for 'none').")
    rope_original_max_seq_len: int | None = Field(
        None, ge=1, description="YaRN: the context the frequencies were trained for (None: max_seq_len / factor).")
    qk_norm: bool = Field(False, description="Normalize queries and keys per head before RoPE (seed 000).")
    sliding_window: int | None = Field(None, description="A query sees only keys fewer than this many tokens away.")
    z_loss: float = Field(0.0, description="Coefficient of the z-loss on the output log-partition (0: off).")
    n_experts: int = Field(0, description="MoE experts per FFN (0: dense FFN).")
    top_k: int = Field(2, description="Experts each token is routed to (MoE).")
    moe_aux_coef: float = Field(0.01, description="Load-balancing auxiliary loss coefficient (MoE).")
    moe_z_coef: float = Field(0.0, description="Router z-loss coefficient (MoE; 0: off).")
    mup: bool = Field(False, description="μP: width-scaled init, output multiplier and per-layer LR (seed 004).")
    mup_base_width: int = Field(256, description="μP base width: the d_model whose hyperparameters transfer.")

    @field_validator("n_heads")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be positive")
        return v
