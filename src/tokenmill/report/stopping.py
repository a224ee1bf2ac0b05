"""Stopping-rule signals of a run (docs/operations.md "When to stop": not "has the loss stopped falling" but "is more
training still worth it?"), computed from the run directory's files, no HTML:

- the held-out loss slope per decade of tokens over the last decade (or the last `min_evals`
  evaluations), with its standard error, beside the reference law's slope over the same
  evaluations and the gap of the loss to the law;
- the held-out − train gap at every evaluation and whether it widened;
- tokens per parameter against the law's compute-optimal ratio, and the planned token budget spent;
- epochs per bucket (Muennighoff et al. 2023: repetition pays up to about 4) and each bucket's
  held-out trend: rising while the train loss falls is overfitting that bucket;
- a verdict, with the numbers and thresholds (`report.stop`) behind it.

The held-out loss is the token-weighted mean over the buckets (as `scaling sweep` records a run's
final loss). Only evaluations of the same held-out documents are compared: the eval stage may
score more documents per bucket than the in-training evaluations, which would move the level.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tokenmill.report.config import StopConfig
from tokenmill.report.run_files import eval_history
from tokenmill.report.data_section import delivered, last_plan
from tokenmill.report.timeline import last_record_per_step
from tokenmill.report.attempts import split_attempts
from tokenmill.runs import RunDir, SkippedLines, read_events
from tokenmill.scaling.reference_law import PUBLISHED_CHINCHILLA, ReferenceLaw, load_law

KEEP, DIMINISHING, OVERFITTING, TOO_FEW = "keep training", "diminishing returns", "overfitting a bucket", "too few evaluations"


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation of the compared series."""

    step: int
    tokens: float
    loss: float  # held-out, token-weighted over buckets
    buckets: dict[str, float]
    train: float | None  # smoothed train loss up to this step
    gap: float | None  # held-out (weighted like the training mixture) − smoothed train


@dataclass(frozen=True)
class SlopeFit:
    """Least-squares slope of a loss against log10(tokens), per decade, with its standard error."""

    slope: float
    se: float
    n: int

    def flat(self, sigmas: float) -> bool:
        return abs(self.slope) <= sigmas * self.se


@dataclass(frozen=True)
class BucketSignal:
    bucket: str
    loss: float
    slope: SlopeFit
    rise: float  # last held-out loss − its minimum over the earlier evaluations of the window
    rise_from_step: int
    rising: bool
    train_fell: bool | None  # the smoothed train loss fell over the same evaluations
    epochs_planned: float | None
    epochs: float | None  # delivered up to the last evaluation
    overfitting: bool


@dataclass
class StopSignals:
    """Everything the report's "When to stop" section and `tokenmill stop-signals` show."""

    law: ReferenceLaw
    thresholds: dict[str, float]
    evaluations: int
    verdict: str
    reasons: list[str]
    notes: list[str] = field(default_factory=list)
    points: list[EvalPoint] = field(default_factory=list)
    window: str = ""
    window_steps: list[int] = field(default_factory=list)
    step: int | None = None
    tokens: float | None = None
    params: float | None = None  # N as the law counts it
    slope: SlopeFit | None = None
    law_slope: float | None = None  # the law's least-squares slope over the same evaluations
    law_slope_at_end: float | None = None  # dL/dlog10 D at the last evaluation
    slope_ratio: float | None = None
    law_loss: float | None = None
    gap_to_law: float | None = None
    gap_widened: bool | None = None
    tokens_per_param: float | None = None
    optimal_ratio: float | None = None
    budget_tokens: float | None = None
    buckets: list[BucketSignal] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["law"] = self.law.to_dict()
        return out


# -- reading the run ------------------------------------------------------------------------------


