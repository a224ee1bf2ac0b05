"""Rotary position tables and how a context is extended (Su et al. 2021; Chen et al. 2023; bloc97's
NTK-aware scaling; Peng et al. 2023, YaRN; docs/training.md "Context extension").

A model trained at length L sees angles t·f_i for t < L. Run at s·L, the slow frequencies reach
angles it never saw. Four ways to move them back into range, each a function of (theta, scaling,
factor, original length):
- "none" with a larger `rope_theta` (base-frequency increase, "ABF"): every wavelength stretches;
- "linear" (position interpolation, Chen et al. 2023): t becomes t/s for every frequency;
- "ntk" (NTK-aware, bloc97): the base becomes theta·s^(hd/(hd-2)), so the slowest frequency is
  stretched by s while the fastest (local detail) are nearly unchanged;
- "yarn" (Peng et al. 2023, "NTK-by-parts" + temperature): a frequency that turns fewer than
  `YARN_BETA_SLOW` times over the original length is interpolated by s, one that turns more than
  `YARN_BETA_FAST` times is kept, a linear ramp between; attention logits are scaled by
  (0.1·ln s + 1)², applied here as a factor (0.1·ln s + 1) on both cos and sin (q and k alike).

`phase_model_configs` gives the model each curriculum phase trains: a phase that raises `seq_len` names
its RoPE there (`mixture.phases[].rope`), and the tables are rebuilt at the phase boundary — they
are non-persistent buffers, so the weights are unchanged. `rope_warnings` says when a RoPE setting
will not cover a length.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # the model config does not import the mixture config
    from tokenmill.model.config import ModelConfig

YARN_BETA_FAST = 32.0  # rotations over the original length above which a frequency is kept
YARN_BETA_SLOW = 1.0  # ... below which it is interpolated by the factor
REFERENCE_LEN, REFERENCE_THETA = 2048, 10_000.0  # RoPE's base 10000 was set for 2048-token contexts
ROPE_FIELDS = ("rope_theta", "rope_scaling", "rope_scaling_factor", "rope_original_max_seq_len")


def original_length(max_seq_len: int, factor: float, original: int | None) -> int:
    """The context the frequencies were trained for: given, or the extended length / factor."""
    return original if original is not None else max(1, round(max_seq_len / factor))


def _correction_dim(rotations: float, head_dim: int, theta: float, length: int) -> float:
    """The (fractional) frequency index i whose wave turns `rotations` times over `length` tokens:
    length·theta^(-2i/hd) / 2π = rotations, solved for i."""
    return head_dim * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(theta))


def yarn_inv_freq(head_dim: int, theta: float, factor: float, original: int) -> torch.Tensor:
    """YaRN's per-frequency blend of the kept and the interpolated (÷ factor) frequencies."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    half = head_dim // 2
    # Whole indices, as the reference implementation rounds them (floor / ceil), clamped to the range.
    low = max(math.floor(_correction_dim(YARN_BETA_FAST, head_dim, theta, original)), 0)
    high = min(math.ceil(_correction_dim(YARN_BETA_SLOW, head_dim, theta, original)), head_dim - 1)
    span = (high - low) if high != low else 0.001
    ramp = ((torch.arange(half, dtype=torch.float32) - low) / span).clamp(0, 1)  # 0: keep, 1: interpolate
    return inv_freq / factor * ramp + inv_freq * (1 - ramp)


def yarn_attention_scale(factor: float) -> float:
    """The factor on cos and sin (so (·)² on attention logits); 1 at factor ≤ 1."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def rope_tables(
    head_dim: int, max_seq_len: int, theta: float, scaling: str = "none", factor: float = 1.0, original: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [max_seq_len, head_dim] (frequencies repeated for both halves)."""
    if scaling == "ntk":
        theta = theta * factor ** (head_dim / (head_dim - 2))
    if scaling == "yarn":
        inv_freq = yarn_inv_freq(head_dim, theta, factor, original_length(max_seq_len, factor, original))
    else:
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(max_seq_len, dtype=torch.int64).float()
    if scaling == "linear":
        t = t / factor
    emb = torch.cat((torch.outer(t, inv_freq),) * 2, dim=-1)
    scale = yarn_attention_scale(factor) if scaling == "yarn" else 1.0
    return emb.cos() * scale, emb.sin() * scale


