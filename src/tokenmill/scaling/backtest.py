"""A check of the law before the big run: refit without the largest budget and predict it.

The held-out run costs more than the whole sweep, so a sweep should first show that its law
extrapolates at all. The backtest fits approach 3 on every budget but the largest and predicts
the largest budget's runs from their N and D: a 2x extrapolation (for budgets a factor 2 apart)
made entirely from data the sweep already has. Large or one-sided errors here warn that a 4x
prediction will not hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tokenmill.scaling.fit import FitConfig, ScalingFitError, fit_runs
from tokenmill.scaling.results import RunResult, sweep_runs


@dataclass(frozen=True)
class Backtest:
    """Runs of the largest budget predicted by the law fitted on the smaller budgets."""

    budget: float
    fitted_budgets: tuple[float, ...]
    names: tuple[str, ...]
    predicted: tuple[float, ...]
    actual: tuple[float, ...]

    @property
    def errors(self) -> tuple[float, ...]:
        """(predicted − actual) / actual per run."""
        return tuple((p - a) / a for p, a in zip(self.predicted, self.actual))

    @property
    def max_abs_error(self) -> float:
        return max(abs(e) for e in self.errors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "fitted_budgets": list(self.fitted_budgets),
            "names": list(self.names),
            "predicted": list(self.predicted),
            "actual": list(self.actual),
            "errors": list(self.errors),
            "max_abs_error": self.max_abs_error,
        }


def backtest(runs: Sequence[RunResult], config: FitConfig | None = None) -> Backtest:
    """Fit the sweep runs of all budgets but the largest; predict the largest budget's runs."""
    fitted = [r for r in sweep_runs(runs) if r.budget is not None]
    budgets = sorted({r.budget for r in fitted if r.budget is not None})  # (the filter again: mypy narrows only here)
    if len(budgets) < 3:
        raise ScalingFitError(f"a backtest needs sweep runs at three or more budgets, got {len(budgets)}")
    top = budgets[-1]
    law = fit_runs([r for r in fitted if r.budget != top], config or FitConfig())
    target = [r for r in fitted if r.budget == top]
    return Backtest(
        budget=top,
        fitted_budgets=tuple(budgets[:-1]),
        names=tuple(r.name for r in target),
        predicted=tuple(float(law.predict(r.params, r.tokens)) for r in target),
        actual=tuple(r.loss for r in target),
    )