def resolve_law(run: RunDir, override: str | Path | None = None) -> ReferenceLaw:
    """`override`, else report.scaling_law, else the fit of the sweep the run belongs to, else the
    published Chinchilla fit."""
    path = override or run.config.report.scaling_law
    if path:
        return load_law(path)
    sweep_fit = run.path.parent.parent / "fit.json"  # <sweep>/runs/<run>: scaling sweep's layout
    return load_law(sweep_fit) if sweep_fit.is_file() else PUBLISHED_CHINCHILLA


def _signature(buckets: dict) -> tuple:
    return tuple(sorted((b, m.get("tokens")) for b, m in buckets.items() if isinstance(m, dict)))


def comparable_series(records: Sequence[dict]) -> tuple[list[dict], int]:
    """The evaluations of one held-out document set (same tokens per bucket), one per step (the
    newest wins): the set with the most steps, the later one on a tie. Also how many other
    evaluations were left out."""
    groups: dict[tuple, dict[int, dict]] = {}
    for r in records:
        if isinstance(r.get("buckets"), dict) and r.get("step") is not None and r["buckets"]:
            groups.setdefault(_signature(r["buckets"]), {})[int(r["step"])] = r
    if not groups:
        return [], 0
    best = max(groups.values(), key=lambda g: (len(g), max(g)))
    others = sum(len(g) for g in groups.values() if g is not best)
    return [best[s] for s in sorted(best)], others


def weighted_loss(buckets: dict[str, dict], weights: dict[str, float] | None = None) -> float:
    """Σ w_b·L_b / Σ w_b over the buckets; w_b = held-out tokens unless `weights` are given."""
    w = {b: float(weights.get(b, 0.0) if weights else m.get("tokens") or 1) for b, m in buckets.items()}
    total = sum(w.values())
    return sum(w[b] * float(m["loss"]) for b, m in buckets.items()) / total if total else float("nan")


def phase_weights(plan: dict | None, step: int) -> dict[str, float] | None:
    """The mixture weights of the phase that trained `step` (the last phase past the plan)."""
    phases = (plan or {}).get("phases") or []
    for ph in phases:
        if ph["start_step"] <= step <= ph["end_step"]:
            return ph.get("weights")
    return phases[-1].get("weights") if phases else None


def train_losses(records: Sequence[dict]) -> tuple[list[int], np.ndarray]:
    """Steps and cumulative sums of the train losses of applied steps (skipped updates and
    non-finite losses left out), so any window's mean is one subtraction."""
    kept = [
        (int(r["step"]), float(r["loss"]))
        for r in records
        if r.get("action", "apply") == "apply" and isinstance(r.get("loss"), (int, float)) and math.isfinite(r["loss"])
    ]
    return [s for s, _ in kept], np.concatenate([[0.0], np.cumsum([l for _, l in kept])])


def smoothed_train(losses: tuple[list[int], np.ndarray], step: int, window: int) -> float | None:
    """Mean train loss of the last `window` applied steps up to `step`."""
    steps, cum = losses
    end = bisect.bisect_right(steps, step)
    start = max(0, end - window)
    return float((cum[end] - cum[start]) / (end - start)) if end > start else None


def _tokens_at(step: int, records_by_step: dict[int, dict], tokens_per_step: float) -> float:
    logged = records_by_step.get(step, {}).get("tokens")
    return float(logged) if isinstance(logged, (int, float)) and logged > 0 else step * tokens_per_step


def eval_points(
    series: Sequence[dict], steps: Sequence[dict], plan: dict | None, tokens_per_step: float, train_window: int
) -> list[EvalPoint]:
    """One point per evaluation with tokens > 0 (a log axis has no place for step 0)."""
    by_step = {int(r["step"]): r for r in steps}
    losses = train_losses(steps)
    points = []
    for e in series:
        step = int(e["step"])
        tokens = _tokens_at(step, by_step, tokens_per_step)
        if tokens <= 0:
            continue
        train = smoothed_train(losses, step, train_window)
        mixed = weighted_loss(e["buckets"], phase_weights(plan, step))
        points.append(
            EvalPoint(
                step=step,
                tokens=tokens,
                loss=weighted_loss(e["buckets"]),
                buckets={b: float(m["loss"]) for b, m in e["buckets"].items()},
                train=train,
                gap=None if train is None else mixed - train,
            )
        )
    return points


