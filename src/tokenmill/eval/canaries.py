"""Exposure of memorization canaries (Carlini et al. 2019, "The Secret Sharer", §4).

A canary s[r] is a template with a secret r drawn from R = all digit strings of its length.
Its log-perplexity under the model is Px(s[r]) = -log2 Pr(s[r]) (bits, summed over the canary's
tokens, after the EOS every document follows in training). Its rank is its position among all
candidate secrets ordered by Px, and

    exposure = log2 |R| - log2 rank,   in [0, log2 |R|]   (|R| = 10 ** secret_digits)

|R| is too large to enumerate, so M candidate secrets are drawn uniformly (seeded by the run
seed, canary secrets excluded) and two estimates are reported:

  exposure_empirical     the canary's rank fraction among the M candidates plus itself, ties
                         counted half (mid-rank): q = (less + equal/2 + 1) / (M + 1),
                         rank_estimate = q |R|, exposure = -log2 q. Capped at log2(M + 1).
  exposure_extrapolated  Carlini's extrapolation: fit a normal to the candidates' Px and take
                         -log2 CDF(Px(canary)) (a normal is the skew-0 case of their skew-normal
                         fit), capped at log2 |R|. Not capped at log2(M + 1), so a memorized
                         canary can be told apart from one merely better than every candidate.

A model that has not memorized a canary ranks it like a random secret: exposure about 1 bit
(rank about |R|/2). A canary the model reproduces perfectly reaches the maximum. Scores are
computed per sequence (right padding cannot leak into a causal model's earlier positions) and
summed in float64, so they do not depend on the batch size.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import xxhash

from tokenmill.data.canaries import Canary, canary_text, random_secrets
from tokenmill.model.objectives import token_nll
from tokenmill.train.device import autocast

# Stream of the run seed the reference secrets come from (the canaries' own is another one).
CANDIDATE_STREAM = xxhash.xxh64_intdigest(b"canary-candidates")
METHOD = (
    "exposure_empirical: mid-rank among M uniform candidate secrets (capped at log2(M+1)); "
    "exposure_extrapolated: -log2 CDF of a normal fitted to the candidates' log-perplexity "
    "(Carlini et al. 2019), capped at log2|R|"
)


def candidate_secrets(seed: int, count: int, digits: int, exclude: set[str]) -> list[str]:
    """The M reference secrets, a pure function of the run seed."""
    rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, CANDIDATE_STREAM])
    return random_secrets(rng, count, digits, exclude)


def encode_texts(tokenizer: Any, texts: list[str], eos_id: int) -> list[list[int]]:
    """[EOS] + the text's token ids, as a training document is seen."""
    return [[eos_id, *tokenizer.encode(t, add_special_tokens=False).ids] for t in texts]


@torch.no_grad()
def log_perplexities(
    model: torch.nn.Module, sequences: list[list[int]], device: torch.device, batch_size: int, pad_id: int, dtype: str = "auto"
) -> np.ndarray:
    """Px of each sequence in bits: -log2 of the probability of its tokens after the first."""
    out = np.zeros(len(sequences), dtype=np.float64)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(sequences), batch_size):
            batch = sequences[start : start + batch_size]
            width = max(len(s) for s in batch)
            tokens = torch.full((len(batch), width), pad_id, dtype=torch.long)
            for row, s in enumerate(batch):
                tokens[row, : len(s)] = torch.tensor(s)
            with autocast(device, dtype):
                nll = token_nll(model, tokens.to(device)).float().cpu().double()
            for row, s in enumerate(batch):
                out[start + row] = float(nll[row, : len(s) - 1].sum()) / math.log(2)
    finally:
        model.train(was_training)
    return out


def empirical_fraction(canary: float, candidates: np.ndarray) -> float:
    """The canary's mid-rank among itself and the candidates, as a fraction of M + 1."""
    less = int(np.sum(candidates < canary))
    equal = int(np.sum(candidates == canary))
    return (less + equal / 2 + 1) / (len(candidates) + 1)


def extrapolated_exposure(canary: float, candidates: np.ndarray, max_exposure: float) -> float:
    """-log2 of the normal CDF fitted to the candidates, at the canary; in [0, max_exposure]."""
    mean, std = float(candidates.mean()), float(candidates.std(ddof=1))
    if std == 0.0:  # every candidate scores the same: a step at the mean, half at the tie
        cdf_bits = -1.0 if canary == mean else (-math.inf if canary < mean else 0.0)
    else:
        z = torch.tensor((canary - mean) / std, dtype=torch.float64)
        cdf_bits = float(torch.special.log_ndtr(z)) / math.log(2)
    return min(max_exposure, max(0.0, -cdf_bits))


def canary_exposure(
    model: torch.nn.Module,
    tokenizer: Any,
    canaries: dict[str, Any],
    device: torch.device,
    batch_size: int = 32,
    *,
    seed: int,
    eos_id: int,
    pad_id: int,
    dtype: str = "auto",
) -> dict[str, Any]:
    """Exposure of every canary of a `_canaries.json` record (data.canaries.load_canaries), and
    the mean per repetition count."""
    items: list[Canary] = canaries["canaries"]
    digits, template = int(canaries["secret_digits"]), canaries["template"]
    max_exposure = digits * math.log2(10)
    secrets = candidate_secrets(seed, int(canaries["candidates"]), digits, {c.secret for c in items})
    texts = [c.text for c in items] + [canary_text(template, s) for s in secrets]
    scores = log_perplexities(model, encode_texts(tokenizer, texts, eos_id), device, batch_size, pad_id, dtype)
    own, reference = scores[: len(items)], scores[len(items) :]
    rows = [_canary_row(c, float(px), reference, max_exposure, digits) for c, px in zip(items, own)]
    return {
        "method": METHOD,
        "max_exposure": max_exposure,
        "candidates": len(secrets),
        "candidate_log_ppl": {"mean": float(reference.mean()), "std": float(reference.std(ddof=1))},
        "canaries": rows,
        "by_count": by_count(rows),
    }


def _canary_row(c: Canary, px: float, reference: np.ndarray, max_exposure: float, digits: int) -> dict[str, Any]:
    q = empirical_fraction(px, reference)
    return {
        "count": c.count,
        "index": c.index,
        "secret": c.secret,
        "log_ppl": px,
        "rank_estimate": q * 10.0**digits,
        "exposure_empirical": -math.log2(q),
        "exposure_extrapolated": extrapolated_exposure(px, reference, max_exposure),
    }


def by_count(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean exposure (both estimates) and log-perplexity per repetition count."""
    out: dict[str, dict[str, float]] = {}
    for count in sorted({r["count"] for r in rows}):
        group = [r for r in rows if r["count"] == count]
        out[str(count)] = {
            "canaries": len(group),
            **{
                f"mean_{k}": float(np.mean([r[k] for r in group]))
                for k in ("exposure_empirical", "exposure_extrapolated", "log_ppl")
            },
        }
    return out
