"""SIGINT and SIGTERM as stop requests: a preemption is recorded with its time, outranks a Ctrl-C,
and a second Ctrl-C aborts. The real-process tests (a SIGTERM to one trainer and to a 2-rank
torchrun job) are the two slow tests at the end of this file."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tokenmill.train.stop_signals import INTERRUPT, NONE, PREEMPT, StopRequests


def _deliver(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.01)  # Python runs the handler at the next bytecode boundary of the main thread


def test_sigterm_requests_a_preemption_and_outranks_ctrl_c():
    stops = StopRequests()
    before = signal.getsignal(signal.SIGTERM)
    stops.install()
    try:
        assert stops.code == NONE and stops.seconds_since_preempt() is None
        _deliver(signal.SIGTERM)
        assert stops.code == PREEMPT and 0 <= stops.seconds_since_preempt() < 5
        first = stops.preempted_at
        _deliver(signal.SIGTERM)  # schedulers repeat it: the grace counts from the first
        _deliver(signal.SIGINT)
        assert stops.code == PREEMPT and stops.preempted_at == first
    finally:
        stops.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_ctrl_c_aborts():
    stops = StopRequests()
    stops.install()
    try:
        _deliver(signal.SIGINT)
        assert stops.code == INTERRUPT
        with pytest.raises(KeyboardInterrupt, match="second Ctrl-C"):
            _deliver(signal.SIGINT)
    finally:
        stops.uninstall()
        signal.signal(signal.SIGINT, signal.default_int_handler)


# --------------------------------------------------------------------------- real processes
def _cli_train(run, *args: str):
    import subprocess
    import sys

    from tests.train.dist_helpers import REPO, env

    return subprocess.Popen([sys.executable, "-m", "tokenmill", "train", str(run.path / "config.yaml"), "--run-dir",
                             str(run.path), *args], env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO)


def _preempt_when(run, proc, step: int) -> tuple[int, str]:
    from tests.train.dist_helpers import events, finish, wait_for

    wait_for(lambda: any(e["step"] >= step for e in events(run, "train_step")), proc)
    proc.send_signal(signal.SIGTERM)
    return finish(proc)


@pytest.mark.slow
def test_sigterm_checkpoints_the_current_step_exits_75_and_resumes_bit_for_bit(tiny_run, tmp_path):
    """One trainer: SIGTERM mid-run finishes the step, saves it, exits PREEMPTED_EXIT; the resumed
    run gives the uninterrupted run's losses at every step."""
    import shutil

    from tokenmill.runs import RunDir
    from tokenmill.train.checkpoint import verify_checkpoint
    from tokenmill.train.stop_signals import PREEMPTED_EXIT
    from tokenmill.train.trainer import run_train

    from tests.train.dist_helpers import events, reconfigure, series

    run = reconfigure(tiny_run, faults={"slow": [0, 0.02]})  # slower reads, the same numbers
    reference = RunDir(config=run.config, path=shutil.copytree(run.path, tmp_path / "reference"))
    code, out = _preempt_when(run, _cli_train(run), 5)
    assert code == PREEMPTED_EXIT, out[-3000:]
    (stop,) = events(run, "preempted")
    assert 5 <= stop["step"] < 30 and stop["within_grace"] and stop["grace_s"] == 30.0
    assert max(series(run)) == stop["step"] and stop["checkpoint"].endswith(f"step_{stop['step']}")
    assert verify_checkpoint(run.path / "checkpoints" / f"step_{stop['step']}")["step"] == stop["step"]
    assert "preempted at step" in out and "SIGTERM (preemption)" in out
    run_train(run, resume=True, progress=False)
    run_train(reference, progress=False)
    assert events(run, "resumed")[0]["step"] == stop["step"]
    assert series(run) == series(reference)


@pytest.mark.slow
def test_sigterm_to_a_2_rank_job_stops_both_ranks_at_one_step_with_one_checkpoint(single, tmp_path):
    """`tokenmill train --nproc 2` gets SIGTERM: torchrun passes it to the ranks, which agree on the
    step, save it together and exit 75; resumed by one process, the losses are the one-process run's."""
    from tokenmill.train.checkpoint import verify_checkpoint
    from tokenmill.train.stop_signals import PREEMPTED_EXIT
    from tokenmill.train.trainer import run_train

    from tests.train.dist_helpers import events, make_run, series

    run = make_run(tmp_path / "run", distributed="ddp", faults={"slow": [1, 0.1]}, preempt_grace_s=20)
    code, out = _preempt_when(run, _cli_train(run, "--nproc", "2"), 3)
    assert code == PREEMPTED_EXIT, out[-6000:]
    assert "Traceback" not in out and "death signal" not in out, out[-6000:]  # torchrun's agent says nothing
    assert out.count("SIGTERM (preemption)") == 1 and out.count("continues from it") == 1  # one rank says it
    (stop,) = events(run, "preempted")
    assert max(series(run)) == stop["step"] < 12 and stop["within_grace"]
    assert verify_checkpoint(run.path / "checkpoints" / f"step_{stop['step']}")["step"] == stop["step"]
    run_train(run, resume=True, progress=False)
    assert series(run) == series(single)
