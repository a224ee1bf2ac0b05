"""Shared by the distributed tests: a tiny run on a synthetic store, torchrun launches, losses."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tokenmill.config import RunConfig
from tokenmill.runs import RunDir, read_events

from tests.conftest import write_tiny_store

WORKER = Path(__file__).with_name("dist_worker.py")
REPO = Path(__file__).resolve().parents[2]
# The same global batch whatever the world size: 512 tokens = 2 micro-batches of 8 × 32, i.e.
# grad_accum 2 in one process and 1 on each of 2 ranks (train.global_batch_tokens).
TRAIN = {"seq_len": 32, "micro_batch": 8, "global_batch_tokens": 512, "max_steps": 12, "lr": 0.01,
         "warmup_steps": 3, "ckpt_every": 4, "keep_checkpoints": 10, "device": "cpu", "dtype": "float32",
         "threads": 1, "log_every": 0, "eval_every": 0, "checksum_every": 2}


def fp32_order_rtol(steps: int = TRAIN["max_steps"], terms: int = TRAIN["global_batch_tokens"]) -> float:
    """How far two correct runs that sum the same fp32 terms in another order (ranks' partial sums,
    per-shard norms, another CPU's kernels) may drift apart by step `steps`: a sum of K terms moves
    by up to K·u relative (Higham, Accuracy and Stability of Numerical Algorithms §4.2; u = 2^-24,
    K = the step's targets, which every loss and weight gradient sums over), carried from step to
    step, so steps·K·u (12 steps of 512 targets: 3.7e-4; it replaces 1e-5 and 2e-5 set by hand on one CPU)."""
    return steps * terms * 2.0**-24


def make_run(path: Path, **train: Any) -> RunDir:
    """A run directory with the tiny learnable token store, its tokenize stage marked finished
    (torchrun refuses stale data), and a 2-layer d=32 model config."""
    cfg = RunConfig.model_validate({
        "name": "tiny", "root": str(path.parent), "seed": 11,
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
        "train": {**TRAIN, **train},
    })
    run = RunDir.create(cfg, path)
    write_tiny_store(run.path / "tokens")
    run.mark_done("tokenize")
    return run


def reconfigure(run: RunDir, **train: Any) -> RunDir:
    """The same run directory with some train fields changed (e.g. distributed: ddp -> fsdp)."""
    data = run.config.model_dump()
    data["train"].update(train)
    changed = RunDir.create(RunConfig.model_validate(data), run.path)
    changed.record_config()  # as a stage does when it starts: the CLI ranks read config.yaml
    return changed


def copy_run(run: RunDir, dest: Path, keep_steps: int | None = None) -> RunDir:
    """A copy of a run directory; with keep_steps, only checkpoints up to that step and only the
    events up to that step (as if the run had stopped right after that checkpoint)."""
    shutil.copytree(run.path, dest)
    if keep_steps is not None:
        from tokenmill.train.checkpoint import list_checkpoints

        for step, p in list_checkpoints(dest / "checkpoints"):
            if step > keep_steps:
                shutil.rmtree(p)
        kept = [line for line in (dest / "events.jsonl").read_text().splitlines()
                if '"train_step"' not in line or _step(line) <= keep_steps]
        (dest / "events.jsonl").write_text("\n".join(kept) + "\n")
    return RunDir(config=run.config, path=dest)


def _step(line: str) -> int:
    import json

    return int(json.loads(line)["step"])


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]


def launch(run: RunDir, *args: str, nproc: int = 2) -> subprocess.Popen:
    """`dist_worker.py RUN_DIR ARGS` on `nproc` ranks, in its own session."""
    return subprocess.Popen(torchrun(str(WORKER), str(run.path), *args, nproc=nproc), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env(), start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun timed out:\n{out[-4000:]}")
    return proc.returncode, out


# A known, rare teardown crash (about 1 launch in 100 on 2 busy cores, seen under DDP with ZeRO-1
# and under FSDP2): a rank that has finished the run, written train_done and closed its group
# aborts at interpreter exit ("terminate called without an active exception": a gloo thread
# still joinable). Everything the tests read was written before it. Tolerated here only when
# this launch added a train_done event; the bug itself is open (the closing note of 2026-11-27).
EXIT_ABORT = "terminate called without an active exception"


def run_ok(run: RunDir, *args: str, nproc: int = 2) -> str:
    done_before = len(events(run, "train_done")) if (run.path / "events.jsonl").is_file() else 0
    code, out = finish(launch(run, *args, nproc=nproc))
    if code != 0 and EXIT_ABORT in out and len(events(run, "train_done")) > done_before:
        return out
    assert code == 0, out[-12000:]
    return out


def kill_ranks(run: RunDir, proc: subprocess.Popen, nproc: int = 2) -> None:
    """SIGKILL every rank (a machine dying: no handler runs, nothing is flushed), then the agent."""
    for r in range(nproc):
        try:
            os.kill(int((run.path / f".pid.{r}").read_text()), signal.SIGKILL)
        except (ProcessLookupError, FileNotFoundError, ValueError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate(timeout=60)


def wait_for(cond: Any, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"torchrun ended early: {proc.communicate()[0][-4000:]}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


def events(run: RunDir, kind: str) -> list[dict]:
    return [e for e in read_events(run.path / "events.jsonl") if e["kind"] == kind]


def series(run: RunDir, key: str = "loss") -> dict[int, float]:
    """`key` of every train_step by step; a step logged twice (replayed after a resume) must agree."""
    seen: dict[int, float] = {}
    for e in events(run, "train_step"):
        assert seen.setdefault(e["step"], e[key]) == e[key], f"step {e['step']} replayed differently"
    return seen


def max_rel_diff(a: dict[int, float], b: dict[int, float]) -> float:
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    return max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
