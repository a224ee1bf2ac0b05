import os

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


def test_make_executor_rejects_unknown():
    assert isinstance(make_executor("ray", 2), RayExecutor)
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("spark", 2)
