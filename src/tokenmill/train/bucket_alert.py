"""A bucket whose training loss rose while the others did not: the early warning for one data
source going bad (a shard of garbage, an encoding bug, a broken filter), which the global loss
dilutes by the bucket's share of the batch and the spike guard may never see.

Each bucket's per-step training loss (train/bucket_loss.py) is compared with the running median
of its last `window` values that were not alarming; `patience` values in a row above `ratio` ×
that median (steps where the bucket has no row do not count either way) make one
`bucket_loss_warning` per episode, naming the bucket, its ratio and the other buckets' ratios (a
rise of every bucket is a model problem, not a data one). The episode closes when the bucket is
back under the threshold. Baselines restart at a curriculum phase change (another sequence
length or mixture moves every bucket's level).

Memory: `window` floats per bucket; the state is JSON and saved in each checkpoint.
"""

from __future__ import annotations

import statistics
from typing import Any


class BucketLossAlert:
    def __init__(self, ratio: float = 1.5, patience: int = 3, window: int = 50, min_history: int = 10):
        self.ratio, self.patience, self.window, self.min_history = ratio, patience, window, min_history
        self.history: dict[str, list[float]] = {}
        self.streak: dict[str, int] = {}
        self.open: set[str] = set()

    def _median(self, bucket: str) -> float | None:
        hist = self.history.get(bucket, [])
        return statistics.median(hist) if len(hist) >= self.min_history else None

    def update(self, step: int, losses: dict[str, float]) -> list[dict[str, Any]]:
        """The bucket_loss_warning events of step `step`, whose per-bucket losses are `losses`."""
        ratios = {b: v / m for b, v in losses.items() if (m := self._median(b)) is not None and m > 0}
        out = []
        for bucket, value in losses.items():
            r = ratios.get(bucket)
            if r is not None and r > self.ratio:
                self.streak[bucket] = self.streak.get(bucket, 0) + 1
                if self.streak[bucket] >= self.patience and bucket not in self.open:
                    self.open.add(bucket)
                    out.append(
                        {
                            "step": step,
                            "bucket": bucket,
                            "loss": value,
                            "median": self._median(bucket),
                            "ratio": r,
                            "threshold": self.ratio,
                            "steps": self.streak[bucket],
                            "other_buckets": {b: round(x, 4) for b, x in sorted(ratios.items()) if b != bucket},
                        }
                    )
                continue  # an alarming value never joins its own baseline
            self.streak[bucket] = 0
            self.open.discard(bucket)
            hist = self.history.setdefault(bucket, [])
            hist.append(float(value))
            del hist[: -self.window]
        return out

    def reset(self) -> None:
        """Forget the baselines (a curriculum phase changes every bucket's loss level)."""
        self.history.clear()
        self.streak.clear()
        self.open.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"history": {b: list(h) for b, h in self.history.items()}, "streak": dict(self.streak), "open": sorted(self.open)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.history = {b: [float(v) for v in h] for b, h in (state.get("history") or {}).items()}
        self.streak = {b: int(v) for b, v in (state.get("streak") or {}).items()}
        self.open = set(state.get("open") or [])
