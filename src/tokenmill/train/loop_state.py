"""The training loop's own mutable state between steps, in one small object the loop's phases
share (instead of closures over locals): which step, its loss, the curriculum phase, and where
the LR schedule was read for the step being taken (it differs from the step under a time budget)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LoopState:
    step: int
    last_loss: float | None
    phase: str = ""
    # the step being taken -> where its LR was read (one entry; differs under a time budget). A
    # rewind records its target here so the rewound checkpoint's scheduler state is the target's.
    schedule_at: dict[int, float] = field(default_factory=dict)

    def read_schedule_at(self, step: int, at: float) -> None:
        self.schedule_at.clear()
        self.schedule_at[step] = at

    def schedule_step(self, step: int) -> float | int:
        """Where the LR of `step` was read (the step itself unless a time budget placed it)."""
        return self.schedule_at.get(step, step)
