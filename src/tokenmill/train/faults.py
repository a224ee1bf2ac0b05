"""Deliberate faults (train.faults) that prove the stability guard on a real run.

A guard that has never fired is a guard nobody trusts. These reproduce the three failures the guard
handles (docs/training.md) in a way that is a pure function of the step, so a faulted run is as exactly
resumable as a clean one:
- a corrupted batch: its tokens replaced by uniform random ids (a binary blob or an encoding
  accident in the data), which gives an outsized gradient;
- a non-finite loss (an overflow, a bad kernel);
- a learning-rate blow-up over a window of steps (a bad schedule or a restart with the wrong LR),
  which damages the weights so the loss does not come back by itself.

The `step` these functions take is the run's attempt number (train/guard.py `attempt`): the
optimizer step, plus the steps a rewinding rollback took back. A fault happens once, at a point
of the run's history, as a real one does; a rewound run does not meet it again at the same step.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import torch

from tokenmill.train.config import FaultConfig


def any_faults(cfg: FaultConfig) -> bool:
    return bool(cfg.nan_steps or cfg.corrupt_steps or cfg.lr_blowup)


def corrupt_batch(batch, step: int, micro: int, cfg: FaultConfig, vocab_size: int, seed: int):
    """The batch with its tokens replaced by random ids when `step` is a corrupt step, else itself.
    Masks and positions are kept: only the content is garbage, as with real corrupted data."""
    if step not in cfg.corrupt_steps:
        return batch
    gen = torch.Generator().manual_seed((seed * 1_000_003 + step) * 997 + micro)
    tokens = torch.randint(0, vocab_size, tuple(batch.tokens.shape), generator=gen, dtype=batch.tokens.dtype)
    return dataclasses.replace(batch, tokens=tokens.to(batch.tokens.device))


def poison_loss(loss: torch.Tensor, step: int, cfg: FaultConfig) -> torch.Tensor:
    """loss · NaN on a NaN step (so the gradients are NaN too), else the loss unchanged."""
    return loss * float("nan") if step in cfg.nan_steps else loss


def lr_factor(step: int, cfg: FaultConfig) -> float:
    """lr_blowup_factor inside the [first, last] lr_blowup window, else 1."""
    if cfg.lr_blowup and cfg.lr_blowup[0] <= step <= cfg.lr_blowup[-1]:
        return cfg.lr_blowup_factor
    return 1.0


# --------------------------------------------------------------------------- process faults
# A lost node and a stuck rank, for the tests of the restart path with real processes. Each fires
# once per run: the marker is created before the fault, so the restarted job goes past the step.
def _first_time(run_path: Path, kind: str, step: int, rank: int) -> bool:
    marker = Path(run_path) / "faults" / f"{kind}-step{step}-rank{rank}"
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def process_fault(step: int, rank: int, cfg: FaultConfig, run_path: Path) -> None:
    """At the start of `step` on `rank`: SIGKILL this process (faults.kill), or never return
    (faults.hang: the watchdog ends it), once per run."""
    if cfg.kill and (cfg.kill[0], cfg.kill[1]) == (step, rank) and _first_time(run_path, "kill", step, rank):
        os.kill(os.getpid(), signal.SIGKILL)
    if cfg.hang and (cfg.hang[0], cfg.hang[1]) == (step, rank) and _first_time(run_path, "hang", step, rank):
        while True:  # like a read or a collective that never returns (the GIL is released)
            time.sleep(60)


def slow_read(rank: int, cfg: FaultConfig) -> None:
    """faults.slow [rank, seconds]: this rank's batch read takes that much longer."""
    if cfg.slow and int(cfg.slow[0]) == rank:
        time.sleep(float(cfg.slow[1]))


# --------------------------------------------------------------------------- early-warning faults
def _in_window(step: int, window: list[int] | None) -> bool:
    return window is not None and len(window) > 0 and window[0] <= step <= window[-1]


def poison_rows(batch, row_buckets: list[str], step: int, micro: int, cfg: FaultConfig, vocab_size: int, seed: int):
    """The batch with the rows of faults.poison_bucket replaced by random ids inside poison_steps
    (masks and positions kept), else itself: one bucket's data turned to garbage, the others not."""
    if cfg.poison_bucket is None or not _in_window(step, cfg.poison_steps):
        return batch
    rows = torch.tensor([b == cfg.poison_bucket for b in row_buckets], dtype=torch.bool)
    if not bool(rows.any()):
        return batch
    gen = torch.Generator().manual_seed((seed * 1_000_003 + step) * 991 + micro)
    noise = torch.randint(0, vocab_size, tuple(batch.tokens.shape), generator=gen, dtype=batch.tokens.dtype)
    tokens = torch.where(rows.view(-1, 1).to(batch.tokens.device), noise.to(batch.tokens.device), batch.tokens)
    return dataclasses.replace(batch, tokens=tokens)


def collapsing_embedding(step: int, cfg: FaultConfig) -> bool:
    return _in_window(step, cfg.collapse_embedding)


@torch.no_grad()
def collapse_embedding(weight: torch.Tensor, rate: float) -> None:
    """Pull every row of the embedding toward the mean row: w <- mean + rate · (w - mean)."""
    if hasattr(weight, "full_tensor"):
        raise ValueError("train.faults.collapse_embedding needs the whole embedding on each rank (one process or DDP)")
    mean = weight.mean(dim=0, keepdim=True)
    weight.sub_(mean).mul_(rate).add_(mean)


class EmbeddingCollapseFault:
    """The collapse_embedding fault around one optimizer step: inside the window no gradient
    reaches the table (AdamW skips it) and its rows are then pulled toward their mean."""

    def __init__(self, weight: torch.Tensor | None, cfg: FaultConfig):
        self.weight, self.cfg = weight, cfg

    def before_update(self, step: int) -> bool:
        """Cut the table's gradient when `step` (the attempt) is inside the window; True if so."""
        if self.weight is None or not collapsing_embedding(step, self.cfg):
            return False
        self.weight.grad = None
        return True

    def after_update(self, collapsing: bool) -> None:
        if collapsing and self.weight is not None:
            collapse_embedding(self.weight, self.cfg.collapse_rate)
