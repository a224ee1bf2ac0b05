"""When the training loop saves, and the saving itself (a Checkpointer the loop calls with a step).

CheckpointPolicy is the pure decision (testable without a model); Checkpointer writes the
training state through dist_checkpoint.save_train_checkpoint and remembers what it saved, so the
loop never saves one step twice; GraceWarning says once when a step plus a save would outlast a
preemption's grace period."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch
from torch import nn

from tokenmill.train.dist_checkpoint import save_train_checkpoint
from tokenmill.train.distributed import DistContext
from tokenmill.train.errors import STAGE


class CheckpointPolicy:
    """A checkpoint every `ckpt_every` steps (0: none periodic) and at the last step, never twice
    for one step. None while a spike is open: the newest checkpoint stays the last good one, the
    rollback target."""

    def __init__(self, ckpt_every: int):
        self.ckpt_every = ckpt_every

    def due(self, step: int, last: bool, spike_open: bool, saved_step: int) -> bool:
        periodic = self.ckpt_every > 0 and step % self.ckpt_every == 0 and not spike_open
        return (periodic or last) and saved_step != step


class GraceWarning:
    """Once per run: a step plus a checkpoint measured longer than the preemption grace, so a
    SIGTERM now would likely be followed by SIGKILL before the save ends."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.warned = False

    def check(self, step: int, step_s: float, checkpoint_s: float | None) -> dict[str, Any] | None:
        if self.warned or checkpoint_s is None or step_s + checkpoint_s <= self.grace_s:
            return None
        self.warned = True
        return {"step": step, "step_s": step_s, "checkpoint_s": checkpoint_s, "grace_s": self.grace_s}


class Checkpointer:
    """Saves the training state of a step (every rank takes part) and writes its `checkpoint` event.

    `state_fields(step, loss)` gives state.json's fields at save time (the guard, health and
    schedule state live in their own objects); `unwatched` pauses the hang watchdog around a save."""

    def __init__(
        self,
        root: Path,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        ctx: DistContext,
        events: Any,
        state_fields: Callable[[int, float | None], dict[str, Any]],
        keep: tuple[int, int],
        start_step: int,
        resumed: bool,
        unwatched: Callable[[], ContextManager[object]] = contextlib.nullcontext,
    ):
        self.root, self.model, self.optimizer, self.ctx, self.events = root, model, optimizer, ctx, events
        self.state_fields, self.keep, self.unwatched = state_fields, keep, unwatched
        self.saved_step = start_step if resumed else -1  # a resumed run's start step is on disk
        self.last_step, self.last_t = start_step, time.perf_counter()
        self.last_seconds: float | None = None  # how long the newest save took (None: none yet)

    def save(self, step: int, loss: float | None) -> Path:
        t0 = time.perf_counter()
        self.last_step, self.last_t = step, t0
        with self.unwatched():
            path = save_train_checkpoint(
                self.root,
                step,
                self.model,
                self.optimizer,
                self.state_fields(step, loss),
                self.ctx,
                keep=self.keep[0],
                keep_every=self.keep[1],
            )
        self.last_seconds = time.perf_counter() - t0
        self.saved_step = step
        self.events.write(
            STAGE,
            "checkpoint",
            step=step,
            path=str(path),
            seconds=round(self.last_seconds, 4),
            bytes=sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if self.ctx.is_main else None,
        )
        return path

    def path_of(self, step: int, loss: float | None) -> Path:
        """The checkpoint of `step`, saved now unless it already is (a stop at a saved step)."""
        return self.save(step, loss) if self.saved_step != step else self.root / f"step_{step}"

    def age(self, step: int, now: float) -> dict[str, Any]:
        """Steps and seconds since the newest save started (train_step's ckpt_age_* fields)."""
        return {"ckpt_age_steps": step - self.last_step, "ckpt_age_s": round(now - self.last_t, 3)}

    def keep_spike_state(self, step: int, keep: int) -> Path:
        """θ_{step-1} and its optimizer state (the spiking step is not applied), kept for diagnosis
        under spikes/: `tokenmill replay --step <step>` starts from it; no resume or rollback target."""
        with self.unwatched():
            return save_train_checkpoint(
                self.root / "spikes",
                step - 1,
                self.model,
                self.optimizer,
                self.state_fields(step - 1, None),
                self.ctx,
                keep=keep,
            )
