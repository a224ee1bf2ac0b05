"""`tokenmill train --restarts N`: crashes restart from the latest checkpoint and give the
uninterrupted run's losses bitwise; user errors and Ctrl-C do not restart."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.runs import RunDir, read_events
from tokenmill.train.supervisor import CRASH_EXIT, describe_exit, is_crash, shell_exit_code, supervise
from tokenmill.train.trainer import run_train


def events(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == kind]


def losses(run_dir: Path) -> dict[int, float]:
    """Loss per step; a step run twice (after a restart) must have logged the same loss."""
    seen: dict[int, float] = {}
    for e in events(run_dir, "train_step"):
        assert seen.setdefault(e["step"], e["loss"]) == e["loss"], f"step {e['step']} replayed differently"
    return seen


def start_supervisor(run: RunDir, restarts: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tokenmill", "train", str(run.path / "config.yaml"), "--run-dir", str(run.path),
           "--restarts", str(restarts)]
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_for(cond, proc: subprocess.Popen, log: Path, timeout: float = 90):
    deadline = time.time() + timeout
    while True:
        found = cond()
        if found:
            return found
        assert proc.poll() is None, f"ended early ({proc.returncode}): {tail(log)}"
        assert time.time() < deadline, f"timed out: {tail(log)}"
        time.sleep(0.005)


def tail(log: Path) -> str:
    return log.read_text()[-3000:] if log.exists() else ""


def child_at_step(run_dir: Path, attempt: int, step: int):
    """The pid of the child of `attempt` once it has logged a train_step >= step, else None."""
    evs = list(read_events(run_dir / "events.jsonl"))
    starts = [i for i, e in enumerate(evs) if e["kind"] == "child_started" and e["attempt"] == attempt]
    if not starts:
        return None
    after = evs[starts[0]:]
    return evs[starts[0]]["pid"] if any(e["kind"] == "train_step" and e["step"] >= step for e in after) else None


# --------------------------------------------------------------------------- exit codes
def test_what_counts_as_a_crash():
    assert all(is_crash(rc) for rc in (-signal.SIGKILL, -signal.SIGSEGV, CRASH_EXIT, 7))
    assert not any(is_crash(rc) for rc in (0, 1, 2, 130))
    assert describe_exit(-9) == {"exit_code": None, "signal": "SIGKILL"}
    assert describe_exit(3) == {"exit_code": 3, "signal": None}
    assert shell_exit_code(-signal.SIGINT) == 130 and shell_exit_code(1) == 1


def test_train_exits_3_on_an_unexpected_exception(tiny_run, monkeypatch):
    from tokenmill.train import trainer

    def boom(*a, **k):
        raise RuntimeError("device fell over")
    monkeypatch.setattr(trainer, "run_train", boom)
    res = CliRunner().invoke(app, ["train", str(tiny_run.path / "config.yaml"), "--run-dir", str(tiny_run.path)])
    assert res.exit_code == CRASH_EXIT and "training crashed" in res.output


def fake(tmp_path: Path, body: str) -> list[str]:
    """A child that records its argv, then runs `body` (exit codes, signals)."""
    script = tmp_path / "child.py"
    script.write_text(f"import os, sys, signal\nopen({str(tmp_path / 'argv.txt')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n{body}\n")
    return [sys.executable, str(script), "train"]


def test_crashes_restart_with_resume_until_the_budget_is_spent(tmp_path):
    result = supervise(fake(tmp_path, "os.kill(os.getpid(), signal.SIGSEGV)"), tmp_path, restarts=2, log=lambda m: None)
    assert result.returncode == -signal.SIGSEGV and result.restarts == 2 and not result.interrupted
    assert (tmp_path / "argv.txt").read_text().splitlines() == ["train", "train --resume", "train --resume"]
    restarts = events(tmp_path, "restart")
    assert [(e["attempt"], e["signal"], e["resume_from"], e["resume_step"]) for e in restarts] == \
        [(1, "SIGSEGV", None, 0), (2, "SIGSEGV", None, 0)]
    assert events(tmp_path, "restarts_exhausted")[0]["attempts"] == 2


@pytest.mark.parametrize("code", [1, 2, 130])
def test_user_errors_and_ctrl_c_are_not_restarted(tmp_path, code):
    result = supervise(fake(tmp_path, f"sys.exit({code})"), tmp_path, restarts=3, resume=True, log=lambda m: None)
    assert result.returncode == code and result.restarts == 0
    assert (tmp_path / "argv.txt").read_text().splitlines() == ["train --resume"]
    assert not events(tmp_path, "restart")


def test_the_child_runs_in_its_own_process_group_of_the_same_session(tmp_path):
    """A terminal's Ctrl-C goes to the foreground process group: the child is outside it, and still
    in the supervisor's session (a process group, not a new session), on Python 3.10 too."""
    body = f"open({str(tmp_path / 'ids.txt')!r}, 'w').write(f'{{os.getpgid(0)}} {{os.getsid(0)}}')"
    result = supervise(fake(tmp_path, body), tmp_path, restarts=0, log=lambda m: None)
    assert result.returncode == 0
    (started,) = events(tmp_path, "child_started")
    pgid, sid = map(int, (tmp_path / "ids.txt").read_text().split())
    assert pgid == started["pid"] != os.getpgrp()
    assert sid == os.getsid(0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_the_child_dies_with_the_supervisor(tmp_path):
    code = ("import sys; from pathlib import Path; from tokenmill.train.supervisor import supervise; "
            f"supervise([sys.executable, '-c', 'import time; time.sleep(120)'], Path({str(tmp_path)!r}), 1)")
    sup = subprocess.Popen([sys.executable, "-c", code])
    pid = None
    try:
        pid = wait_for(lambda: [e["pid"] for e in events(tmp_path, "child_started")], sup, tmp_path / "none")[0]
        sup.kill()
        sup.wait(timeout=10)
        deadline = time.time() + 10
        while Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid):
            assert time.time() < deadline, "the orphaned child is still running"
            time.sleep(0.02)
    finally:
        sup.kill()
        if pid is not None and _proc_state(pid) != "Z":
            os.kill(pid, signal.SIGKILL)


