"""The two ways a user or a scheduler asks a training run to stop, and the exit codes that say which.

    SIGINT  (Ctrl-C)                   finish the step, checkpoint, exit 130; a second SIGINT
                                       aborts at once without saving
    SIGTERM (preemption: spot          finish the step, checkpoint within train.preempt_grace_s,
             instances, Slurm, k8s)    exit PREEMPTED_EXIT; `--resume` continues bit for bit

Every rank of a torchrun job gets the signal from its agent, but not necessarily between the
same two steps: the trainer combines the ranks' requests with one all-reduce (MAX of the codes
below) at every step end, so all ranks stop at the same step and write one checkpoint together.
A preemption outranks a Ctrl-C (the machine is going away either way).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

NONE, INTERRUPT, PREEMPT = 0, 1, 2
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports after Ctrl-C
PREEMPTED_EXIT = 75  # sysexits' EX_TEMPFAIL: "temporary failure, run again" (a checkpoint holds the stop step)


class StopRequests:
    """Signal handlers that record a stop request for the training loop to act on at a step end."""

    def __init__(self) -> None:
        self.code = NONE
        self.preempted_at: float | None = None  # time.monotonic() of the first SIGTERM
        self._prev: dict[int, Any] = {}

    def install(self) -> None:
        """Take over SIGINT and SIGTERM (main thread only: Python delivers signals there)."""
        if threading.current_thread() is threading.main_thread():
            for sig, handler in ((signal.SIGINT, self._interrupt), (signal.SIGTERM, self._preempt)):
                self._prev[sig] = signal.signal(sig, handler)

    def uninstall(self) -> None:
        for sig, prev in self._prev.items():
            signal.signal(sig, prev)
        self._prev.clear()

    def _interrupt(self, signum: int, frame: Any) -> None:
        if self.code == INTERRUPT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt("second Ctrl-C: training aborted without saving")
        self.code = max(self.code, INTERRUPT)
        _say("\nCtrl-C: finishing the current step and saving a checkpoint (press Ctrl-C again to abort without saving)\n")

    def _preempt(self, signum: int, frame: Any) -> None:
        if self.preempted_at is None:  # schedulers may repeat SIGTERM: the first one starts the grace
            self.preempted_at = time.monotonic()
            _say("\nSIGTERM (preemption): finishing the current step and saving a checkpoint\n")
        self.code = PREEMPT

    def seconds_since_preempt(self) -> float | None:
        return None if self.preempted_at is None else time.monotonic() - self.preempted_at


def _say(msg: str) -> None:
    from tokenmill.train.launch_agent import first_in_job

    if first_in_job(msg):  # every rank of a `--nproc` job gets the signal: one of them says so
        sys.stderr.write(msg)
        sys.stderr.flush()


class TrainingInterrupted(KeyboardInterrupt):
    """Raised after a first Ctrl-C once the current step finished and a checkpoint was saved."""

    exit_code = INTERRUPTED_EXIT
    what = "interrupted"

    def __init__(self, step: int, checkpoint: Path):
        self.step = step
        self.checkpoint = checkpoint
        # How to continue depends on the caller (`train --resume`, or `run`/`demo` again): the CLI says it.
        super().__init__(f"{self.what} at step {step}; checkpoint saved to {checkpoint}")

    def __str__(self) -> str:
        return str(self.args[0])


class TrainingPreempted(TrainingInterrupted):
    """Raised after a SIGTERM (preemption) once every rank finished the step and the checkpoint is written."""

    exit_code = PREEMPTED_EXIT
    what = "preempted"


def stop_now(stop: int, step: int, checkpoint: Path, stops: StopRequests, grace_s: float, events: Any) -> None:
    """Act on the ranks' agreed stop code at the end of `step`, whose checkpoint is written: record
    why and raise TrainingPreempted or TrainingInterrupted; nothing when no stop was asked."""
    if stop == NONE:
        return
    if stop == PREEMPT:
        since = stops.seconds_since_preempt()
        events.write(
            "train",
            "preempted",
            step=step,
            checkpoint=str(checkpoint),
            grace_s=grace_s,
            seconds_since_signal=since,
            within_grace=None if since is None else since <= grace_s,
        )
        raise TrainingPreempted(step, checkpoint)
    events.write("train", "interrupted", step=step, checkpoint=str(checkpoint))
    raise TrainingInterrupted(step, checkpoint)
