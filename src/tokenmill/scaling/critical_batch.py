"""The critical batch size: from a run's measured noise scale, from a batch-size sweep, and from
the published loss law, and what it says about a configured batch.

McCandlish et al. (2018): training to a given loss with batch B takes S steps and E = B·S
examples (here tokens), trading one against the other as

    S = S_min · (1 + B_crit / B),    E = E_min · (1 + B / B_crit),    B_crit = E_min / S_min

so below B_crit a bigger batch saves steps almost one for one, and above it each doubling
spends nearly twice the tokens for few saved steps. B_crit ≈ B_simple, the gradient noise
scale measured while training (train/noise_scale.py). Kaplan et al. (2020, eq. 1.4) fit
B_crit(L) ≈ B* / L^(1/α_B) with B* = 2·10⁸ tokens and α_B = 0.21 (L in nats per token of their
tokenizer): the critical batch grows as the loss falls.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

KAPLAN_B_STAR = 2e8  # tokens
KAPLAN_ALPHA_B = 0.21


def kaplan_critical_batch(loss: float) -> float:
    """B_crit(L) in tokens from Kaplan et al.'s fit (their tokenizer and data: indicative only)."""
    if loss <= 0:
        raise ValueError(f"loss must be positive, got {loss}")
    return KAPLAN_B_STAR / loss ** (1.0 / KAPLAN_ALPHA_B)


def steps_factor(batch: float, b_crit: float) -> float:
    """S / S_min at batch `batch`: how many more steps than the fewest possible."""
    return 1.0 + b_crit / batch


def tokens_factor(batch: float, b_crit: float) -> float:
    """E / E_min at batch `batch`: how many more tokens than the fewest possible."""
    return 1.0 + batch / b_crit


@dataclass(frozen=True)
class NoiseSummary:
    """B_simple of one run over a window of its steps: the ratio of the mean tr Σ and mean |G|²
    estimates (the unbiased per-step values, not the EMA), with a spread over `blocks` windows."""

    b_simple: float | None
    block_values: tuple[float, ...]
    steps: int
    first_step: int
    last_step: int
    batch_tokens: int
    loss: float | None

    @property
    def spread(self) -> float | None:
        """Relative standard deviation of the block values (None with fewer than 2)."""
        vals = [v for v in self.block_values if v > 0]
        if len(vals) < 2:
            return None
        return statistics.stdev(vals) / statistics.fmean(vals)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "block_values": list(self.block_values), "spread": self.spread}


def _ratio(rows: Sequence[dict[str, Any]]) -> float | None:
    g2 = statistics.fmean(r["noise_g2"] for r in rows)
    trace = statistics.fmean(r["noise_trace"] for r in rows)
    return trace / g2 if g2 > 0 else None


