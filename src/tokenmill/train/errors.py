"""The trainer's errors, in a module of their own so the loop's collaborators (rollback.py,
verdicts.py) can raise them without importing trainer.py (which imports them)."""

from __future__ import annotations

from pathlib import Path

from tokenmill.errors import UserError

STAGE = "train"  # the stage name every training event is written under


class TrainError(UserError, RuntimeError):
    """Training cannot start or continue; the message says why and what to do."""


def already_trained(ckpt_root: Path, newest: int) -> str:
    """The refusal of `tokenmill train` without --resume on a run that has checkpoints."""
    return (
        f"{ckpt_root} already holds checkpoints (newest: step_{newest}); `tokenmill train CONFIG --resume` "
        f"continues this run, or `tokenmill run CONFIG --force train`, which moves them aside (never deletes them), to start over"
    )


class TrainingDiverged(TrainError):
    """The loss or gradient norm became NaN/inf."""
