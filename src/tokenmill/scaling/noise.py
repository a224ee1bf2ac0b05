"""Run-to-run noise of the final loss: a sweep pair trained again with other seeds.

A prediction can only be checked to within the noise of the run it predicts. The sweep's
`repeats` train some (budget, shape) pairs again with another `train.seed` (initialization and
batch order); this module groups every run of a pair — the sweep run and its repeats — and gives
the spread of their final losses. Repeats are never fitted, so the fit sees each pair once.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from tokenmill.scaling.results import RunResult


@dataclass(frozen=True)
class NoiseCheck:
    """The final losses of one (N, D) pair trained with several seeds."""

    params: int
    tokens: int
    flops: float
    names: tuple[str, ...]
    losses: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.losses)

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1): an unbiased variance from a handful of seeds."""
        return statistics.stdev(self.losses)

    @property
    def relative_std(self) -> float:
        return self.std / self.mean

    @property
    def relative_range(self) -> float:
        return (max(self.losses) - min(self.losses)) / self.mean

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "tokens": self.tokens,
            "flops": self.flops,
            "names": list(self.names),
            "losses": list(self.losses),
            "mean": self.mean,
            "std": self.std,
            "relative_std": self.relative_std,
            "relative_range": self.relative_range,
        }


def run_to_run_noise(runs: Iterable[RunResult]) -> list[NoiseCheck]:
    """One NoiseCheck per (N, D) pair with a repeat run, holding the sweep run and every repeat."""
    runs = list(runs)
    pairs = sorted({(r.params, r.tokens) for r in runs if r.role == "repeat"})
    checks = []
    for params, tokens in pairs:
        group = [r for r in runs if (r.params, r.tokens) == (params, tokens) and r.role in ("sweep", "repeat")]
        if len(group) < 2:
            continue
        group.sort(key=lambda r: (r.role != "sweep", r.name))
        checks.append(
            NoiseCheck(
                params=params,
                tokens=tokens,
                flops=group[0].flops,
                names=tuple(r.name for r in group),
                losses=tuple(r.loss for r in group),
            )
        )
    return checks
