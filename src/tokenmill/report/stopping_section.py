"""The report's "When to stop" section: the stopping-rule signals of report/stopping.py as a
verdict in plain words, the tables behind it and one chart (held-out loss against tokens on a log
axis, with the reference law)."""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from tokenmill.report.config import StopConfig
from tokenmill.errors import UserError
from tokenmill.report.page import table
from tokenmill.report.charts import _svg
from tokenmill.report.stopping import KEEP, TOO_FEW, BucketSignal, StopSignals, compute_signals, resolve_law
from tokenmill.runs import RunDir

import matplotlib.pyplot as plt  # noqa: E402  (after charts, which selects the Agg backend)

TITLE = "<h2>When to stop</h2>"
INTRO = (
    "<p>Stopping is not “the loss stopped falling” but “is more training still worth "
    "it?”. The held-out loss slope per decade of tokens against the reference law's, the gap to the law, the "
    "held-out − train gap, tokens per parameter against the compute-optimal ratio and the epochs over each "
    "bucket, with the verdict they add up to.</p>"
)


GAP_TABLE_ROWS = 50  # a long run's evaluations beyond these are in the chart, not the table
SIGNAL_HEADER = ("signal", "value", "compared with")
BUCKET_HEADER = (
    "bucket",
    "held-out loss",
    "slope per decade",
    "change vs the lowest earlier evaluation",
    "trend",
    "planned epochs",
    "epochs so far",
)


def _span(text: str, good: bool) -> str:
    return f'<span class="{"good" if good else "bad"}">{html.escape(text)}</span>'


def _pm(v: float | None, se: float | None = None) -> str:
    if v is None:
        return "—"
    return f"{v:+.4f}" + (f" ± {se:.4f}" if se is not None else "")


def signals_rows(s: StopSignals) -> list[list[str]]:
    """(signal, value, compared with) rows of the run-level signals, as text."""
    cfg = s.thresholds
    assert s.slope is not None and s.points
    last = s.points[-1]
    gap = last.gap
    level = "indicative only: published law" if s.law.published else "same tokenizer and data"
    if s.law.outside_range(s.params or 0, s.tokens or 0):
        level += "; outside the fit's range, not a prediction for this run (see below)"
    return [
        ["evaluations compared", f"{len(s.window_steps)} of {s.evaluations}", s.window],
        ["held-out loss (nats/token)", f"{last.loss:.4f}", f"step {s.step:,}, D = {s.tokens:,.0f} tokens"],
        [
            "slope per decade of tokens",
            _pm(s.slope.slope, s.slope.se),
            f"law over the same evaluations {_pm(s.law_slope)} (at D: {_pm(s.law_slope_at_end)}); "
            f"ratio {s.slope_ratio:.2f}, diminishing below {cfg['diminishing_fraction']:g} or within "
            f"{cfg['flat_sigmas']:g} SE of 0",
        ],
        [
            "gap to the law L − L(N, D)",
            _pm(s.gap_to_law),
            f"L(N, D) = {s.law_loss:.4f} at N = {s.params:,.0f} ({s.law.params_kind.replace('_', '-')}); {level}",
        ],
        [
            "held-out − train gap",
            _pm(gap),
            "widened"
            if s.gap_widened
            else ("not logged" if s.gap_widened is None else f"not widened (tolerance {cfg['gap_tolerance']:.1%} of the loss)"),
        ],
        [
            "tokens per parameter D/N",
            f"{s.tokens_per_param:.3g}",
            f"compute-optimal {s.optimal_ratio:.3g}"
            + (" (Chinchilla's rule of thumb)" if s.law.published else " (the law's, at C = 6·N·D)"),
        ],
        [
            "planned token budget spent",
            "—" if not s.budget_tokens else f"{(s.tokens or 0) / s.budget_tokens:.1%}",
            "—" if not s.budget_tokens else f"{s.budget_tokens:,.0f} tokens",
        ],
    ]


def bucket_state(b: BucketSignal) -> str:
    return "overfitting" if b.overfitting else "rising" if b.rising else "falling" if b.rise < 0 else "flat"


def bucket_rows(s: StopSignals) -> list[list[str]]:
    """Per bucket as text: loss, slope, change against the lowest earlier evaluation, trend, epochs."""
    return [
        [
            b.bucket,
            f"{b.loss:.4f}",
            _pm(b.slope.slope, b.slope.se),
            f"{b.rise:+.4f} (step {b.rise_from_step:,})",
            bucket_state(b),
            "—" if b.epochs_planned is None else f"{b.epochs_planned:.2f}",
            "—" if b.epochs is None else f"{b.epochs:.2f}",
        ]
        for b in s.buckets
    ]


def _bucket_rows_html(s: StopSignals) -> list[list[str]]:
    """bucket_rows with the trend coloured and planned epochs past the limit flagged."""
    limit = s.thresholds["epoch_limit"]
    rows = bucket_rows(s)
    for row, b in zip(rows, s.buckets):
        row[4] = _span(row[4], row[4] in ("falling", "flat"))
        if b.epochs_planned is not None and b.epochs_planned > limit:
            row[5] = _span(f"{row[5]} > {limit:g}", False)
    return rows