def summarize_noise(events: Iterable[dict[str, Any]], start_fraction: float = 0.5, blocks: int = 4) -> NoiseSummary | None:
    """B_simple of a run's train_step events from `start_fraction` of its steps on; None when
    the run did not measure it (grad_accum 1, see its train_start event)."""
    steps: dict[int, dict[str, Any]] = {}
    batch = 0
    for e in events:
        if e.get("stage") != "train":
            continue
        if e.get("kind") == "train_start":
            batch = int(e.get("tokens_per_step") or 0)
        elif e.get("kind") == "train_step" and e.get("noise_g2") is not None and e.get("noise_trace") is not None:
            steps[int(e["step"])] = e  # a step replayed after a resume: the later record
    if not steps:
        return None
    ordered = [steps[k] for k in sorted(steps)]
    window = ordered[int(len(ordered) * start_fraction) :] or ordered
    size = max(1, len(window) // blocks)
    parts = [window[i : i + size] for i in range(0, len(window) - size + 1, size)][:blocks]
    block_values = tuple(v for v in (_ratio(p) for p in parts) if v is not None)
    losses = [r["loss"] for r in window[-max(1, len(window) // 10) :] if r.get("loss") is not None]
    return NoiseSummary(
        b_simple=_ratio(window),
        block_values=block_values,
        steps=len(window),
        first_step=int(window[0]["step"]),
        last_step=int(window[-1]["step"]),
        batch_tokens=batch,
        loss=statistics.fmean(losses) if losses else None,
    )


def noise_series(events: Iterable[dict[str, Any]]) -> list[tuple[int, float]]:
    """(tokens seen, smoothed B_simple) of every train_step that logged one (last record per step)."""
    out: dict[int, tuple[int, float]] = {}
    for e in events:
        if e.get("kind") == "train_step" and e.get("b_simple") is not None:
            out[int(e["step"])] = (int(e.get("tokens") or 0), float(e["b_simple"]))
    return [out[k] for k in sorted(out)]


def run_noise(run_dir: Path) -> NoiseSummary | None:
    """summarize_noise of a run directory's events.jsonl."""
    from tokenmill.runs import read_events

    path = Path(run_dir) / "events.jsonl"
    return summarize_noise(read_events(path)) if path.exists() else None


@dataclass(frozen=True)
class TradeoffFit:
    """S = S_min (1 + B_crit / B) fitted to (batch, steps-to-target) pairs by least squares in 1/B."""

    s_min: float
    b_crit: float
    e_min: float
    r2: float
    points: tuple[tuple[float, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "points": [list(p) for p in self.points]}


def fit_tradeoff(batches: Sequence[float], steps: Sequence[float]) -> TradeoffFit:
    """Fit the steps-vs-batch law: S is linear in 1/B with intercept S_min and slope S_min·B_crit."""
    if len(batches) != len(steps) or len(batches) < 3:
        raise ValueError("need at least 3 (batch, steps) pairs")
    x = [1.0 / b for b in batches]
    mx, my = statistics.fmean(x), statistics.fmean(steps)
    sxx = sum((v - mx) ** 2 for v in x)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, steps)) / sxx
    s_min = my - slope * mx
    if s_min <= 0 or slope <= 0:
        raise ValueError(
            f"steps do not fall as 1/B towards a positive floor (S_min={s_min:.3g}, "
            f"slope={slope:.3g}): the sweep does not bracket the critical batch"
        )
    resid = sum((b - (s_min + slope * a)) ** 2 for a, b in zip(x, steps))
    total = sum((b - my) ** 2 for b in steps)
    b_crit = slope / s_min
    return TradeoffFit(
        s_min=s_min,
        b_crit=b_crit,
        e_min=s_min * b_crit,
        r2=1 - resid / total if total else 1.0,
        points=tuple((float(b), float(s)) for b, s in zip(batches, steps)),
    )


def steps_to_loss(losses: Sequence[float], target: float, window: int = 9) -> int | None:
    """First step (1-based) whose centred moving average of the training loss is at or below
    `target`; a single lucky batch does not count. None when the run never gets there."""
    half = window // 2
    for i in range(half, len(losses) - half):
        chunk = losses[i - half : i + half + 1]
        if all(math.isfinite(v) for v in chunk) and statistics.fmean(chunk) <= target:
            return i + 1
    return None


def batch_verdict(batch_tokens: int, b_crit: float, source: str) -> dict[str, Any]:
    """What a configured batch means against a critical batch: its steps and tokens overheads."""
    ratio = batch_tokens / b_crit
    if ratio < 0.5:
        words = (
            "below the critical batch: training is step-bound; a larger batch would cut the steps "
            "almost proportionally at little token cost"
        )
    elif ratio <= 2.0:
        words = "near the critical batch: a balanced trade-off between steps and tokens"
    else:
        words = (
            "above the critical batch: each doubling spends nearly twice the tokens for few saved "
            "steps; a smaller batch reaches the same loss on fewer tokens"
        )
    return {
        "batch_tokens": batch_tokens,
        "critical_batch_tokens": b_crit,
        "ratio": ratio,
        "source": source,
        "steps_over_min": steps_factor(batch_tokens, b_crit),
        "tokens_over_min": tokens_factor(batch_tokens, b_crit),
        "verdict": words,
    }
