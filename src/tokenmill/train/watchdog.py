"""A watchdog that ends a hung training job in minutes, with every rank's Python stack on disk.

A rank whose collective never returns (a NIC or NCCL fault), or whose data read never comes back
(a stuck filesystem), blocks every other rank in its next collective, and the job waits for the
collective timeout (tens of minutes), then dies with a timeout error that says nothing about
where the stuck rank was (NCCL hangs: a watchdog that reschedules).

Each rank runs one daemon thread. The training loop calls `beat(step)` at every step end; when
no beat came for `timeout_s` (the first step, which may compile, is not watched), the thread:
  1. sets a key in the job's rendezvous store (torchrun's TCPStore), so every other rank's
     watchdog, polling that key, learns of the hang within `poll_s`;
  2. writes this process's Python stacks (faulthandler, every thread) to
     <run>/hangs/attempt<k>-rank<r>.txt, and a `hang` event (each rank its own line);
  3. after `settle_s` (time for the others to dump theirs), exits with HANG_EXIT, which torchrun
     (--max-restarts) and `tokenmill train --restarts` treat as a crash: the group restarts and
     resumes from the last checkpoint.
Evaluation and checkpoint writes pause the watch (`paused()`): rank 0 evaluates while the others
wait in a barrier, legitimately longer than a step.

A thread needs the GIL; a main thread stuck in C code that holds it would silence the watchdog,
so faulthandler's C-level timer is armed as a backstop at 2 × timeout_s (it dumps to stderr and
exits without the GIL). Blocking collectives, sleeps and file reads release the GIL, so the thread is
what normally fires.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

HANG_EXIT = 4
STEP_FACTOR = 10  # a step is hung only past this many times the longest step finished so far
STORE_KEY = "tokenmill/hang"


def restart_attempt() -> int:
    """Which (re)start of the torchrun group this process belongs to (0: the first)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def job_store() -> Any:
    """The torchrun job's key-value store (shared by every rank on every node), or None."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        pass
    return None


def _stderr_with_fd() -> Any:
    """stderr as faulthandler needs it (a real file descriptor), or None when it is captured."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return None


class Watchdog:
    def __init__(
        self,
        timeout_s: float,
        hang_dir: Path,
        rank: int,
        on_hang: Callable[[dict[str, Any]], object] | None = None,  # its result is not used
        store: Any = None,
        poll_s: float | None = None,
        settle_s: float | None = None,
        exit_fn: Callable[[int], None] = os._exit,
        backstop: bool = True,
    ):
        self.timeout_s = float(timeout_s)
        self.poll_s = poll_s if poll_s is not None else min(5.0, max(0.05, self.timeout_s / 20))
        self.settle_s = settle_s if settle_s is not None else 4 * self.poll_s
        self.hang_dir = Path(hang_dir)
        self.rank = rank
        self.on_hang = on_hang
        self.store = store
        self.key = f"{STORE_KEY}/{restart_attempt()}"  # a restarted group must not see the old hang
        self.exit_fn = exit_fn
        self.backstop = backstop  # faulthandler's GIL-free timer (it exits the process itself: off in tests)
        self.step: int | None = None
        self.last_beat: float | None = None  # None: not watching (before the first step ends, or paused)
        # timeout_s, or STEP_FACTOR × the longest watched step when larger: a run whose steps take
        # minutes (a big model on a CPU) is slow, not hung
        self.allowance = self.timeout_s
        self.fired: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tokenmill-watchdog", daemon=True)

    # ------------------------------------------------------------------ the training loop's side
    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def beat(self, step: int) -> None:
        """Step `step` finished: the clock restarts (and the C backstop is re-armed)."""
        now = time.monotonic()
        with self._lock:
            if self.last_beat is not None:
                self.allowance = max(self.allowance, STEP_FACTOR * (now - self.last_beat))
            self.step, self.last_beat = step, now
        stream = _stderr_with_fd() if self.backstop else None
        if stream is not None:  # to stderr: torchrun's log
            faulthandler.dump_traceback_later(2 * self.allowance, exit=True, file=stream)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Not watched inside (an evaluation, a checkpoint write); the clock restarts after."""
        with self._lock:
            was, self.last_beat = self.last_beat, None
        faulthandler.cancel_dump_traceback_later()
        try:
            yield
        finally:
            if was is not None and self.step is not None:
                self.beat(self.step)

    def stop(self) -> None:
        self._stop.set()
        faulthandler.cancel_dump_traceback_later()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self.poll_s + 1)

    # ------------------------------------------------------------------ the thread's side
    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                since = None if self.last_beat is None else time.monotonic() - self.last_beat
                step = self.step
            if since is not None and since > self.allowance:
                self._fire({"rank": self.rank, "step": step, "seconds": round(since, 1), "detected_by": "self"})
                return
            other = self._peer_hang()
            if other is not None:
                self._fire({"rank": self.rank, "step": step, "detected_by": "peer", "peer": other})
                return

    def _peer_hang(self) -> dict[str, Any] | None:
        if self.store is None:
            return None
        try:
            if not self.store.check([self.key]):
                return None
            return json.loads(self.store.get(self.key).decode())
        except Exception:  # the store went away (the agent is tearing the group down): nothing to learn
            return None

    def _fire(self, info: dict[str, Any]) -> None:
        """Tell the other ranks, dump this process's stacks, record it, give them time, exit."""
        if self.store is not None and info["detected_by"] == "self":
            with contextlib.suppress(Exception):
                self.store.set(self.key, json.dumps(info))
        self.hang_dir.mkdir(parents=True, exist_ok=True)
        path = self.hang_dir / f"attempt{restart_attempt()}-rank{self.rank}.txt"
        with open(path, "w") as fh:
            fh.write(
                f"tokenmill watchdog: {json.dumps(info)}\n"
                f"no step finished for {self.allowance:g}s (train.hang_timeout_s, or {STEP_FACTOR}× the longest step); Python stacks of "
                f"every thread of rank {self.rank} (pid {os.getpid()}):\n\n"
            )
            fh.flush()
            faulthandler.dump_traceback(file=fh, all_threads=True)
        self.fired = {**info, "stacks": str(path), "attempt": restart_attempt(), "timeout_s": self.allowance}
        if self.on_hang is not None:
            with contextlib.suppress(Exception):
                self.on_hang(self.fired)
        faulthandler.cancel_dump_traceback_later()
        time.sleep(self.settle_s)
        self.exit_fn(HANG_EXIT)
