"""The trainer's errors, in a module of their own so the loop's collaborators (rollback.py,
verdicts.py) can raise them without importing trainer.py (which imports them)."""

from __future__ import annotations

from tokenmill.errors import UserError

STAGE = "train"  # the stage name every training event is written under


class TrainError(UserError, RuntimeError):
    """Training cannot start or continue; the message says why and what to do."""


class TrainingDiverged(TrainError):
    """The loss or gradient norm became NaN/inf."""
