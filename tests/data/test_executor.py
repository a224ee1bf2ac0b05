import os
import time
import signal
from pathlib import Path

import numpy as np
import pytest

from tokenmill.data.executor import LocalExecutor, RayExecutor, make_executor


def _square_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_local_results_in_task_order_across_processes():
    done = []
    with LocalExecutor(2) as ex:
        out = ex.map(_square_pid, [(i,) for i in range(8)], on_done=lambda i, r: done.append(i))
    assert [r[0] for r in out] == [i * i for i in range(8)]
    assert sorted(done) == list(range(8))
    assert {pid for _, pid in out} != {os.getpid()}  # really other processes


def test_single_worker_runs_in_process():
    with LocalExecutor(1) as ex:
        out = ex.map(_square_pid, [(3,)])
    assert out == [(9, os.getpid())]


def _dies(marks: Path, i: int, times: int) -> int:
    """Task 3's first `times` attempts SIGKILL their worker (a per-document hard timer, the OOM killer)."""
    if i == 3 and _attempt(marks, i) <= times:
        os.kill(os.getpid(), signal.SIGKILL)
    return i * i


def test_local_pool_reruns_the_tasks_of_a_dead_worker(tmp_path):
    with LocalExecutor(2) as ex:
        out = ex.map(_dies, [(tmp_path, i, 1) for i in range(6)])
    assert out == [i * i for i in range(6)]
    assert (tmp_path / "3.attempts").stat().st_size == 2


def test_local_pool_gives_up_on_a_task_that_always_kills_its_worker(tmp_path, monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    monkeypatch.setattr(LocalExecutor, "MAX_RETRIES", 1)
    with LocalExecutor(2) as ex, pytest.raises(BrokenProcessPool, match="died 2 times while task"):
        ex.map(_dies, [(tmp_path, i, 99) for i in range(6)])


def _each_dies_once(marks: Path, i: int) -> int:
    """Every task's first attempt SIGKILLs its worker after a moment's work (as a per-document
    timer does), the second returns at once: many deaths, each in another task."""
    if _attempt(marks, i) == 1:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    return i + 1


@pytest.mark.slow
def test_deaths_in_other_tasks_do_not_use_up_a_tasks_retries(tmp_path, monkeypatch):
    """14 tasks, each killing its worker once: about seven broken pools, more than MAX_RETRIES (4
    here). The map still finishes, since a death is charged only to the few tasks the pool had
    started or queued to its workers; charging every unfinished task for every death fails it."""
    monkeypatch.setattr(LocalExecutor, "MAX_RETRIES", 4)
    with LocalExecutor(2) as ex:
        out = ex.map(_each_dies_once, [(tmp_path, i) for i in range(14)])
    assert out == [i + 1 for i in range(14)]
    assert all((tmp_path / f"{i}.attempts").stat().st_size == 2 for i in range(14))


def test_make_executor_rejects_unknown():
    assert isinstance(make_executor("ray", 2), RayExecutor)
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("spark", 2)


# --------------------------------------------------------------------------- Ray (local, no RAY_ADDRESS)
def _attempt(marks: Path, i: int) -> int:
    """Record one attempt of task i; how many attempts there were, this one included."""
    with open(marks / f"{i}.attempts", "a") as fh:
        fh.write("x")
    return (marks / f"{i}.attempts").stat().st_size


def _dies_once(marks: Path, i: int, shared: np.ndarray) -> tuple[int, int]:
    """Task 5's first attempt SIGKILLs its own worker process, as a crash or a lost node would."""
    if i == 5 and _attempt(marks, i) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return i * i, int(shared.sum())


def _fails(marks: Path, i: int, error: str) -> int:
    if _attempt(marks, i) == 1 or error == "ValueError":
        raise {"OSError": OSError, "ValueError": ValueError}[error](f"attempt of task {i}")
    return i


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for this module's tests, started (and stopped) by the executor itself."""
    ray = pytest.importorskip("ray")
    mp = pytest.MonkeyPatch()
    mp.delenv("RAY_ADDRESS", raising=False)
    with RayExecutor(2) as ex:
        assert ex._started_here
        yield ex
    mp.undo()
    assert not ray.is_initialized()


@pytest.mark.slow
def test_ray_reruns_a_killed_worker_task_in_task_order_with_a_bounded_window(local_ray, tmp_path, monkeypatch):
    import ray

    puts, waits = [], []
    real_put, real_wait = ray.put, ray.wait
    monkeypatch.setattr(ray, "put", lambda v, **k: (puts.append(type(v)), real_put(v, **k))[1])
    monkeypatch.setattr(ray, "wait", lambda refs, **k: (waits.append(len(refs)), real_wait(refs, **k))[1])
    shared = np.arange(1 << 18, dtype=np.int64)  # 2 MiB: Ray would copy it into the store per task
    ex = RayExecutor(2, max_in_flight=3)
    done = []
    out = ex.map(_dies_once, [(tmp_path, i, shared) for i in range(12)], on_done=lambda i, r: done.append(i))
    assert out == [(i * i, int(shared.sum())) for i in range(12)]
    assert sorted(done) == list(range(12))
    assert (tmp_path / "5.attempts").read_text() == "xx"  # killed once, run again
    assert puts == [np.ndarray]  # the large shared argument once, not once per task; a path travels inline
    assert max(waits) <= 3


def test_ray_retries_io_errors_but_not_bugs(local_ray, tmp_path):
    assert local_ray.map(_fails, [(tmp_path, i, "OSError") for i in range(3)]) == [0, 1, 2]
    assert all((tmp_path / f"{i}.attempts").read_text() == "xx" for i in range(3))
    with pytest.raises(ValueError, match="attempt of task 7"):
        local_ray.map(_fails, [(tmp_path, 7, "ValueError")])
    assert (tmp_path / "7.attempts").read_text() == "x"  # a bug fails at once
