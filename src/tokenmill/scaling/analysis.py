"""Everything `tokenmill scaling fit` computes from a sweep's runs, in one object the CLI prints,
writes as JSON and the report charts.

- L(N, D) by Chinchilla approach 3 with bootstrap intervals (scaling/fit.py) — the law that
  predicts the held-out runs from their N and D;
- IsoFLOP minima and N*(C), D*(C) power laws (approach 2, scaling/isoflop.py);
- Kaplan-style L(C) on the IsoFLOP minima and L(N) on the best loss per size (scaling/powerlaws.py),
  with L(C)'s prediction for each held-out run's compute as a second, independent check;
- FLOPs per token vs N, so the approach-3 frontier L*(C) follows the runs' exact compute;
- a backtest: the law refitted without the largest budget, predicting it (scaling/backtest.py);
- the run-to-run noise of repeated pairs (scaling/noise.py).

A part that the sweep cannot support (e.g. fewer than three budgets with a minimum for L(C)) is
left out with its reason in `notes`; approach 3 itself is required and raises when impossible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tokenmill.scaling.backtest import Backtest, backtest
from tokenmill.scaling.fit import (
    ChinchillaBootstrap,
    FitConfig,
    HoldoutCheck,
    ScalingFitError,
    bootstrap_runs,
    evaluate_holdout,
    fit_flops_per_token,
)
from tokenmill.scaling.isoflop import ComputeOptimal, IsoFlopError, IsoFlopResult, fit_compute_optimal, isoflop_minima
from tokenmill.scaling.noise import NoiseCheck, run_to_run_noise
from tokenmill.scaling.powerlaws import (
    ComputeFrontier,
    PowerLaw,
    PowerLawError,
    SizeLaw,
    fit_compute_frontier,
    fit_size_law,
)
from tokenmill.scaling.results import RunResult, holdout_runs, sweep_runs


@dataclass(frozen=True)
class FrontierCheck:
    """A held-out run's actual loss next to the Kaplan-style L(C) at its compute."""

    name: str
    flops: float
    actual: float
    predicted: float
    relative_error: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flops": self.flops,
            "actual": self.actual,
            "predicted": self.predicted,
            "relative_error": self.relative_error,
        }


@dataclass(frozen=True)
class ScalingAnalysis:
    runs: tuple[RunResult, ...]
    config: FitConfig
    chinchilla: ChinchillaBootstrap
    isoflop: IsoFlopResult
    compute_optimal: ComputeOptimal | None
    compute_frontier: ComputeFrontier | None
    size_law: SizeLaw | None
    flops_per_token: PowerLaw
    holdout: tuple[HoldoutCheck, ...]
    frontier_holdout: tuple[FrontierCheck, ...]
    noise: tuple[NoiseCheck, ...]
    backtest: Backtest | None
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.model_dump(mode="json"),
            "runs": [r.to_dict() for r in self.runs],
            "chinchilla": self.chinchilla.to_dict(),
            "isoflop": self.isoflop.to_dict(),
            "compute_optimal": None if self.compute_optimal is None else self.compute_optimal.to_dict(),
            "compute_frontier": None if self.compute_frontier is None else self.compute_frontier.to_dict(),
            "size_law": None if self.size_law is None else self.size_law.to_dict(),
            "flops_per_token": self.flops_per_token.to_dict(),
            "holdout": [h.to_dict() for h in self.holdout],
            "frontier_holdout": [h.to_dict() for h in self.frontier_holdout],
            "noise": [n.to_dict() for n in self.noise],
            "backtest": None if self.backtest is None else self.backtest.to_dict(),
            "notes": list(self.notes),
        }


def analyze(runs: Sequence[RunResult], config: FitConfig | None = None) -> ScalingAnalysis:
    """Fit every law the runs support and check each against the held-out runs."""
    config = config or FitConfig()
    notes: list[str] = []
    chinchilla = bootstrap_runs(runs, config)
    isoflop = isoflop_minima(runs)
    notes += [f"budget {b:.3g}: {reason}" for b, reason in isoflop.skipped]
    # A vertex outside the swept sizes is an extrapolation of a parabola, not a measured minimum:
    # it would steer the N*(C) and L(C) fits with numbers no run supports.
    minima = tuple(m for m in isoflop.minima if m.interior)
    notes += [
        f"budget {m.budget:.3g}: the parabola's minimum (N* = {m.params:.3g}) lies outside the swept sizes; "
        "not used for the N*(C), D*(C) and L(C) fits"
        for m in isoflop.minima
        if not m.interior
    ]

    compute_optimal = None
    try:
        compute_optimal = fit_compute_optimal(minima)
    except (IsoFlopError, PowerLawError) as exc:
        notes.append(str(exc))

    compute_frontier = None
    try:
        compute_frontier = fit_compute_frontier([m.compute for m in minima], [m.loss for m in minima])
    except PowerLawError as exc:
        notes.append(str(exc))

    fitted = sweep_runs(runs)
    size_law = None
    try:
        size_law = fit_size_law([r.params for r in fitted], [r.loss for r in fitted])
    except PowerLawError as exc:
        notes.append(str(exc))

    check = None
    try:
        check = backtest(runs, config)
    except ScalingFitError as exc:
        notes.append(str(exc))

    frontier_holdout: tuple[FrontierCheck, ...] = ()
    if compute_frontier is not None:
        frontier_holdout = tuple(
            FrontierCheck(r.name, r.flops, r.loss, compute_frontier(r.flops), (compute_frontier(r.flops) - r.loss) / r.loss)
            for r in holdout_runs(runs)
        )
    return ScalingAnalysis(
        runs=tuple(runs),
        config=config,
        chinchilla=chinchilla,
        isoflop=isoflop,
        compute_optimal=compute_optimal,
        compute_frontier=compute_frontier,
        size_law=size_law,
        flops_per_token=fit_flops_per_token(fitted),
        holdout=tuple(evaluate_holdout(runs, chinchilla)),
        frontier_holdout=frontier_holdout,
        noise=tuple(run_to_run_noise(runs)),
        backtest=check,
        notes=tuple(notes),
    )
