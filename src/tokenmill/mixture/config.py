"""Bucket weights, curriculum phases and packing of the training batches.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from tokenmill.config_base import Strict

Weight = Annotated[float, Field(ge=0.0)]


class PhaseRopeConfig(Strict):
    """RoPE for a phase that lengthens the context (model/rope.py); unset fields keep the model's."""

    rope_theta: float | None = Field(None, gt=0.0, description="Base frequency in this phase (a base-frequency increase).")
    rope_scaling: Literal["none", "linear", "ntk", "yarn"] | None = Field(
        None, description="Scaling in this phase: linear (position interpolation), ntk (NTK-aware base), yarn."
    )
    rope_scaling_factor: float | None = Field(
        None, gt=0.0, description="Factor of the scaling, usually the phase's seq_len / the trained seq_len."
    )
    rope_original_max_seq_len: int | None = Field(
        None, ge=1, description="YaRN: the trained context (None: the phase's seq_len / factor)."
    )


class PhaseConfig(Strict):
    """One curriculum phase: a share of the token budget with its own mixture and sequence length."""

    name: str = Field(..., min_length=1, description="Phase name, shown in plans, events and checkpoints.")
    fraction: float = Field(..., gt=0.0, le=1.0, description="Share of the token budget (= of the optimizer steps).")
    weights: dict[str, Weight] | None = Field(None, description="Bucket weights in this phase (None: mixture.weights).")
    seq_len: int | None = Field(
        None,
        ge=1,
        description="Sequence length in this phase (None: train.seq_len); rows per micro-batch "
        "become micro_batch·train.seq_len/seq_len so tokens per step stay constant.",
    )
    anneal: bool = Field(False, description="Annealing phase: the trainer decays the LR over its steps; anneal phases come last.")
    rope: PhaseRopeConfig | None = Field(
        None, description="RoPE from this phase on (context extension); None: the previous phase's."
    )


class SyntheticLimitsConfig(Strict):
    """The model-collapse guard (Shumailov et al. 2024): limits on synthetic documents in
    the planned mixture, checked before training starts."""

    max_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Most of a phase's tokens that may come from synthetic documents (a common practice: 50-70% human, 30-50% synthetic).",
    )
    max_generation: int = Field(
        2,
        ge=0,
        description="Newest synthetic generation allowed (1: sampled from a model trained on real data; each model in between adds 1; 0: none).",
    )


class ReplayConfig(Strict):
    """General replay in continued pretraining (Ibrahim et al. 2024): a fixed share of every batch drawn
    from the original data's buckets, beside the new data, so forgetting is bounded by design."""

    buckets: list[str] = Field(..., min_length=1, description="Buckets holding the original (pretraining) data.")
    share: float = Field(..., gt=0.0, lt=1.0, description="Share of each phase's tokens drawn from those buckets.")


class MixtureConfig(Strict):
    """How training batches draw from buckets: weights, curriculum phases, packing, prefetch."""

    weights: dict[str, Weight] | None = Field(
        None, description="Sampling weight per bucket (None: proportional to training tokens)."
    )
    phases: list[PhaseConfig] = Field(
        default_factory=list,
        description="Curriculum phases in order, fractions summing to 1 "
        "(empty: one phase 'main' with `weights` and train.seq_len).",
    )
    packing: Literal["packed", "padded"] = Field(
        "packed",
        description="'packed': documents concatenated with EOS into full rows; 'padded': one "
        "document per row, truncated or padded with PAD (for comparison).",
    )
    doc_masking: bool = Field(
        True,
        description="Block attention across documents, restart positions at each document and "
        "leave cross-document targets out of the loss.",
    )
    shuffle: Literal["block", "epoch"] = Field(
        "block",
        description="'block': a bucket's samples shuffled within blocks of 4096 (a short run reads "
        "the first documents of the shuffled stream); 'epoch': drawn from a permutation "
        "of all the bucket's windows of an epoch, so any prefix of a run, however short, "
        "samples every document (scaling sweeps).",
    )
    max_epochs_warn: float = Field(
        4.0, gt=0.0, description="Warn when a bucket is repeated more than this many epochs (Muennighoff et al. 2023)."
    )
    prefetch: int = Field(8, ge=0, description="Micro-batches a background thread prepares ahead (0: off).")
    synthetic: SyntheticLimitsConfig = Field(
        default_factory=SyntheticLimitsConfig, description="Limits on synthetic data (the collapse guard)."
    )
    replay: ReplayConfig | None = Field(
        None, description="Replay a share of the original data (phases without their own weights); None: no replay."
    )

    @field_validator("phases")
    @classmethod
    def _phases_partition_the_budget(cls, v: list[PhaseConfig]) -> list[PhaseConfig]:
        if not v:
            return v
        names = [p.name for p in v]
        if len(set(names)) != len(names):
            raise ValueError(f"phase names must be unique, got {names}")
        total = sum(p.fraction for p in v)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"phase fractions must sum to 1, got {total:g} ({[p.fraction for p in v]})")
        flags = [p.anneal for p in v]
        if True in flags and not all(flags[flags.index(True) :]):
            raise ValueError(f"anneal phases must be the last ones, got anneal flags {flags}")
        return v
