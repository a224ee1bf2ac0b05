"""Where curation tasks run: local worker processes, or Ray tasks on a cluster.

Both take a picklable top-level function and a list of task arguments and return the results
in task order, so the caller's output never depends on which worker ran what or when. Tasks
must be idempotent: a task whose work is already on disk returns at once (the resume contract).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Sequence

ProgressFn = Callable[[int, Any], None]


class LocalExecutor:
    """N 'spawn' worker processes, kept for the executor's lifetime (1: run in this process,
    which keeps tracebacks simple). With N > 1 every task runs in a worker, even a lone one, so
    the coordinating process never holds a task's data (a reduce over a whole partition). A
    worker that dies takes the pool with it: a new pool reruns the unfinished tasks."""

    name = "local"
    MAX_RETRIES = 6  # runs of a task lost to a dead worker before the map fails (as RayExecutor)

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _workers(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # 'spawn': forking a process that runs rich's refresh thread (or holds Ray/torch
            # threads) is not safe.
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple], on_done: ProgressFn | None = None) -> list[Any]:
        results: list[Any] = [None] * len(tasks)
        if self.workers == 1:
            for i, args in enumerate(tasks):
                results[i] = fn(*args)
                if on_done:
                    on_done(i, results[i])
            return results
        pending = dict.fromkeys(range(len(tasks)), 0)  # task -> pools that broke while it ran
        while pending:
            pool = self._workers()
            futures = {pool.submit(fn, *tasks[i]): i for i in pending}
            order = deque(futures)  # submission order, which is the order the pool starts them in
            running: set[int] = set()
            try:
                finished = as_completed(futures)
                while True:
                    # Which tasks were running, seen just before each wait: only they can be the
                    # one whose worker died, so only they are charged a retry.
                    running = {futures[f] for f in _started(order)}
                    fut = next(finished, None)
                    if fut is None:
                        break
                    i = futures[fut]
                    results[i] = fut.result()
                    del pending[i]
                    if on_done:
                        on_done(i, results[i])
            except BrokenProcessPool:
                self._restart(pending, running)
        return results

    def _restart(self, pending: dict[int, int], running: set[int]) -> None:
        """A worker died (a per-document timer killed it, or the OOM killer did): the pool is
        lost with every task in flight. Start a new one and run the unfinished tasks again,
        which resume from their finished work, as Ray reruns a task whose worker died. A task
        is charged a retry only when it was seen running, so deaths in other shards do not fail it."""
        assert self._pool is not None
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None
        # None seen running (it started and died between two looks): charge every unfinished
        # task, so a task that always kills its worker still ends the map.
        for i in (running & pending.keys()) or set(pending):
            pending[i] += 1
            if pending[i] > self.MAX_RETRIES:
                raise BrokenProcessPool(
                    f"a worker process died {pending[i]} times while task {i} was running "
                    "(killed by the OOM killer, or crashing in native code)"
                )


def _started(order: deque[Future]) -> list[Future]:
    """The futures running now: the pool starts them in submission order, so they are the first
    ones not yet done. Done futures are dropped from the front, so each look costs about the
    number of workers, not the number of tasks (a scan of every future per completion would be
    quadratic in the shard count)."""
    while order and order[0].done():
        order.popleft()
    started = []
    for f in order:
        if f.running():
            started.append(f)
        elif not f.done():
            break
    return started


class RayExecutor:
    """Ray tasks: the cluster at RAY_ADDRESS when set, else a local Ray with `workers` CPUs.

    Built to outlive a lost node: a task whose worker or node dies is run again elsewhere
    (`max_retries`), which is safe because tasks are idempotent and skip finished work; tasks
    are spread over the nodes, never pinned to one. An argument that several tasks share (the
    job, the chunk offsets) is put into the object store once, not copied into every task. At
    most `max_in_flight` tasks are submitted at a time, so the driver's bookkeeping stays
    proportional to the cluster, not to the number of tasks.
    """

    name = "ray"
    # A dying node can take a task down more than once (killed, then its retry scheduled on the
    # same node before its death is noticed): allow a few more retries than Ray's default 3.
    MAX_RETRIES = 6
    # Application errors worth a retry: I/O on shared storage can fail transiently. Anything else
    # (a bug, a bad config) fails the same way again, so it surfaces at once.
    RETRY_EXCEPTIONS: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, workers: int, max_in_flight: int | None = None):
        self.workers = max(1, int(workers))
        self.max_in_flight = max_in_flight
        self._started_here = False

    def __enter__(self) -> "RayExecutor":
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - ray is a declared dependency
            raise RuntimeError("executor 'ray' needs the ray package: pip install 'ray>=2.9'") from exc
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS")
            kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False, "include_dashboard": False}
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=self.workers, **kwargs)
            self._started_here = True
        return self

    def __exit__(self, *exc: object) -> None:
        # On a cluster at RAY_ADDRESS this only disconnects this driver: the cluster keeps running.
        if self._started_here:
            import ray

            ray.shutdown()

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple], on_done: ProgressFn | None = None) -> list[Any]:
        import ray

        remote = ray.remote(fn).options(
            max_retries=self.MAX_RETRIES, retry_exceptions=list(self.RETRY_EXCEPTIONS), scheduling_strategy="SPREAD"
        )
        shared = _put_shared(tasks)
        # A few tasks queued per CPU hide the driver's round trip when tasks are short (10k
        # no-op tasks on 2 CPUs: 14 s with 2 per CPU, 10 s with 16); refs are tiny either way.
        window = self.max_in_flight or max(32, 4 * int(ray.cluster_resources().get("CPU", 1)))
        results: list[Any] = [None] * len(tasks)
        in_flight: dict[Any, int] = {}
        submitted = 0
        while submitted < len(tasks) or in_flight:
            while submitted < len(tasks) and len(in_flight) < window:
                args = [shared.get(id(a), a) for a in tasks[submitted]]
                in_flight[remote.remote(*args)] = submitted
                submitted += 1
            # Block for one result, then take every other one already there: each pass costs
            # O(window), and there are at most len(tasks) passes.
            ready, rest = ray.wait(list(in_flight), num_returns=1)
            if rest:
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                ready += more
            for ref, value in zip(ready, ray.get(ready)):
                i = in_flight.pop(ref)
                results[i] = value
                if on_done:
                    on_done(i, value)
        return results


# Below this pickled size a shared argument travels inside each task's spec: no object-store
# round trip, and no lookup of the object's owner (a driver whose owner lookups fail on a
# loaded two-node cluster of one machine has been seen to fail tasks with OwnerDiedError).
INLINE_BYTES = 100 * 1024


def _put_shared(tasks: Sequence[tuple]) -> dict[int, Any]:
    """Object refs, by id() of the argument, of the large arguments that more than one task
    passes."""
    import pickle

    import ray

    seen: dict[int, Any] = {}
    shared: dict[int, Any] = {}
    for args in tasks:
        for a in args:
            if isinstance(a, (bool, int, float, type(None))):
                continue  # a scalar costs less inline than an object-store round trip
            if id(a) in seen and id(a) not in shared:
                shared[id(a)] = ray.put(a) if len(pickle.dumps(a)) > INLINE_BYTES else a
            seen.setdefault(id(a), a)  # holding the object keeps its id() from being reused
    return shared


def make_executor(kind: str, workers: int) -> LocalExecutor | RayExecutor:
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(workers)
    raise ValueError(f"unknown executor {kind!r}: 'local' or 'ray'")