def gap_rows(s: StopSignals, limit: int = GAP_TABLE_ROWS) -> list[list[Any]]:
    """The newest `limit` evaluations: held-out, smoothed train and their gap."""
    return [[p.step, f"{p.tokens:,.0f}", p.loss, "—" if p.train is None else p.train, _pm(p.gap)] for p in s.points[-limit:]]


def chart(s: StopSignals) -> str:
    """Held-out loss against tokens (log axis): the run, each bucket, the window's fitted line, and
    the law (a published law drawn through the last evaluation: only its shape transfers)."""
    xs = np.array([p.tokens for p in s.points])
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
    ax.plot(xs, [p.loss for p in s.points], marker="o", markersize=4, linewidth=1.6, label="held-out (all buckets)")
    for b in s.points[-1].buckets:
        pts = [(p.tokens, p.buckets[b]) for p in s.points if b in p.buckets]
        ax.plot(*zip(*pts), linewidth=0.8, alpha=0.6, marker=".", label=f"held-out: {b}")
    grid = np.geomspace(xs.min() / 1.5, xs.max() * 1.5, 60)
    law = np.asarray(s.law.fit.predict(s.params, grid), dtype=float)
    shift = (s.gap_to_law or 0.0) if s.law.published else 0.0  # L_law + (L_obs − L_law) meets the last point
    ax.plot(
        grid,
        law + shift,
        linestyle="--",
        color="#444444",
        label="law's shape through the last evaluation" if s.law.published else "law L(N, D)",
    )
    win = [p for p in s.points if p.step in s.window_steps]
    wx = np.log10([p.tokens for p in win])
    slope, intercept = np.polyfit(wx, [p.loss for p in win], 1)
    ax.plot(10**wx, slope * wx + intercept, linestyle=":", color="#d62728", linewidth=1.6, label="fitted slope (window)")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens D")
    ax.set_ylabel("held-out loss (nats/token)")
    ax.set_title("Held-out loss against tokens")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _svg(fig)


def thresholds_table(s: StopSignals) -> str:
    fields = StopConfig.model_fields
    return table(["report.stop", "value", "meaning"], [[k, v, fields[k].description or ""] for k, v in s.thresholds.items()])


def _newest(s: StopSignals) -> str:
    n = len(s.points)
    return f"the newest {GAP_TABLE_ROWS} of {n} evaluations" if n > GAP_TABLE_ROWS else "every evaluation"


def _listing(items: list[str], cls: str = "") -> str:
    if not items:
        return ""
    return f"<ul{' class=' + cls if cls else ''}>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"


def render_signals(s: StopSignals) -> str:
    """The section's HTML for computed signals."""
    if s.verdict == TOO_FEW:
        return TITLE + "".join(f"<p class=muted>{html.escape(r)}</p>" for r in s.reasons) + _listing(s.notes, "muted")
    return "".join(
        [
            TITLE,
            INTRO,
            f"<p>Verdict: {_span(s.verdict, s.verdict == KEEP)}</p>",
            _listing(s.reasons),
            f"<p class=muted>Reference law: {html.escape(s.law.label)}: L(N, D) = {s.law.fit.E:.4g} + "
            f"{s.law.fit.A:.4g}/N<sup>{s.law.fit.alpha:.3g}</sup> + {s.law.fit.B:.4g}/D<sup>{s.law.fit.beta:.3g}</sup>.</p>",
            table(list(SIGNAL_HEADER), signals_rows(s)),
            "<h3>Per bucket</h3><p>Held-out trend over the same evaluations; a bucket is overfitting when its loss rose "
            f"more than {s.thresholds['rise_tolerance']:.1%} above its minimum while the train loss fell, and it is repeated "
            "(more than one epoch delivered) or the held-out − train gap widened.</p>",
            table(list(BUCKET_HEADER), _bucket_rows_html(s)),
            chart(s),
            f"<details><summary>held-out and train loss at {_newest(s)}</summary><p class=muted>"
            "Smoothed train loss: "
            f"the mean of the last {s.thresholds['train_window']} steps' losses; the held-out loss in the gap is weighted "
            "like the training mixture of that step's phase.</p>"
            + table(["step", "tokens", "held-out loss", "smoothed train loss", "held-out − train"], gap_rows(s))
            + "</details>",
            _listing(s.notes, "muted"),
            "<details><summary>thresholds</summary>" + thresholds_table(s) + "</details>",
        ]
    )


def section_stopping(run: RunDir, events: list[dict], evals: list[dict]) -> str:
    """The section for a run's events and eval records; a law file that cannot be read is said, not raised."""
    try:
        return render_signals(compute_signals(events, evals, resolve_law(run), run.config.report.stop))
    except UserError as exc:
        return TITLE + f"<p class=bad>{html.escape(str(exc))}</p>"
