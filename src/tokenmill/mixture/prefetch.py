"""Background preparation of the next micro-batches: one thread, a bounded queue.

The thread computes batches for a known sequence of keys ((step, micro) in training order) with
the same pure function the caller would use, so a batch taken from the queue is identical to one
computed on demand. `take(key)` returns the prepared batch when the caller follows the sequence,
skips ahead when the caller skipped keys, and returns None when the caller went back (the caller
then computes the batch itself and restarts prefetching after it). One thread is enough: the
work is memmap copies and small numpy ops, which release the GIL for the copies and overlap the
trainer's forward/backward, itself outside the GIL.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_END = object()


class Prefetcher(Generic[K, V]):
    """Runs `produce(key)` for `keys` in order on a daemon thread, at most `depth` results ahead."""

    def __init__(self, produce: Callable[[K], V], keys: Iterator[K], depth: int, order: Callable[[K], tuple]):
        self._produce = produce
        self._order = order
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(keys,), name="tokenmill-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: tuple) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, keys: Iterator[K]) -> None:
        for key in keys:
            if self._stop.is_set():
                return
            try:
                value = self._produce(key)
            except BaseException as exc:  # handed to the consumer, which re-raises it
                self._put((key, exc))
                return
            if not self._put((key, value)):
                return
        self._put((_END, None))

    def take(self, key: K) -> V | None:
        """The prepared value of `key`, or None when the thread has passed it or stopped."""
        while True:
            if self._stop.is_set():
                return None
            got, value = self._queue.get()
            if got is _END:
                self._stop.set()
                return None
            if isinstance(value, BaseException):
                self.close()
                raise value
            if got == key:
                return value
            if self._order(got) > self._order(key):  # the caller went back: not ours to serve
                self.close()
                return None
            # got < key: the caller skipped this one; drop it and keep looking

    def close(self) -> None:
        self._stop.set()
        while True:  # free a producer blocked on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
