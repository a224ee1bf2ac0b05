"""More than one machine: `tokenmill train --nnodes N --node-rank R --rdzv HOST:PORT`, the Slurm
example, and the refusals of bad node options."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tokenmill.train.checkpoint import list_checkpoints
from tokenmill.train.multinode import MultinodeError, check_nodes, rdzv_id

from tests.adversarial.conftest import assert_clean_error, assert_untouched, run_cli, tree_snapshot
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
    run = make_run(tmp_path / "run", distributed="ddp", preempt_grace_s=5, peak_tflops=1.0,
                   faults={"slow": [0, 0.1]})
    port, logs = _free_port(), [tmp_path / "node0.log", tmp_path / "node1.log"]
    nodes = [_node(run.path, r, port, logs[r]) for r in (0, 1)]
    try:
        _wait(lambda: any(e["step"] >= 5 for e in events(run, "train_step")), nodes, logs)
        _kill_machine(nodes[1])
        newest = list_checkpoints(run.path / "checkpoints")[-1][0]  # step 4, or 8 on a slow machine
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
    assert [e["step"] for e in events(run, "resumed")] == [newest] and newest < 12, text
    (restart,) = events(run, "restart")  # whichever node holds rank 0 now: the job's count, not its agent's
    assert restart["by"] == "torchrun" and restart["attempt"] == 1 and restart["resume_step"] == newest
    assert len(events(run, "train_step")) > 12  # the steps after the checkpoint ran twice
    assert series(run) == series(single) and series(run, "grad_norm") == series(single, "grad_norm")


FAKE_SRUN = """#!/bin/bash
# srun on a fake allocation: skips its own options, runs the task once per node at once, as Slurm does
while [[ $1 == --* ]]; do shift; done
for ((i = 0; i < SLURM_NNODES; i++)); do SLURM_NODEID=$i "$@" & done
for ((i = 0; i < SLURM_NNODES; i++)); do wait -n || exit $?; done
"""
FAKE_SCONTROL = """#!/bin/bash
[[ "$1 $2" == "show hostnames" ]] && printf 'node-a\\nnode-b\\n'
"""


def test_the_slurm_example_runs_one_agent_per_node_meeting_at_the_first_node(tmp_path):
    """examples/slurm/train.sbatch on a fake 2-node allocation (srun and scontrol faked, the real
    tokenmill with --print-launch): each node's torchrun line, as `tokenmill train` checks and builds it."""
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    run = make_run(tmp_path / "run")
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    slurm = {"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_GPUS_ON_NODE": "1",
             "TOKENMILL": f"{sys.executable} -m tokenmill", "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(["bash", str(SBATCH), str(run.path / "config.yaml"), "--run-dir", str(run.path), "--print-launch"],
                         env={**env(), **slurm}, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = sorted((shlex.split(line) for line in out.stdout.splitlines() if "torch.distributed.run" in line),
                   key=lambda argv: next(a for a in argv if a.startswith("--node-rank=")))
    assert len(lines) == 2, out.stdout
    ids = set()
    for rank, argv in enumerate(lines):
        assert argv[0] == "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
        opts = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
        assert opts["--nnodes"] == "2" and opts["--node-rank"] == str(rank) and opts["--nproc-per-node"] == "1"
        assert opts["--rdzv-backend"] == "c10d" and opts["--rdzv-endpoint"] == "node-a:29500"
        assert opts["--max-restarts"] == "3" and f"is_host={int(rank == 0)}" in opts["--rdzv-conf"]
        ids.add(opts["--rdzv-id"])
        assert argv[argv.index("--run-dir") + 1] == str(run.path.resolve())
    assert len(ids) == 1 and ids != {rdzv_id(tmp_path / "another_run")}  # one job; another run another id


@pytest.mark.parametrize(("args", "says"), [
    (["--nnodes", "2", "--node-rank", "2", "--rdzv", "h:29500"], "--node-rank 2: must be in 0..1"),
    (["--nnodes", "2", "--rdzv", "h:port"], "--rdzv 'h:port': expected HOST:PORT"),
    (["--nnodes", "2", "--rdzv", "h:70000"], "--rdzv 'h:70000': expected HOST:PORT"),
    (["--nnodes", "2"], "--nnodes 2 needs --rdzv HOST:PORT"),
    (["--rdzv", "h:29500"], "--rdzv is for --nnodes > 1"),
])
def test_bad_node_options_are_one_line_before_anything_starts(args, says):
    with pytest.raises(MultinodeError, match=re.escape(says)):
        check_nodes(*_parse(args))


def _parse(args: list[str]) -> tuple[int, int, str | None]:
    opts = dict(zip(args[::2], args[1::2]))
    return int(opts.get("--nnodes", 1)), int(opts.get("--node-rank", 0)), opts.get("--rdzv")


def test_the_cli_refuses_a_node_rank_past_the_nodes_in_one_line_touching_nothing(tmp_path):
    """Through the real CLI: refused before the config is read, the run directory made or torchrun started."""
    workdir = tmp_path / "case"
    workdir.mkdir()
    before = tree_snapshot(workdir)
    result = run_cli("train", workdir / "absent.yaml", "--run-dir", workdir / "run", "--nnodes", "2",
                     "--node-rank", "2", "--rdzv", "node-a:29500", cwd=workdir)
    assert_clean_error(result, "--node-rank 2", max_lines=1)
    assert_untouched(before, tree_snapshot(workdir))


def _shared_rank(rank: int, init: str, shared: str, own: str, out: str) -> None:
    """One rank of a 2-node job (GROUP_WORLD_SIZE=2): the run directory is first one directory for
    both ranks, then each rank's own (the same path on two machines without a shared filesystem)."""
    import json

    import torch.distributed as dist

    from tokenmill.train.distributed import DistContext
    from tokenmill.train.errors import TrainError
    from tokenmill.train.multinode import check_shared_run_dir

    os.environ["GROUP_WORLD_SIZE"] = "2"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    ctx = DistContext(world_size=2, rank=rank)
    check_shared_run_dir(Path(shared), ctx)  # passes
    try:
        check_shared_run_dir(Path(own) / str(rank), ctx)
        said = ""
    except TrainError as exc:
        said = str(exc)
    Path(out, f"{rank}.json").write_text(json.dumps(said))
    dist.destroy_process_group()


def test_a_run_directory_the_nodes_do_not_share_is_refused_by_every_rank(tmp_path):
    import json

    import torch.multiprocessing as mp

    for r in (0, 1):
        (tmp_path / "own" / str(r)).mkdir(parents=True)
    args = (f"file://{tmp_path / 'store'}", str(tmp_path), str(tmp_path / "own"), str(tmp_path))
    mp.start_processes(_shared_rank, args=args, nprocs=2, join=True, start_method="fork")
    said = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    for r in (0, 1):  # every rank refuses, naming the directory and the ranks that cannot see rank 0's marker
        assert said[r].startswith(f"{tmp_path / 'own' / str(r)} is not shared by every node: "), said
    assert said[0].split(": ", 1)[1] == said[1].split(": ", 1)[1]
    assert f"rank 1 on {socket.gethostname()} cannot read" in said[0] and "rank 0 on" not in said[0]
    assert not (tmp_path / "own" / "1" / ".shared_fs_check").exists()  # only rank 0 writes the marker


@pytest.mark.parametrize("node_rank, resolves, timeout", [(0, False, 5), (1, False, 5), (1, True, 3)])
def test_unusable_rendezvous_fails_within_its_timeout_in_one_line(tmp_path, node_rank, resolves, timeout):
    """A --rdzv host that does not resolve (.invalid never does: RFC 2606), on any node; on a node
    other than 0, a resolving HOST:PORT where nothing listens: the real CLI exits 1 within
    --rdzv-timeout (plus start-up) with one line and no torch stack, before torchrun starts."""
    run = make_run(tmp_path / "run", max_steps=2)
    rdzv = f"127.0.0.1:{_free_port()}" if resolves else "no-such-host.invalid:29500"
    start = time.monotonic()
    result = run_cli("train", run.path / "config.yaml", "--run-dir", run.path, "--nnodes", "2", "--node-rank",
                     str(node_rank), "--rdzv", rdzv, "--rdzv-timeout", str(timeout), timeout=120)
    took = time.monotonic() - start
    want = ("nothing accepted a connection there within --rdzv-timeout 3 s" if resolves
            else "the host 'no-such-host.invalid' is not usable: it does not resolve")
    assert_clean_error(result, f"--rdzv {rdzv}: {want}", max_lines=1)
    assert "RendezvousTimeoutError" not in result.stderr and "c10d" not in result.stderr
    assert took < timeout + 15, took
    if resolves:
        assert took >= timeout  # it waited for node 0 as long as it was told
    assert not list(run.path.glob("checkpoints/step_*"))
