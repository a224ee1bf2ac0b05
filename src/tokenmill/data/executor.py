"""Where curation tasks run: local worker processes, or Ray tasks on a cluster.

Both take a picklable top-level function and a list of task arguments and return the results
in task order, so the caller's output never depends on which worker ran what or when. Tasks
must be idempotent: a task whose work is already on disk returns at once (the resume contract).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Sequence

ProgressFn = Callable[[int, Any], None]


class LocalExecutor:
    """N 'spawn' worker processes, kept for the executor's lifetime (1: run in this process,
    which keeps tracebacks simple). With N > 1 every task runs in a worker, even a lone one, so
    the coordinating process never holds a task's data (a reduce over a whole partition)."""

    name = "local"

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
        pool = self._workers()
        futures = {pool.submit(fn, *args): i for i, args in enumerate(tasks)}
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            if on_done:
                on_done(i, results[i])
        return results


class RayExecutor:
    """Ray tasks: the cluster at RAY_ADDRESS when set, else a local Ray with `workers` CPUs."""

    name = "ray"

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))
        self._started_here = False

    def __enter__(self) -> "RayExecutor":
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - ray is a declared dependency
            raise RuntimeError("executor 'ray' needs the ray package: pip install 'ray>=2.9'") from exc
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS")
            kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False,
                                      "include_dashboard": False}
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=self.workers, **kwargs)
            self._started_here = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started_here:
            import ray

            ray.shutdown()

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple], on_done: ProgressFn | None = None) -> list[Any]:
        import ray

        remote = ray.remote(fn)
        refs = [remote.remote(*args) for args in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(tasks)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = index[ref]
                results[i] = ray.get(ref)
                if on_done:
                    on_done(i, results[i])
        return results


def make_executor(kind: str, workers: int) -> LocalExecutor | RayExecutor:
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(workers)
    raise ValueError(f"unknown executor {kind!r}: 'local' or 'ray'")
