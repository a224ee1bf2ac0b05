"""`tokenmill train --restarts N`: run the trainer as a child process and restart it from the
latest valid checkpoint after a crash (fault tolerance: docs/parallelism.md).

What counts as a crash, from the child's return code:
  < 0                 killed by a signal (SIGKILL from the OOM killer or a scheduler, SIGSEGV...)
  CRASH_EXIT (3)      `tokenmill train` caught an unexpected exception (a bug, out of memory, a
                      device or NCCL failure) and printed its traceback
  HANG_EXIT (4)       the watchdog found no step finished for train.hang_timeout_s (stacks
                      in <run>/hangs/)
  any other non-zero  not from tokenmill's CLI (e.g. the interpreter itself failed)
What does not, and is returned as it is (running again would fail the same way, or the user or
the scheduler asked to stop): 0, 1 (a user error: bad data, refused resume, divergence), 2 (a
config error), 75 (preempted by SIGTERM, checkpoint saved), 130 (Ctrl-C). See `cli._guard`.

Every restart writes a `restart` event (attempt, exit code or signal, the checkpoint it resumes
from) to the run's events.jsonl; the child appends its own events to the same file (one
O_APPEND write per line, so lines never interleave).

The child runs in its own process group, so a Ctrl-C in the terminal reaches the supervisor only,
which forwards exactly one SIGINT (the trainer's first Ctrl-C: finish the step, checkpoint, exit
130) and then does not restart; a SIGTERM (preemption) is forwarded the same way (checkpoint,
exit 75). On Linux the child also gets SIGKILL if the supervisor dies, so
no orphaned trainer keeps writing into the run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from tokenmill.runs import EventLog
from tokenmill.train.stop_signals import INTERRUPTED_EXIT, PREEMPTED_EXIT

STAGE = "train"
CRASH_EXIT = 3
USER_EXIT_CODES = frozenset({1, 2, PREEMPTED_EXIT, INTERRUPTED_EXIT})

Watch = Callable[["subprocess.Popen[bytes]", int], None]


def is_crash(returncode: int) -> bool:
    """True when the child died abnormally and a restart from its last checkpoint makes sense."""
    return returncode < 0 or (returncode != 0 and returncode not in USER_EXIT_CODES)


def describe_exit(returncode: int) -> dict[str, Any]:
    """{"exit_code": n} or {"signal": "SIGKILL"} (the event fields of a child's end)."""
    if returncode < 0:
        try:
            return {"exit_code": None, "signal": signal.Signals(-returncode).name}
        except ValueError:
            return {"exit_code": None, "signal": f"signal {-returncode}"}
    return {"exit_code": returncode, "signal": None}


def shell_exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it (killed by signal k: 128 + k)."""
    return 128 - returncode if returncode < 0 else returncode


def train_command(config: Path, overrides: list[str], run_dir: Path) -> list[str]:
    """`python -m tokenmill train CONFIG --run-dir RUN [--set ...]` (without --resume)."""
    cmd = [sys.executable, "-m", "tokenmill", "train", str(config), "--run-dir", str(Path(run_dir).resolve())]
    for o in overrides:
        cmd += ["--set", o]
    return cmd


def _child_setup(parent: int, death_signal: int = signal.SIGKILL) -> Callable[[], None]:
    """The preexec function of a supervised child: its own process group in the supervisor's session
    (what Popen's process_group=0 does, a Python 3.11+ argument: requires-python is 3.10), so a
    terminal's Ctrl-C reaches the supervisor only; and on Linux, `death_signal` when the supervisor dies."""
    linux = sys.platform.startswith("linux")

    def preexec() -> None:
        os.setpgid(0, 0)  # before prctl, as Popen orders process_group before preexec_fn
        if not linux:
            return
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(death_signal))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(1)

    return preexec


@dataclass
class Supervised:
    """How a supervised run ended: the last child's return code, restarts used, and whether the
    supervisor was asked to stop (Ctrl-C / SIGTERM)."""

    returncode: int
    restarts: int
    interrupted: bool


class _Forwarder:
    """SIGINT/SIGTERM handlers that pass the signal on to the current child (main thread only)."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self._prev: dict[int, Any] = {}

    def __enter__(self) -> "_Forwarder":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._prev[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, prev in self._prev.items():
            signal.signal(sig, prev)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def supervise(
    command: list[str],
    run_path: Path,
    restarts: int,
    resume: bool = False,
    *,
    watch: Watch | None = None,
    poll_s: float = 0.05,
    stdout: IO[Any] | None = None,
    stderr: IO[Any] | int | None = None,  # int: subprocess.STDOUT
    log: Callable[[str], None] | None = None,
    death_signal: int = signal.SIGKILL,
) -> Supervised:
    """Run `command` (a `tokenmill train` command line without --resume) until it succeeds, stops
    for a reason a restart cannot fix, or has been restarted `restarts` times after crashes.

    The first attempt resumes only when `resume` is true (so a user who did not ask for it still
    gets the "already holds checkpoints" refusal); every restart passes --resume. `watch(proc,
    attempt)` is called every `poll_s` seconds while a child runs (verify-resume kills children
    from it). `death_signal` is what the child gets if the supervisor itself dies (SIGKILL: no
    orphaned trainer; torchrun gets SIGTERM instead, so it stops its ranks, which checkpoint)."""
    from tokenmill.train.checkpoint import latest_checkpoint

    events = EventLog(Path(run_path) / "events.jsonl")
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    attempt = 0
    with _Forwarder() as fwd:
        while True:
            if fwd.received is not None:  # asked to stop between two attempts
                return Supervised(-fwd.received, attempt, True)
            cmd = command + (["--resume"] if resume or attempt > 0 else [])
            proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, preexec_fn=_child_setup(os.getpid(), death_signal))
            fwd.child = proc
            events.write(STAGE, "child_started", attempt=attempt, pid=proc.pid, resume="--resume" in cmd)
            while proc.poll() is None:
                if watch is not None:
                    watch(proc, attempt)
                time.sleep(poll_s)
            rc = proc.returncode
            fwd.child = None
            if rc == 0 or fwd.received is not None or not is_crash(rc):
                return Supervised(rc, attempt, fwd.received is not None)
            ended = describe_exit(rc)
            if attempt >= restarts:
                events.write(STAGE, "restarts_exhausted", attempts=attempt, restarts=restarts, **ended)
                say(f"trainer {_what(ended)}; no restarts left ({restarts} used)")
                return Supervised(rc, attempt, False)
            attempt += 1
            ckpt = latest_checkpoint(Path(run_path) / "checkpoints", events)
            step = int(ckpt.name.rsplit("_", 1)[1]) if ckpt is not None else 0
            events.write(
                STAGE,
                "restart",
                attempt=attempt,
                restarts=restarts,
                **ended,
                resume_from=str(ckpt) if ckpt is not None else None,
                resume_step=step,
            )
            say(
                f"trainer {_what(ended)}; restart {attempt}/{restarts} from "
                f"{ckpt if ckpt is not None else 'the start (no checkpoint yet)'}"
            )


def _what(ended: dict[str, Any]) -> str:
    return f"killed by {ended['signal']}" if ended["signal"] else f"crashed (exit code {ended['exit_code']})"
