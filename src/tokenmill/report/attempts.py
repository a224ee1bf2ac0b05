"""Training attempts: the stretches of a run's event log between fresh starts of training.

A run directory keeps one event log for its whole life. When training starts over from step 0
(the config or data changed and `tokenmill run` set the checkpoints aside, `--force train`, or a
start with no checkpoint to resume), the earlier attempt's steps, evaluations and incidents stay
in the log but describe weights that no longer exist. Drawn on the current attempt's step axis,
an earlier attempt's "interrupted 24" would claim the run that replaced it was interrupted at
step 24. So the report draws only the current attempt, and lists the earlier ones apart: how far
each got, how it ended and where its checkpoints went.

An attempt starts at a `train_start` at step 0 with no `resumed` since the previous train_start
(a resume, or a supervisor restart from a checkpoint, continues the same attempt). The events of
the train and eval stages between two such starts belong to the earlier one; the other stages'
events (curate, tokenize, ...) belong to no attempt and are always kept.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

# The stages whose events describe one attempt's weights (None: a record without a stage, as the
# report's own tests and older logs write them, counts as training's).
ATTEMPT_STAGES = frozenset({"train", "eval", None})
# How an attempt ended, from its last event of these kinds (the newest wins).
ENDINGS = ("train_done", "interrupted", "preempted", "diverged", "hang", "restart", "checkpoints_set_aside")


@dataclass
class Attempt:
    """One attempt's train and eval events, in log order."""

    number: int  # 1 = the first in the log
    events: list[dict] = field(default_factory=list)

    def steps_reached(self) -> int:
        """The highest step any of its train_step records reached (0: none)."""
        steps = [int(e["step"]) for e in self.events if e.get("kind") == "train_step" and isinstance(e.get("step"), int)]
        return max(steps, default=0)

    def started(self) -> float | None:
        times = [e["t"] for e in self.events if isinstance(e.get("t"), (int, float))]
        return min(times) if times else None

    def ending(self) -> str:
        """How it ended, in words: the newest of the ending events (set-aside aside), else that the
        log says nothing (the process was killed, or crashed before it could write)."""
        ends = [e for e in self.events if e.get("kind") in ENDINGS and e.get("kind") != "checkpoints_set_aside"]
        if not ends:
            return "no end recorded (killed, or crashed)"
        e = ends[-1]
        kind, step = e.get("kind"), e.get("step")
        if kind == "train_done":
            return f"finished at step {step}"
        if kind == "interrupted":
            return f"interrupted (Ctrl-C) at step {step}"
        if kind == "preempted":
            return f"preempted (SIGTERM) at step {step}"
        if kind == "diverged":
            return f"diverged at step {step}"
        if kind == "hang":
            return f"a rank hung at step {step}"
        return f"restarted by {'torchrun' if e.get('by') == 'torchrun' else 'the supervisor'} with no checkpoint to resume from"

    def set_aside(self) -> str:
        """Where its checkpoints and evaluations went (relative to the run), or why nowhere."""
        moves = [e for e in self.events if e.get("kind") == "checkpoints_set_aside"]
        if not moves:
            return "none set aside (it had no checkpoint, or they were removed)"
        e = moves[-1]
        return f"{Path(str(e.get('path'))).name}/ ({e.get('reason')})"


def split_attempts(events: Iterable[dict]) -> tuple[list[dict], list[Attempt]]:
    """(the log without the earlier attempts' train and eval events, the earlier attempts in order).
    A log with one attempt comes back whole, with no earlier attempt."""
    log = list(events)
    attempts = [Attempt(1)]
    current: list[bool] = []  # per event of the log: kept (outside any attempt, or in the newest)
    resumed_since, seen_start = False, False
    for e in log:
        if e.get("stage") not in ATTEMPT_STAGES:
            current.append(True)
            continue
        kind = e.get("kind")
        if kind == "train_start" and not resumed_since and e.get("step") in (0, None):
            if seen_start:  # a fresh start after an earlier one: that one's weights are gone
                attempts.append(Attempt(len(attempts) + 1))
            seen_start = True
        if kind in ("train_start", "resumed"):
            resumed_since = kind == "resumed"
        attempts[-1].events.append(e)
        current.append(False)
    if len(attempts) == 1:
        return log, []
    newest = {id(e) for e in attempts[-1].events}
    return [e for e, keep in zip(log, current) if keep or id(e) in newest], attempts[:-1]


def attempts_table(earlier: Sequence[Attempt]) -> str:
    """The earlier attempts as an HTML table, "" when there are none."""
    if not earlier:
        return ""
    rows = []
    for a in earlier:
        t = a.started()
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC" if t is not None else "—"
        cells = [str(a.number), when, f"{a.steps_reached():,}", a.ending(), a.set_aside()]
        rows.append("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("attempt", "started", "steps reached", "how it ended", "checkpoints set aside to"))
    n = len(earlier)
    return (
        f"<h3>Earlier training attempts ({n})</h3><p class=muted>Training started over from step 0 "
        f"{'once' if n == 1 else f'{n} times'} in this run directory (a changed config or data, "
        "<code>--force train</code>, or nothing to resume from). The charts and tables of this section show "
        "only the current attempt; the earlier ones' steps and events are summed up here, their checkpoints and "
        "evaluations kept in the folder named.</p>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    )
