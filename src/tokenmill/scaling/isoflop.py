"""IsoFLOP minima (Chinchilla approach 2) and the compute-optimal power laws N*(C), D*(C).

For each IsoFLOP budget (the `budget` label of the sweep runs), fit a parabola of loss against
log N through the budget's runs; its vertex is N*(C) and the loss there L*(C). D*(C) is read off
the same runs: log D is interpolated linearly in log N across the budget's runs and evaluated at
N*. When every run of the budget spends exactly C = 6·N·D this is C/(6·N*); with real runs'
exact FLOPs (attention, output projection) it stays on the runs' own compute curve. C of a budget
is the geometric mean of its runs' exact FLOPs (the label is only the plan).

A budget is skipped, with its reason, when it has fewer than 3 distinct sizes or the parabola
opens downwards (no minimum). A vertex outside the swept sizes is kept but marked
`interior=False`: it is an extrapolation, and the sweep should widen that budget's sizes.

N*(C) = k_N·C^a and D*(C) = k_D·C^b are log-log lines through the minima (`PowerLaw`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tokenmill.errors import UserError
from tokenmill.scaling.powerlaws import PowerLaw, fit_power_law
from tokenmill.scaling.results import RunResult, sweep_runs

MIN_SIZES = 3


class IsoFlopError(UserError, ValueError):
    """Too few IsoFLOP budgets with a minimum to fit N*(C), D*(C)."""


@dataclass(frozen=True)
class Parabola:
    """loss = c2·x² + c1·x + c0 with x = log N."""

    c2: float
    c1: float
    c0: float

    def __call__(self, log_n: Any) -> Any:
        return self.c2 * np.asarray(log_n) ** 2 + self.c1 * np.asarray(log_n) + self.c0


@dataclass(frozen=True)
class IsoFlopMinimum:
    """The loss-minimising size of one budget."""

    budget: float
    compute: float
    params: float  # N*(C)
    tokens: float  # D*(C)
    loss: float  # the parabola's value at N*
    sizes: int  # distinct N in the budget
    interior: bool  # N* lies within the swept sizes
    parabola: Parabola

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "compute": self.compute,
            "params": self.params,
            "tokens": self.tokens,
            "loss": self.loss,
            "sizes": self.sizes,
            "interior": self.interior,
            "parabola": [self.parabola.c2, self.parabola.c1, self.parabola.c0],
        }


@dataclass(frozen=True)
class IsoFlopResult:
    minima: tuple[IsoFlopMinimum, ...]
    skipped: tuple[tuple[float, str], ...]  # (budget, reason)

    def to_dict(self) -> dict[str, Any]:
        return {"minima": [m.to_dict() for m in self.minima], "skipped": [{"budget": b, "reason": r} for b, r in self.skipped]}


def budget_groups(runs: Sequence[RunResult]) -> dict[float, list[RunResult]]:
    """Sweep runs with a budget label, grouped by it (ascending)."""
    groups: dict[float, list[RunResult]] = defaultdict(list)
    for run in sweep_runs(runs):
        if run.budget is not None:
            groups[run.budget].append(run)
    return {b: groups[b] for b in sorted(groups)}


def budget_minimum(budget: float, runs: Sequence[RunResult]) -> IsoFlopMinimum | str:
    """The parabola vertex of one budget, or the reason there is none."""
    log_n = np.log([r.params for r in runs])
    sizes = np.unique(log_n).size
    if sizes < MIN_SIZES:
        return f"{sizes} distinct size(s); a parabola needs {MIN_SIZES}"
    c2, c1, c0 = (float(v) for v in np.polyfit(log_n, [r.loss for r in runs], 2))
    if c2 <= 0:
        return "loss vs log N curves downwards: no minimum inside this budget"
    x_star = -c1 / (2 * c2)
    slope, intercept = np.polyfit(log_n, np.log([r.tokens for r in runs]), 1)
    parabola = Parabola(c2, c1, c0)
    return IsoFlopMinimum(
        budget=budget,
        compute=float(np.exp(np.mean(np.log([r.flops for r in runs])))),
        params=math.exp(x_star),
        tokens=math.exp(float(intercept) + float(slope) * x_star),
        loss=float(parabola(x_star)),
        sizes=sizes,
        interior=bool(log_n.min() <= x_star <= log_n.max()),
        parabola=parabola,
    )


def isoflop_minima(runs: Sequence[RunResult]) -> IsoFlopResult:
    """Every budget's minimum, and the budgets skipped with why."""
    minima, skipped = [], []
    for budget, group in budget_groups(runs).items():
        found = budget_minimum(budget, group)
        if isinstance(found, str):
            skipped.append((budget, found))
        else:
            minima.append(found)
    return IsoFlopResult(tuple(minima), tuple(skipped))


@dataclass(frozen=True)
class ComputeOptimal:
    """N*(C) and D*(C) as power laws of compute, from the IsoFLOP minima."""

    params: PowerLaw
    tokens: PowerLaw

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params.to_dict(), "tokens": self.tokens.to_dict()}


def fit_compute_optimal(minima: Sequence[IsoFlopMinimum]) -> ComputeOptimal:
    """Log-log lines N* ∝ C^a and D* ∝ C^b through the minima (at least two budgets)."""
    if len({m.compute for m in minima}) < 2:
        raise IsoFlopError(f"N*(C), D*(C) need minima at two or more budgets, got {len(minima)}")
    compute = [m.compute for m in minima]
    return ComputeOptimal(fit_power_law(compute, [m.params for m in minima]), fit_power_law(compute, [m.tokens for m in minima]))