def tables_for(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The RoPE tables a model config asks for, up to its max_seq_len."""
    return rope_tables(
        cfg.d_model // cfg.n_heads,
        cfg.max_seq_len,
        cfg.rope_theta,
        cfg.rope_scaling,
        cfg.rope_scaling_factor,
        cfg.rope_original_max_seq_len,
    )


def phase_model_configs(cfg: ModelConfig, phases: list[tuple[int, dict[str, Any] | None]]) -> list[ModelConfig]:
    """The model each phase [(seq_len, the RoPE fields it sets)] trains, in order: a phase's RoPE
    fields hold from it on (until a later phase sets them again) and the tables cover the longest
    sequence so far. Learned positions cannot be extended (their table is a weight)."""
    out: list[ModelConfig] = []
    for seq_len, rope in phases:
        update: dict[str, Any] = {k: v for k, v in (rope or {}).items() if v is not None}
        if seq_len > cfg.max_seq_len:
            if cfg.position != "rope":
                raise ValueError(
                    f"a phase of {seq_len} tokens needs model.max_seq_len >= {seq_len}: learned "
                    f"positions (model.position=learned) cannot be extended past {cfg.max_seq_len}"
                )
            update["max_seq_len"] = seq_len
        cfg = cfg.model_copy(update=update) if update else cfg
        out.append(cfg)
    return out


def slowest_wavelength(cfg: ModelConfig) -> float:
    """Tokens per turn of the slowest RoPE frequency, in trained-position units."""
    hd = cfg.d_model // cfg.n_heads
    theta = cfg.rope_theta
    if cfg.rope_scaling == "ntk":
        theta = theta * cfg.rope_scaling_factor ** (hd / (hd - 2))
    wave = 2 * math.pi * theta ** ((hd - 2) / hd)
    if cfg.rope_scaling in ("linear", "yarn"):
        wave *= cfg.rope_scaling_factor
    return wave


def recommended_theta(seq_len: int, head_dim: int) -> float:
    """10000·(seq_len/2048)^(hd/(hd-2)) (the NTK-aware base for seq_len)."""
    return REFERENCE_THETA * (seq_len / REFERENCE_LEN) ** (head_dim / (head_dim - 2))


def rope_warnings(cfg: ModelConfig, phases: list[tuple[str, int, ModelConfig]]) -> list[str]:
    """Warnings for a run's phases [(name, seq_len, model config of the phase)] in order: a phase
    that lengthens the context past model.max_seq_len with the previous phase's RoPE unchanged
    (positions past the trained length get angles never seen), and a base too small for the length
    (docs/training.md "Context extension")."""
    if cfg.position != "rope":
        return []
    out: list[str] = []
    hd = cfg.d_model // cfg.n_heads
    trained = 0
    prev: tuple[Any, ...] | None = None
    for name, seq_len, pcfg in phases:
        fields = tuple(getattr(pcfg, f) for f in ROPE_FIELDS)
        # A curriculum inside model.max_seq_len (short sequences first, the staged length of Llama 3's recipe) is
        # planned training, not an extension: only a phase past the configured tables is warned.
        if prev is not None and seq_len > trained and seq_len > cfg.max_seq_len and fields == prev:
            out.append(
                f"phase {name!r} raises seq_len from {trained} to {seq_len} with RoPE unchanged "
                f"(rope_theta {pcfg.rope_theta:g}, scaling {pcfg.rope_scaling}): positions past {trained} "
                f"get angles the model never trained on; set the phase's rope (rope_theta, or "
                f"rope_scaling linear / ntk / yarn with rope_scaling_factor {seq_len / trained:g})"
            )
        scaled = pcfg.rope_scaling != "none" and pcfg.rope_scaling_factor > 1
        need = recommended_theta(seq_len, hd)
        if not scaled and pcfg.rope_theta < need:
            out.append(
                f"phase {name!r}: rope_theta {pcfg.rope_theta:g} is small for {seq_len}-token sequences "
                f"(NTK-aware base 10000·(seq_len/2048)^(hd/(hd-2)) = {need:,.0f} for head dim {hd}); raise "
                f"rope_theta or use rope_scaling ntk / yarn"
            )
        if slowest_wavelength(pcfg) < seq_len:
            out.append(
                f"phase {name!r}: the slowest RoPE frequency turns every {slowest_wavelength(pcfg):,.0f} "
                f"tokens, less than the {seq_len}-token sequences, so distant positions alias"
            )
        trained, prev = max(trained, seq_len), fields
    return out
