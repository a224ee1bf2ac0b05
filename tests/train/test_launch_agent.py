"""`tokenmill train --nproc K` when ranks refuse to start: the user reads the ranks' tokenmill
error once, then one line naming the ranks and their exit code, and the shell gets that code;
torchrun's ChildFailedError traceback and its per-rank log lines are not shown."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tokenmill.train.launch_agent import LAUNCH_DIR_ENV, failure_line, first_in_job, read_failures, shell_code

from tests.train.dist_helpers import REPO, copy_run, env


def test_a_failure_is_one_line_per_exit_code():
    assert failure_line({1: 1, 0: 1}) == "rank 0 and rank 1 exited with code 1 (a user error)"
    assert failure_line({0: 2}) == "rank 0 exited with code 2 (a config error)"
    assert failure_line({0: 3, 1: -9, 2: 3, 3: 7}) == (
        "rank 0 and rank 2 exited with code 3 (a crash); rank 1 was killed by SIGKILL; rank 3 exited with code 7"
    )
    assert failure_line({0: 4, 1: 4, 2: 4}) == "rank 0, rank 1 and rank 2 exited with code 4 (a hung rank)"
    assert failure_line({0: 1, 1: -15}) == "rank 0 exited with code 1 (a user error); torchrun then stopped rank 1"
    assert failure_line({0: -15, 1: -15}) == "rank 0 and rank 1 were killed by SIGTERM"  # nobody failed first
    assert [shell_code(c) for c in (1, -9, -15)] == [1, 137, 143]


def test_ranks_of_one_launch_say_a_line_once_and_a_lone_process_always(tmp_path, monkeypatch):
    assert first_in_job("error: x") and first_in_job("error: x")  # not a rank of a launch
    monkeypatch.setenv(LAUNCH_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert first_in_job("error: x") and not first_in_job("error: x") and first_in_job("error: y")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # the group torchrun restarted says it again, once
    assert first_in_job("error: x") and not first_in_job("error: x")
    monkeypatch.setenv(LAUNCH_DIR_ENV, str(tmp_path / "gone"))  # the folder was removed: say it
    assert first_in_job("error: x")
    assert read_failures(tmp_path) == {}  # no failures.json: the agent ended some other way


def test_two_ranks_refusing_existing_checkpoints_say_it_once_with_the_exit_code(single, tmp_path):
    run = copy_run(single, tmp_path / "run")
    before = sorted(p.name for p in (run.path / "checkpoints").iterdir())
    out = subprocess.run(
        [sys.executable, "-m", "tokenmill", "train", str(run.path / "config.yaml"), "--run-dir", str(run.path),
         "--nproc", "2"],
        env={**env(), "COLUMNS": "80"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240,
        cwd=REPO,
    )
    assert out.returncode == 1, out.stdout[-6000:]  # the ranks' code (a user error), not torchrun's
    lines = out.stdout.splitlines()
    refusals = [line for line in lines if line.startswith("error: ") and "already holds checkpoints" in line]
    assert len(refusals) == 1, out.stdout
    # both ranks refuse; torchrun may stop the slower one first (SIGTERM), which the line then says
    stopped = [line for line in lines if line.startswith("training stopped: ")]
    assert stopped in (["training stopped: rank 0 and rank 1 exited with code 1 (a user error)"],
                       ["training stopped: rank 0 exited with code 1 (a user error); torchrun then stopped rank 1"],
                       ["training stopped: rank 1 exited with code 1 (a user error); torchrun then stopped rank 0"]), out.stdout
    for noise in ("Traceback", "ChildFailedError", "failed (exitcode", "closing signal", "=" * 20):
        assert noise not in out.stdout, out.stdout
    assert sorted(p.name for p in (run.path / "checkpoints").iterdir()) == before  # nothing touched
