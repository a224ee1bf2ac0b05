"""Charts of a scaling analysis as inline SVG strings, like report/charts.py (self-contained HTML).

- `loss_vs_compute_chart`: every run's final loss against its compute, coloured by N; the
  IsoFLOP minima; the approach-3 frontier L*(C) and the Kaplan-style L(C) extended past the
  held-out runs; each held-out run with its prediction and bootstrap interval.
- `isoflop_chart`: loss against N for each budget with its parabola and vertex.
- `compute_optimal_chart`: N*(C) and D*(C) of the IsoFLOP minima with their power laws, next to
  the approach-3 frontier's N and D.
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import NullFormatter

from tokenmill.report.charts import _svg, plt
from tokenmill.scaling.analysis import ScalingAnalysis
from tokenmill.scaling.fit import FrontierPoint, ScalingFitError, frontier
from tokenmill.scaling.results import holdout_runs, sweep_runs


def _compute_span(analysis: ScalingAnalysis) -> np.ndarray:
    """From the smallest run's compute to 1.5× the largest (held-out runs included)."""
    flops = [r.flops for r in analysis.runs]
    return np.geomspace(min(flops), 1.5 * max(flops), 60)


def _frontier_or_none(analysis: ScalingAnalysis, span: np.ndarray) -> list[FrontierPoint] | None:
    """The approach-3 frontier, or None when the fitted law has none (a non-positive exponent)."""
    try:
        return frontier(analysis.chinchilla.fit, span, analysis.flops_per_token)
    except ScalingFitError:
        return None


def loss_vs_compute_chart(analysis: ScalingAnalysis) -> str:
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    runs = sweep_runs(analysis.runs)
    if runs:
        dots = ax.scatter(
            [r.flops for r in runs],
            [r.loss for r in runs],
            c=np.log10([r.params for r in runs]),
            cmap="viridis",
            s=14,
            label="sweep runs",
        )
        fig.colorbar(dots, ax=ax, label="log10 N (non-embedding)")
    minima = [m for m in analysis.isoflop.minima if m.interior]  # an exterior vertex is no measured minimum
    if minima:
        ax.scatter(
            [m.compute for m in minima],
            [m.loss for m in minima],
            marker="*",
            s=90,
            color="black",
            zorder=3,
            label="IsoFLOP minima",
        )
    span = _compute_span(analysis)
    points = _frontier_or_none(analysis, span)
    if points is not None:
        ax.plot(span, [p.loss for p in points], color="tab:blue", linewidth=1.3, label="L(N,D) frontier (approach 3)")
    if analysis.compute_frontier is not None:
        ax.plot(span, analysis.compute_frontier(span), color="tab:orange", linestyle="--", linewidth=1.1, label="L(C) on minima")
    for k, check in enumerate(analysis.holdout):
        err = None
        if check.interval is not None:
            err = [[check.predicted - check.interval.low], [check.interval.high - check.predicted]]
        ax.errorbar(
            [check.flops],
            [check.predicted],
            yerr=err,
            fmt="o",
            mfc="none",
            color="tab:red",
            capsize=3,
            label="held-out prediction" if k == 0 else None,
        )
        ax.scatter(
            [check.flops],
            [check.actual],
            marker="x",
            s=50,
            color="tab:red",
            label="held-out actual" if k == 0 else None,
            zorder=4,
        )
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # a decade or less of x: minor labels would overlap
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel("final held-out loss (nats/token)")
    ax.set_title("Loss vs compute")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig)


def isoflop_chart(analysis: ScalingAnalysis) -> str:
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    minima = {m.budget: m for m in analysis.isoflop.minima}
    budgets = sorted({r.budget for r in sweep_runs(analysis.runs) if r.budget is not None})
    colors = plt.cm.plasma(np.linspace(0.0, 0.85, max(len(budgets), 1)))
    for color, budget in zip(colors, budgets):
        group = [r for r in sweep_runs(analysis.runs) if r.budget == budget]
        ax.scatter([r.params for r in group], [r.loss for r in group], color=color, s=14, label=f"C={budget:.2g}")
        if budget in minima:
            m = minima[budget]
            ns = np.geomspace(min(r.params for r in group), max(r.params for r in group), 50)
            ax.plot(ns, m.parabola(np.log(ns)), color=color, linewidth=1.0)
            if m.interior:  # a vertex outside the swept sizes is an extrapolation: not marked as a minimum
                ax.scatter([m.params], [m.loss], marker="*", s=80, color=color, edgecolors="black", zorder=3)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # a decade or less of x: minor labels would overlap
    ax.set_xlabel("N (non-embedding parameters)")
    ax.set_ylabel("final held-out loss")
    ax.set_title("IsoFLOP profiles (parabola in log N, ★ minimum)")
    ax.grid(alpha=0.3)
    if budgets:
        ax.legend(fontsize=7)
    return _svg(fig)


def compute_optimal_chart(analysis: ScalingAnalysis) -> str:
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    span = _compute_span(analysis)
    points = _frontier_or_none(analysis, span)
    if points is not None:
        ax.plot(span, [p.params for p in points], color="tab:blue", label="N, approach 3")
        ax.plot(span, [p.tokens for p in points], color="tab:green", label="D, approach 3")
    minima = [m for m in analysis.isoflop.minima if m.interior]
    if minima:
        ax.scatter(
            [m.compute for m in minima], [m.params for m in minima], color="tab:blue", marker="*", s=60, label="N* IsoFLOP"
        )
        ax.scatter(
            [m.compute for m in minima], [m.tokens for m in minima], color="tab:green", marker="*", s=60, label="D* IsoFLOP"
        )
    if analysis.compute_optimal is not None:
        co = analysis.compute_optimal
        ax.plot(span, co.params(span), color="tab:blue", linestyle="--", linewidth=0.9, label=f"N* ∝ C^{co.params.exponent:.2f}")
        ax.plot(span, co.tokens(span), color="tab:green", linestyle="--", linewidth=0.9, label=f"D* ∝ C^{co.tokens.exponent:.2f}")
    for run in holdout_runs(analysis.runs):
        ax.scatter([run.flops], [run.params], marker="x", color="tab:red")
        ax.scatter([run.flops], [run.tokens], marker="x", color="tab:red")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # a decade or less of x: minor labels would overlap
    ax.set_yscale("log")
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel("compute-optimal N, D")
    ax.set_title("Compute-optimal allocation (× held-out runs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _svg(fig)


def all_charts(analysis: ScalingAnalysis) -> dict[str, str]:
    """Every scaling chart by title, in report order."""
    return {
        "Loss vs compute": loss_vs_compute_chart(analysis),
        "IsoFLOP profiles": isoflop_chart(analysis),
        "Compute-optimal allocation": compute_optimal_chart(analysis),
    }
