"""A slow upward drift of the gradient norm, per layer group (gradient norm divergence).

The stability guard (train/guard.py) judges each step against a running median of the last
`guard.window` steps and, after `rebaseline_after` calm spikes, takes a higher norm as the new
normal: a norm that creeps up over thousands of steps never looks like a spike. This detector
watches the level instead:

    steps are cut into blocks of window / BLOCKS steps; a block's value is the mean log norm of
    the steps measured in it (a geometric mean: one outlier moves it little);
    the window mean is the mean of the last BLOCKS block values (its geometric-mean norm);
    the floor is the lowest window mean seen since the start (or the last reset);
    ratio = exp(window mean - floor): the norm's level now over its lowest level so far.

When a group's ratio reaches `ratio` it fires one `grad_drift` warning, and stays quiet until the
ratio falls back below the midpoint between 1 and the threshold (hysteresis: one event per
episode, not one per step). Memory per group is BLOCKS floats plus a few numbers, whatever the
run's length, and the whole state is plain JSON (saved in a checkpoint's state.json, so a resumed
run warns exactly where the uninterrupted one would).
"""

from __future__ import annotations

import math
from typing import Any

BLOCKS = 8  # blocks per window: the slope is fitted through this many points


def block_len(window: int) -> int:
    """Steps per block of a `window`-step window (at least 1)."""
    return max(1, window // BLOCKS)


def slope(values: list[float]) -> float:
    """Least-squares slope of `values` against 0, 1, 2, ... (0 for fewer than 2 points)."""
    n = len(values)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(values) / n
    num = sum((i - mx) * (v - my) for i, v in enumerate(values))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den


def _fresh() -> dict[str, Any]:
    # block: id of the open block; sum/n: its running Σ log norm and count; blocks: closed
    # [id, mean] pairs (the last BLOCKS); floor: [log level, first step, last step] or None.
    return {"block": None, "sum": 0.0, "n": 0, "blocks": [], "floor": None, "open": False}


class GradDrift:
    """`update(step, {group: norm})` -> the grad_drift events to write (usually none).

    window: steps one window spans (0: off); ratio: the warning threshold on the window mean over
    the floor; start_after: steps ignored at the start (the LR warmup moves the norm by design)."""

    def __init__(self, window: int, ratio: float, start_after: int = 0):
        self.window, self.ratio, self.start_after = window, ratio, start_after
        self.block = block_len(window)
        self.groups: dict[str, dict[str, Any]] = {}

    @property
    def enabled(self) -> bool:
        return self.window > 0

    def reset(self) -> None:
        """Forget every level (a new curriculum phase: new data, new sequence length, new norms)."""
        self.groups = {}

    def update(self, step: int, norms: dict[str, float] | None) -> list[dict[str, Any]]:
        if not self.enabled or not norms or step <= self.start_after:
            return []
        events = []
        for group, norm in norms.items():
            if not (math.isfinite(norm) and norm > 0):
                continue  # a non-finite step is the guard's business, not a level
            event = self._add(self.groups.setdefault(group, _fresh()), group, step, math.log(norm))
            if event is not None:
                events.append(event)
        return events

    def _add(self, g: dict[str, Any], group: str, step: int, value: float) -> dict[str, Any] | None:
        bid = step // self.block
        event = None
        if g["block"] is not None and bid != g["block"] and g["n"] > 0:
            event = self._close(g, group, step)
        if bid != g["block"]:
            g.update(block=bid, sum=0.0, n=0)
        g["sum"] += value
        g["n"] += 1
        return event

    def _close(self, g: dict[str, Any], group: str, step: int) -> dict[str, Any] | None:
        """Close the open block (at `step`, the first of the next one); judge the window it completes."""
        g["blocks"] = (g["blocks"] + [[g["block"], g["sum"] / g["n"]]])[-BLOCKS:]
        if len(g["blocks"]) < BLOCKS:
            return None
        level = sum(v for _, v in g["blocks"]) / BLOCKS
        first, last = g["blocks"][0][0] * self.block, (g["blocks"][-1][0] + 1) * self.block - 1
        if g["floor"] is None or level < g["floor"][0]:
            g["floor"] = [level, first, last]
        ratio = math.exp(level - g["floor"][0])
        if g["open"]:
            if ratio < (1 + self.ratio) / 2:
                g["open"] = False  # the episode is over: the next crossing warns again
            return None
        if ratio < self.ratio:
            return None
        g["open"] = True
        per_block = slope([v for _, v in g["blocks"]])
        return {
            "step": step,
            "group": group,
            "ratio": ratio,
            "threshold": self.ratio,
            "grad_norm": math.exp(level),
            "baseline": math.exp(g["floor"][0]),
            "window": [first, last],
            "baseline_window": g["floor"][1:],
            "growth_per_1k_steps": math.exp(per_block * 1000 / self.block),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "groups": {k: dict(v, blocks=[list(b) for b in v["blocks"]]) for k, v in self.groups.items()},
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore a saved state; one saved with another window (or none: an older checkpoint)
        starts afresh, since its blocks would not be this window's."""
        if not state or state.get("window") != self.window:
            self.groups = {}
            return
        self.groups = {k: dict(v, blocks=[list(b) for b in v["blocks"]]) for k, v in state["groups"].items()}
