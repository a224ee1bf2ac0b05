"""Carrying out the stability guard's rollback verdict, and the data a rewound step draws.

The guard (guard.py) only decides; here its verdict meets the disk: the newest good checkpoint
(verified, written outside a spike) is loaded, the LR backed off, and, when rewinding, the
checkpoints of the abandoned attempt are dropped. A rewound step trains on a fresh draw of the
data (DataDraws): the same loader under another seed, as reproducible on resume as the first."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from tokenmill.mixture.loader import Loader
from tokenmill.train.checkpoint import CheckpointError, list_checkpoints, verify_checkpoint
from tokenmill.train.distributed import DistContext
from tokenmill.train.errors import STAGE, TrainingDiverged
from tokenmill.train.guard import StabilityGuard
from tokenmill.train.restore import load_training_state


def draw_seed(seed: int, draw: int) -> int:
    """The loader seed of draw `draw` of the data (0: the run's own): fresh batches for the steps a
    rewinding rollback takes again."""
    return seed if draw == 0 else (int(seed) * 1_000_003 + 7919 * draw) % (2**31 - 1)


class DataDraws:
    """The loader of each step's batch: draw k > 0 (a step a rewinding rollback took back k times)
    is the loader under draw_seed(seed, k), built on first use; the guard state names the draws."""

    def __init__(self, first: Loader, guard: StabilityGuard, make: Callable[[int], Loader]):
        self.guard, self.make = guard, make
        self.loaders: dict[int, Loader] = {0: first}

    def of(self, step: int) -> Loader:
        k = self.guard.draw(step)
        if k not in self.loaders:
            self.loaders[k] = self.make(k)
        return self.loaders[k]

    def close(self) -> None:
        for each in self.loaders.values():
            each.close()


def good_checkpoint(root: Path, below: int) -> tuple[int, Path] | None:
    """The newest checkpoint of a step < `below` that verifies and was written outside a spike."""
    for step, path in reversed(list_checkpoints(root)):
        if step >= below:
            continue
        try:
            state = verify_checkpoint(path)
        except (CheckpointError, OSError, ValueError):
            continue
        if not (state.get("guard") or {}).get("spike"):
            return step, path
    return None


def roll_back(
    step: int,
    guard: StabilityGuard,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    ckpt_root: Path,
    events: Any,
    loss: float,
    grad_norm: float,
) -> tuple[int, Path]:
    """Carry out the guard's rollback verdict at `step`: the last good checkpoint's weights and
    optimizer state, the LR backed off, the data window since that checkpoint skipped (rewinding:
    the step counter goes back to the checkpoint's). Returns (its step, its path); with no good
    checkpoint or no rollback left, raises TrainingDiverged after a `diverged` event."""
    spike = dict(guard.spike or {})
    target = good_checkpoint(ckpt_root, guard.good_checkpoint_bound())
    why = (
        f"the loss did not come back within {guard.cfg.recover_steps} steps of the spike at step "
        f"{spike.get('start')} ({spike.get('reason')}; loss {loss:.4g} vs {spike.get('pre_level')} before)"
    )
    if guard.rollbacks_left <= 0 or target is None:
        reason = (
            "no checkpoint from before the spike is left to roll back to"
            if target is None
            else f"{guard.cfg.max_rollbacks} rollbacks already"
        )
        events.write(STAGE, "diverged", step=step, loss=loss, grad_norm=grad_norm, reason=reason, spike=spike)
        raise TrainingDiverged(
            f"training diverged at step {step}: {why}, and {reason}. Lower train.lr or "
            f"raise train.warmup_steps (checkpoints: {ckpt_root})"
        )
    to_step, path = target
    load_training_state(path, model, optimizer, restore_rng=False)  # verified by good_checkpoint
    events.write(STAGE, "rollback", checkpoint=str(path), why=why, **guard.rolled_back(step, to_step))
    return to_step, path


def drop_checkpoints_after(ckpt_root: Path, to_step: int, ctx: DistContext) -> None:
    """Before a rewind: the checkpoints after `to_step` belong to the abandoned attempt, and a
    resume must never pick them. Dropped before the rewound checkpoint is written, so a kill in
    between resumes from the old `to_step` checkpoint and replays the very same rollback."""
    if ctx.is_main:
        for s, p in list_checkpoints(ckpt_root):
            if s > to_step:
                shutil.rmtree(p, ignore_errors=True)
    ctx.barrier()
