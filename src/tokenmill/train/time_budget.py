"""A training run stopped by wall-clock time (train.max_seconds) rather than by a step count.

Comparing two trainers "at equal time" by giving each the step count a speed probe predicts
leaves each run a few percent off its budget (the probe's s/step is not the run's). With a time
budget the run itself stops at the optimizer step whose end is nearest `max_seconds` (after step k
when elapsed_k + ½·seconds_k >= max_seconds: one more step, as long again, would overshoot by
more than this one falls short), and the LR schedule runs on the elapsed share of the budget instead of
step / max_steps, so warmup and decay still span the run whatever its speed turns out to be:

    schedule step of step k = max_steps · min(1, (elapsed before k + seconds of step k-1) / max_seconds)

(the previous step's seconds stand in for step k's own, unknown until it ends; step 1 uses
schedule step 1). `max_steps` stays the ceiling: it sizes the data plan and bounds the run.
Step seconds are the trainer's per-step clock (no checkpoint or evaluation time), summed over
resumed segments: a resumed run restores `elapsed` from its checkpoint. The LR of each step
depends on measured time, so a time-budgeted run is not bit-reproducible across runs, unlike a
step-budgeted one; every step's schedule step is logged so it can be recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TimeBudget:
    """Elapsed training seconds of a run with `max_seconds` (None: a step-budgeted run)."""

    max_seconds: float | None
    max_steps: int
    elapsed: float = 0.0
    last_step_seconds: float | None = None

    @property
    def enabled(self) -> bool:
        return self.max_seconds is not None

    def schedule_step(self, step: int) -> float:
        """The step `lr_at` is evaluated at for optimizer step `step`: `step` itself without a budget."""
        if self.max_seconds is None:
            return float(step)
        if self.last_step_seconds is None:
            return 1.0
        share = min(1.0, (self.elapsed + self.last_step_seconds) / self.max_seconds)
        return max(1.0, self.max_steps * share)

    def add(self, seconds: float) -> None:
        """Count one finished optimizer step's seconds."""
        self.elapsed += seconds
        self.last_step_seconds = seconds

    def spent(self) -> bool:
        """True once stopping now is nearer the budget than one more step would be (never without one)."""
        if self.max_seconds is None or self.last_step_seconds is None:
            return False
        return self.elapsed + 0.5 * self.last_step_seconds >= self.max_seconds

    def state_dict(self) -> dict[str, Any]:
        return {"max_seconds": self.max_seconds, "elapsed": self.elapsed, "last_step_seconds": self.last_step_seconds}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore a checkpoint's elapsed seconds (absent in step-budgeted checkpoints: from zero)."""
        state = state or {}
        self.elapsed = float(state.get("elapsed", 0.0))
        last = state.get("last_step_seconds")
        self.last_step_seconds = None if last is None else float(last)