# -- the numbers ----------------------------------------------------------------------------------


def fit_slope(tokens: Sequence[float], losses: Sequence[float]) -> SlopeFit:
    """Ordinary least squares of loss on log10(tokens); the slope's standard error from the
    residuals (n − 2 degrees of freedom)."""
    x, y = np.log10(np.asarray(tokens, dtype=float)), np.asarray(losses, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    sxx = float(((x - x.mean()) ** 2).sum())
    resid = y - (slope * x + intercept)
    dof = len(x) - 2
    se = math.sqrt(float((resid**2).sum()) / dof / sxx) if dof > 0 and sxx > 0 else float("inf")
    return SlopeFit(float(slope), se, len(x))


def window(points: Sequence[EvalPoint], cfg: StopConfig) -> tuple[list[EvalPoint], str]:
    """The evaluations in the last `window_decades` of tokens, or the last `min_evals` when the
    decade holds fewer; and which of the two it is."""
    last = points[-1].tokens
    inside = [p for p in points if p.tokens >= last / 10**cfg.window_decades]
    decades = "decade" if cfg.window_decades == 1 else f"{cfg.window_decades:g} decades"
    if len(inside) >= cfg.min_evals:
        return inside, f"the last {decades} of tokens ({len(inside)} evaluations)"
    chosen = list(points[-cfg.min_evals :])
    span = math.log10(last / chosen[0].tokens)
    return chosen, (
        f"the last {cfg.min_evals} evaluations ({span:.2f} decades of tokens: the last {decades} holds only {len(inside)})"
    )


def bucket_signals(win: Sequence[EvalPoint], plan: dict | None, cfg: StopConfig, gap_widened: bool | None) -> list[BucketSignal]:
    """Per bucket: slope, rise above the window's earlier minimum, epochs, and the overfitting rule."""
    planned = (plan or {}).get("buckets") or {}
    epochs = {b: d["epochs"] for b, d in delivered(plan, win[-1].step)[0].items()} if plan else {}
    out = []
    for b in win[-1].buckets:
        pts = [p for p in win if b in p.buckets]
        earlier = pts[:-1]
        low = min(earlier, key=lambda p: p.buckets[b])
        rise = pts[-1].buckets[b] - low.buckets[b]
        rising = rise > cfg.rise_tolerance * low.buckets[b]
        train_fell = None if low.train is None or pts[-1].train is None else pts[-1].train < low.train
        e = epochs.get(b)
        repeated = (e is not None and e > 1.0) or bool(gap_widened)
        out.append(
            BucketSignal(
                bucket=b,
                loss=pts[-1].buckets[b],
                slope=fit_slope([p.tokens for p in pts], [p.buckets[b] for p in pts]),
                rise=rise,
                rise_from_step=low.step,
                rising=rising,
                train_fell=train_fell,
                epochs_planned=planned.get(b, {}).get("epochs"),
                epochs=e,
                overfitting=rising and train_fell is True and repeated,
            )
        )
    return out


def _gap_widened(win: Sequence[EvalPoint], cfg: StopConfig) -> bool | None:
    gaps = [p.gap for p in win if p.gap is not None]
    if len(gaps) < len(win):
        return None
    return gaps[-1] - min(gaps[:-1]) > cfg.gap_tolerance * win[-1].loss


# -- the verdict ----------------------------------------------------------------------------------


def verdict(s: StopSignals, cfg: StopConfig) -> tuple[str, list[str]]:
    """Overfitting a bucket, else diminishing returns, else keep training; the reasons say which
    numbers crossed which threshold."""
    over = sorted((b for b in s.buckets if b.overfitting), key=lambda b: -b.rise / b.loss)
    if over:
        return OVERFITTING, [_overfit_reason(b, s) for b in over]
    assert s.slope is not None and s.tokens_per_param is not None and s.optimal_ratio is not None
    past = s.tokens_per_param >= s.optimal_ratio
    slow = s.slope_ratio is not None and s.slope_ratio < cfg.diminishing_fraction
    flat = s.slope.flat(cfg.flat_sigmas)
    slope_text = (
        f"held-out loss changes {s.slope.slope:+.4f} ± {s.slope.se:.4f} nats per decade of tokens over "
        f"{s.window}; the law's slope there is {s.law_slope:+.4f} (ratio {s.slope_ratio:.2f}, "
        f"threshold {cfg.diminishing_fraction:g}; flat within {cfg.flat_sigmas:g} SE: {'yes' if flat else 'no'})"
    )
    ratio_text = f"{s.tokens_per_param:.3g} tokens per parameter vs a compute-optimal {s.optimal_ratio:.3g}"
    if past and (slow or flat):
        return DIMINISHING, [slope_text, ratio_text + ": past it"]
    reasons = [ratio_text + (": past it, but the loss still falls like the law says" if past else ": below it"), slope_text]
    if not past and (slow or flat) and s.law.outside_range(s.params or 0, s.tokens or 0) is None:
        reasons.append(
            "the loss falls slower than the law says before the compute-optimal ratio: look at the "
            "learning rate and the data rather than at stopping"
        )
    return KEEP, reasons


def _overfit_reason(b: BucketSignal, s: StopSignals) -> str:
    why = [
        f"{b.epochs:.2f} epochs of it trained" if b.epochs is not None and b.epochs > 1 else "",
        "the held-out − train gap widened" if s.gap_widened else "",
    ]
    return (
        f"bucket {b.bucket!r}: held-out loss rose {b.rise:+.4f} nats ({b.rise / (b.loss - b.rise):+.2%}) since "
        f"step {b.rise_from_step} while the train loss fell; " + ", ".join(w for w in why if w)
    )


def epoch_warnings(buckets: Sequence[BucketSignal], cfg: StopConfig) -> list[str]:
    return [
        f"bucket {b.bucket!r} is repeated {b.epochs_planned:.2f} epochs in the plan (> {cfg.epoch_limit:g}, "
        f"Muennighoff et al. 2023): expect its held-out loss to stop improving, then rise"
        for b in buckets
        if b.epochs_planned is not None and b.epochs_planned > cfg.epoch_limit
    ]


# -- the whole computation ------------------------------------------------------------------------


def compute_signals(events: Sequence[dict], evals: Sequence[dict], law: ReferenceLaw, cfg: StopConfig) -> StopSignals:
    """The signals from a run's events (train_start, train_step, eval) and eval records."""
    series, left_out = comparable_series([*[e for e in events if e.get("kind") == "eval"], *evals])
    notes = (
        [
            f"{left_out} evaluation(s) of another held-out document set (e.g. the eval stage's larger one) "
            "left out: a different set moves the loss level"
        ]
        if left_out
        else []
    )
    starts = [e for e in events if e.get("kind") == "train_start"]
    if not starts:
        return _too_few(law, cfg, len(series), notes, "no train_start event: the parameter count is unknown")
    plan = last_plan(list(events))
    points = eval_points(
        series, last_record_per_step(events), plan, float(starts[-1].get("tokens_per_step") or 0), cfg.train_window
    )
    if len(points) < cfg.min_evals:
        return _too_few(
            law,
            cfg,
            len(points),
            notes,
            f"needs ≥ {cfg.min_evals} evaluations of the same held-out "
            f"documents (this run has {len(points)}); set train.eval_every",
        )
    return _signals(points, starts[-1], plan, law, cfg, notes)


def _too_few(law: ReferenceLaw, cfg: StopConfig, evaluations: int, notes: list[str], why: str) -> StopSignals:
    return StopSignals(law=law, thresholds=cfg.model_dump(), evaluations=evaluations, verdict=TOO_FEW, reasons=[why], notes=notes)


def _signals(
    points: list[EvalPoint], start: dict, plan: dict | None, law: ReferenceLaw, cfg: StopConfig, notes: list[str]
) -> StopSignals:
    """Every signal of a series of at least `min_evals` evaluations, and the verdict."""
    win, described = window(points, cfg)
    last, tokens = win[-1], [p.tokens for p in win]
    params = float(start["non_embedding_params"] if law.params_kind == "non_embedding" else start["params"])
    slope, law_slope = fit_slope(tokens, [p.loss for p in win]), law.fitted_slope(params, tokens)
    law_loss = law.predict(params, last.tokens)
    gap_widened = _gap_widened(win, cfg)
    s = StopSignals(
        law=law,
        thresholds=cfg.model_dump(),
        evaluations=len(points),
        verdict="",
        reasons=[],
        notes=notes,
        points=points,
        window=described,
        window_steps=[p.step for p in win],
        step=last.step,
        tokens=last.tokens,
        params=params,
        slope=slope,
        law_slope=law_slope,
        law_slope_at_end=law.slope_per_decade(last.tokens),
        slope_ratio=slope.slope / law_slope if law_slope else None,
        law_loss=law_loss,
        gap_to_law=last.loss - law_loss,
        gap_widened=gap_widened,
        tokens_per_param=last.tokens / params,
        optimal_ratio=law.optimal_ratio(params, last.tokens),
        budget_tokens=(plan or {}).get("token_budget"),
        buckets=bucket_signals(win, plan, cfg, gap_widened),
    )
    s.verdict, s.reasons = verdict(s, cfg)
    s.notes += epoch_warnings(s.buckets, cfg) + _rising_notes(s, plan) + _law_notes(s)
    return s


def _rising_notes(s: StopSignals, plan: dict | None) -> list[str]:
    """Buckets whose held-out loss rose without the rest of the overfitting rule, and why it may be so."""
    notes = []
    for b in s.buckets:
        if not b.rising or b.overfitting:
            continue
        then, now = phase_weights(plan, b.rise_from_step) or {}, phase_weights(plan, s.step or 0) or {}
        shift = (
            f"; its mixture weight went from {then[b.bucket]:.3f} to {now[b.bucket]:.3f} (curriculum): "
            "forgetting, not overfitting"
            if b.bucket in then and b.bucket in now and abs(then[b.bucket] - now[b.bucket]) > 1e-9
            else ""
        )
        missing = [] if b.train_fell else ["the train loss did not fall (or was not logged)"]
        if not (b.epochs or 0) > 1 and not s.gap_widened:
            missing.append("it is not repeated and the held-out − train gap did not widen")
        notes.append(
            f"bucket {b.bucket!r}: held-out loss rose {b.rise:+.4f} nats since step {b.rise_from_step}, but "
            + " and ".join(missing)
            + shift
        )
    return notes


def _law_notes(s: StopSignals) -> list[str]:
    notes = [
        "the law is the final loss of runs whose learning rate schedule ends at D: a mid-run evaluation sits "
        "above it, and the final decay steepens the observed slope"
    ]
    notes.append(f"the law was fitted on: {s.law.provenance()}")
    if s.law.published:
        notes.append(
            "published law: another tokenizer and data, so its loss level (the gap) is indicative only; "
            "slopes transfer better than levels"
        )
    if s.law.outside_range(s.params or 0, s.tokens or 0):
        notes.append(f"this run lies {s.law.range_verdict(s.params or 0, s.tokens or 0)}")
    return notes


def stop_signals(run: RunDir, law: ReferenceLaw | None = None) -> StopSignals:
    """The signals of a run directory (law: `resolve_law(run)` unless given)."""
    skipped = SkippedLines()
    events, _ = split_attempts(read_events(run.sub("events.jsonl"), skipped))  # the weights that exist
    signals = compute_signals(events, eval_history(run), law or resolve_law(run), run.config.report.stop)
    note = skipped.message(run.sub("events.jsonl"))
    if note:  # the signals come from the other lines; say that some were left out
        signals.notes.append(note)
    return signals
