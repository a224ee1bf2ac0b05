"""The mixture plan: what the token budget draws from each bucket, before a step is run.

Token budget = max_steps · world_size · grad_accum · micro_batch · seq_len. Each phase's samples
are split among buckets by its interleave (shares p_i = w_i / Σ w_j), so per bucket the plan knows
exactly how many samples, tokens and epochs the run takes, and warns above `max_epochs_warn`
epochs (Muennighoff et al. 2023: multi-epoch training helps up to about 4 epochs, then the model overfits).

Nominal vs effective tokens. Repeated tokens are worth less than fresh ones; the plan uses the
data-constrained scaling fit of Muennighoff et al. 2023 ("Scaling Data-Constrained Language
Models", eq. 5 with the fitted R*_D = 15.39):

    effective = U + U · R* · (1 - exp(-R / R*)),   R = epochs - 1 (repetitions after the first pass)

and effective = nominal while a bucket is seen at most once. U is one pass over the bucket: its
train tokens (packed) or the tokens its truncated documents keep (padded). Four epochs are still
worth 3.7 passes; forty are worth about 15.
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import numpy as np

from tokenmill.mixture.curriculum import Phase
from tokenmill.mixture.stream import BucketStream

log = logging.getLogger(__name__)
R_STAR = 15.39
EFFECTIVE_RULE = (
    "Muennighoff et al. 2023 data-constrained scaling: effective = U + U*R*(1-exp(-R/R*)), "
    "R = epochs-1, R* = 15.39; effective = nominal for at most one epoch"
)


def effective_tokens(unique: float, epochs: float) -> float:
    """Effective tokens of `epochs` passes over `unique` tokens (Muennighoff et al. 2023)."""
    if epochs <= 1.0:
        return unique * epochs
    return unique + unique * R_STAR * (1.0 - math.exp(-(epochs - 1.0) / R_STAR))


# (phase, bucket) -> the stream positions of the phase's samples of the bucket, relative to its offset
SamplePositions = Callable[[int, str], np.ndarray]


def bucket_usage(
    stream: BucketStream,
    phases: list[Phase],
    counts: list[dict[str, int]],
    offsets: list[dict[str, int]],
    packing: str,
    positions: SamplePositions,
) -> dict:
    """Samples, tokens, epochs and effective tokens of one bucket over the whole run."""
    b = stream.bucket
    samples = sum(c.get(b, 0) for c in counts)
    if packing == "packed":
        tokens = sum(c.get(b, 0) * ph.seq_len for c, ph in zip(counts, phases))
        epochs = tokens / stream.n_tokens
        unique = float(stream.n_tokens)
    else:
        # the documents the shuffle really picks: with shuffle='epoch' they are spread over the block
        tokens = sum(
            stream.capped_tokens_at(o[b] + positions(k, b), ph.seq_len + 1)
            for k, (c, o, ph) in enumerate(zip(counts, offsets, phases))
            if c.get(b)
        )
        epochs = samples / stream.n_docs
        unique = tokens / epochs if epochs else 0.0
    return {
        "available_tokens": stream.n_tokens,
        "docs": stream.n_docs,
        "samples": samples,
        "tokens": tokens,
        "epochs": epochs,
        "effective_tokens": effective_tokens(unique, epochs),
    }


def build_plan(
    *,
    phases: list[Phase],
    counts: list[dict[str, int]],
    offsets: list[dict[str, int]],
    streams: dict[str, BucketStream],
    packing: str,
    doc_masking: bool,
    max_epochs_warn: float,
    layout: dict,
    positions: SamplePositions,
) -> dict:
    """The JSON-able plan; its `warnings` are also logged."""
    budget = phases[-1].token_end
    buckets = {b: bucket_usage(s, phases, counts, offsets, packing, positions) for b, s in sorted(streams.items())}
    warnings = []
    for b, u in buckets.items():
        u["share"] = u["tokens"] / budget if packing == "packed" else u["samples"] / sum(x["samples"] for x in buckets.values())
        u["warn"] = u["epochs"] > max_epochs_warn
        if u["warn"]:
            warnings.append(
                f"bucket {b!r} is repeated {u['epochs']:.1f} epochs (> {max_epochs_warn:g}); "
                f"effective {u['effective_tokens']:.3g} of {u['tokens']:.3g} nominal tokens — "
                f"lower its weight or add data"
            )
    if packing == "padded":  # one target less than the tokens kept per row, every other target padding
        counted = sum(u["tokens"] - u["samples"] for u in buckets.values())
        r_pad, r_pad_kind = 1.0 - counted / budget, "exact"
    elif doc_masking:  # one lost target per document boundary: about one per doc_len tokens
        r_pad = sum(u["tokens"] * u["docs"] / u["available_tokens"] for u in buckets.values()) / budget
        r_pad_kind = "estimate"
    else:
        r_pad, r_pad_kind = 0.0, "exact"
    for w in warnings:
        log.warning(w)
    return {
        **layout,
        "packing": packing,
        "doc_masking": doc_masking,
        "token_budget": budget,
        "phases": [
            {**ph.to_dict(), "samples": sum(c.values()), "bucket_samples": dict(sorted(c.items()))}
            for ph, c in zip(phases, counts)
        ],
        "buckets": buckets,
        "nominal_tokens": sum(u["tokens"] for u in buckets.values()),
        "effective_tokens": sum(u["effective_tokens"] for u in buckets.values()),
        "effective_rule": EFFECTIVE_RULE,
        "r_pad": r_pad,
        "r_pad_kind": r_pad_kind,
        "max_epochs_warn": max_epochs_warn,
        "warnings": warnings,
    }
