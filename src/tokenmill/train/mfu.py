"""MFU against a peak that a step cannot beat.

MFU = achieved model FLOP/s over the peak. A peak measured at start (scaling/flops.py `peak_of`)
can come out low: another process on the same cores during the quick timing, a GPU clock not yet
up. A step that then achieves more than the "peak" would log an MFU above 100%, which no reader
can trust. So the peak is a running maximum: when a step's achieved FLOP/s beats it, it becomes
the peak (one `peak_raised` event per raise, with the old and new peak and the step), and MFU is
measured against it from then on, so it never exceeds 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenmill.scaling.flops import Peak


@dataclass
class MfuPeak:
    """The job's peak FLOP/s (every rank's), where it came from, and how it was raised."""

    flops: float
    kind: str
    origin: str

    @classmethod
    def of(cls, peak: Peak, world_size: int) -> "MfuPeak":
        """The job's peak: tokens/s and MFU count the global batch over every rank."""
        return cls(peak.flops * world_size, peak.kind, peak.origin)

    def mfu(self, achieved: float, step: int) -> tuple[float, dict[str, Any] | None]:
        """(MFU of a step that achieved `achieved` FLOP/s, the peak_raised event's fields if the
        step beat the peak, else None). The MFU is at most 1.0."""
        if achieved <= self.flops:
            return achieved / self.flops, None
        raised = {"step": step, "old_peak": self.flops, "new_peak": achieved, "old_source": self.kind}
        self.flops, self.kind = achieved, "raised"  # origin stays: what the first peak was
        return 1.0, raised
