"""More than one machine: `tokenmill train --nnodes N --node-rank R --rdzv HOST:PORT`, the Slurm
example, and the refusals of bad node options."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.adversarial.conftest import assert_clean_error, run_cli
from tests.train.dist_helpers import REPO, env, events, make_run, series

SBATCH = REPO / "examples" / "slurm" / "train.sbatch"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(run_path: Path, rank: int, port: int, log: Path) -> subprocess.Popen:
    """One node: the real CLI, which starts its own torchrun agent; in a session of its own."""
    cmd = [sys.executable, "-m", "tokenmill", "train", str(run_path / "config.yaml"), "--run-dir", str(run_path),
           "--nnodes", "2", "--node-rank", str(rank), "--rdzv", f"127.0.0.1:{port}", "--restarts", "1",
           "--rdzv-timeout", "60"]
    with log.open("a") as out:
        return subprocess.Popen(cmd, env=env(), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)


def _kill_machine(proc: subprocess.Popen) -> None:
    """SIGKILL a node's whole process tree (CLI, torchrun agent, its ranks in their own sessions):
    the machine dies, nothing runs a handler."""
    tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def _wait(cond, procs: list[subprocess.Popen], logs: list[Path], timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while not cond():
        dead = [p for p in procs if p.poll() is not None]
        assert not dead and time.time() < deadline, "\n".join(log.read_text()[-3000:] for log in logs)
        time.sleep(0.05)


@pytest.mark.slow
def test_two_nodes_one_killed_and_started_again_resume_with_the_undisturbed_losses(single, tmp_path):
    """Two torchrun agents on this machine act as two nodes (c10d rendezvous on 127.0.0.1, one
    gloo rank each). Node 1 dies (its whole process tree SIGKILLed) after the step-4 checkpoint;
    node 0's rank fails its collective, its agent restarts it into the rendezvous, node 1 is
    started again with the same command and rejoins: every logged loss equals the one-process run."""
    run = make_run(tmp_path / "run", distributed="ddp", preempt_grace_s=5, faults={"slow": [0, 0.15]})
    port, logs = _free_port(), [tmp_path / "node0.log", tmp_path / "node1.log"]
    nodes = [_node(run.path, r, port, logs[r]) for r in (0, 1)]
    try:
        _wait(lambda: any(e["step"] >= 5 for e in events(run, "train_step")), nodes, logs)
        _kill_machine(nodes[1])
        nodes[1] = _node(run.path, 1, port, logs[1])  # the node comes back: same command
        for p in nodes:
            p.wait(timeout=90)
    finally:
        for p in nodes:
            if p.poll() is None:
                _kill_machine(p)
    text = "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs)
    assert [p.returncode for p in nodes] == [0, 0], text
    assert "on 2 nodes × 1 ranks" in logs[0].read_text()
    assert [e["step"] for e in events(run, "resumed")] == [4], text
    assert len(events(run, "train_step")) > 12  # step 5 ran twice
    assert series(run) == series(single) and series(run, "grad_norm") == series(single, "grad_norm")