def test_a_child_can_be_sent_sigterm_instead_when_the_supervisor_dies(tmp_path):
    """torchrun is supervised with death_signal=SIGTERM: should `tokenmill train --nproc` die, torchrun
    stops its ranks the preemption way instead of being killed and leaving them orphaned."""
    child = ("import signal, sys, time; from pathlib import Path\n"
             f"def term(*a):\n    Path({str(tmp_path / 'got_sigterm')!r}).write_text('yes'); sys.exit(75)\n"
             "signal.signal(signal.SIGTERM, term)\ntime.sleep(120)\n")
    (tmp_path / "child.py").write_text(child)
    code = ("import sys, signal; from pathlib import Path; from tokenmill.train.supervisor import supervise; "
            f"supervise([sys.executable, {str(tmp_path / 'child.py')!r}], Path({str(tmp_path)!r}), 0, "
            "death_signal=signal.SIGTERM)")
    sup = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_for(lambda: events(tmp_path, "child_started"), sup, tmp_path / "none")
        time.sleep(0.5)  # the child's handler is installed
        sup.kill()
        sup.wait(timeout=10)
        deadline = time.time() + 10
        while not (tmp_path / "got_sigterm").exists():
            assert time.time() < deadline, "the child never got SIGTERM"
            time.sleep(0.02)
    finally:
        sup.kill()


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


# --------------------------------------------------------------------------- real training
@pytest.mark.slow
def test_sigkill_of_the_trainer_restarts_it_and_the_losses_are_bitwise_identical(tiny_run, tmp_path):
    reference = RunDir(config=tiny_run.config, path=shutil.copytree(tiny_run.path, tmp_path / "ref"))
    log = tmp_path / "supervisor.log"
    sup = start_supervisor(tiny_run, 2, log)
    pid = wait_for(lambda: child_at_step(tiny_run.path, 0, 11), sup, log)  # past the step_10 checkpoint
    os.kill(pid, signal.SIGKILL)
    assert sup.wait(timeout=120) == 0, log.read_text()[-3000:]
    run_train(reference, progress=False)  # uninterrupted, in this process (same config: threads 1)

    (restart,) = events(tiny_run.path, "restart")
    killed_at = max(e["step"] for e in events(tiny_run.path, "train_step") if e["t"] <= restart["t"])
    assert restart["attempt"] == 1 and restart["signal"] == "SIGKILL" and restart["exit_code"] is None
    assert restart["resume_step"] in (10, 20) and restart["resume_step"] <= killed_at < 30
    assert restart["resume_from"] == str(tiny_run.path / "checkpoints" / f"step_{restart['resume_step']}")
    (resumed,) = events(tiny_run.path, "resumed")
    assert resumed["step"] == restart["resume_step"]
    assert [e["attempt"] for e in events(tiny_run.path, "child_started")] == [0, 1]
    assert losses(tiny_run.path) == losses(reference.path)  # every step, the replayed ones included
    assert len(events(tiny_run.path, "train_step")) > 30  # some steps really ran twice
    name = "checkpoints/step_30/model.safetensors"
    assert (tiny_run.path / name).read_bytes() == (reference.path / name).read_bytes()
    assert "restart 1/2 from" in log.read_text()


@pytest.mark.slow
def test_ctrl_c_on_the_supervisor_stops_the_trainer_cleanly_without_restart(tiny_run, tmp_path):
    log = tmp_path / "supervisor.log"
    sup = start_supervisor(tiny_run, 2, log)
    wait_for(lambda: child_at_step(tiny_run.path, 0, 3), sup, log)
    sup.send_signal(signal.SIGINT)  # the supervisor only: the child is in its own process group
    assert sup.wait(timeout=60) == 130, log.read_text()[-3000:]
    (stop,) = events(tiny_run.path, "interrupted")  # the trainer's first-Ctrl-C path: step finished, saved
    assert Path(stop["checkpoint"]).is_dir() and stop["step"] < 30
    assert not events(tiny_run.path, "restart") and len(events(tiny_run.path, "child_started")) == 1
    assert "second Ctrl-C" not in log.read_text()  # forwarded exactly once
