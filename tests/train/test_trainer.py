"""The trainer: learning, events, checkpoints, errors, and exact resume in real processes."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tokenmill.config import RunConfig
from tokenmill.runs import RunDir, read_events
from tokenmill.train import trainer
from tokenmill.train.checkpoint import list_checkpoints, verify_checkpoint
from tokenmill.train.trainer import TrainError, TrainingDiverged, run_train

WORKER = Path(__file__).with_name("train_worker.py")


def steps(run_dir: Path, kind: str = "train_step") -> list[dict]:
    return [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == kind]


def losses(run_dir: Path) -> dict[int, float]:
    """Loss per step; a step run twice (replayed after a resume) must give the same loss."""
    seen: dict[int, float] = {}
    for e in steps(run_dir):
        assert seen.setdefault(e["step"], e["loss"]) == e["loss"], f"step {e['step']} replayed differently"
    return seen


def copy_run(run: RunDir, dest: Path) -> RunDir:
    shutil.copytree(run.path, dest)
    return RunDir(config=run.config, path=dest)


def with_config(run: RunDir, **train) -> RunDir:
    data = run.config.model_dump()
    data["train"].update(train)
    return RunDir.create(RunConfig.model_validate(data), run.path)


def worker(run_dir: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(WORKER), str(run_dir), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def wait_for(cond, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"worker ended early: {finish(proc)}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


# --------------------------------------------------------------------------- in process
def test_loss_decreases_and_every_step_is_recorded(tiny_run):
    evals = []
    summary = run_train(with_config(tiny_run, eval_every=10), progress=False,
                        on_eval=lambda step, model: evals.append((step, model.training)))
    ev = steps(tiny_run.path)
    assert [e["step"] for e in ev] == list(range(1, 31))
    assert all({"loss", "lr", "grad_norm", "tokens_per_s", "mfu"} <= set(e) for e in ev)
    first, last = ev[0]["loss"], sum(e["loss"] for e in ev[-5:]) / 5
    assert first == pytest.approx(torch.log(torch.tensor(64.0)).item(), abs=0.3)  # uniform at init
    assert last < first - 2.0  # the patterns are learnable
    assert ev[0]["lr"] == pytest.approx(0.01 / 5) and ev[-1]["lr"] == pytest.approx(0.001)
    assert summary["steps"] == 30 and summary["final_loss"] == ev[-1]["loss"]
    assert summary["tokens"] == 30 * 8 * 32 * 2 and summary["params"] > 0
    assert [s for s, _ in list_checkpoints(tiny_run.path / "checkpoints")] == [20, 30]  # keep 2
    assert evals == [(10, False), (20, False), (30, False)]  # eval mode, last step once


def test_refuses_to_overwrite_and_refuses_a_changed_config(tiny_run):
    run_train(tiny_run, progress=False)
    with pytest.raises(TrainError, match="--resume"):
        run_train(tiny_run, progress=False)
    changed = with_config(tiny_run, lr=0.02)
    with pytest.raises(TrainError, match=r"train\.lr: 0\.01 -> 0\.02"):
        run_train(changed, resume=True, progress=False)


def test_resume_of_a_finished_run_is_a_no_op(tiny_run):
    first = run_train(tiny_run, progress=False)
    evals = []
    again = run_train(tiny_run, resume=True, progress=False, on_eval=lambda s, m: evals.append(s))
    assert again["steps"] == 30 and again["final_loss"] == first["final_loss"]
    assert len(steps(tiny_run.path)) == 30
    assert evals == [30]  # the final evaluation is (re)done: the stopped process may have missed it


def test_nan_loss_without_the_guard_stops_at_the_step(tiny_run, monkeypatch):
    tiny_run.config.train.guard.enabled = False
    real = trainer.token_nll_batch
    monkeypatch.setattr(trainer, "token_nll_batch", lambda m, b: real(m, b) * float("nan"))
    with pytest.raises(TrainingDiverged, match="step 1"):
        run_train(tiny_run, progress=False)
    assert steps(tiny_run.path, "diverged")[0]["step"] == 1


def test_nan_on_every_step_is_skipped_then_declared_diverged(tiny_run, monkeypatch):
    real = trainer.token_nll_batch
    monkeypatch.setattr(trainer, "token_nll_batch", lambda m, b: real(m, b) * float("nan"))
    with pytest.raises(TrainingDiverged, match="no checkpoint from before the spike"):
        run_train(tiny_run, progress=False)
    limit = tiny_run.config.train.guard.max_consecutive_skips
    assert [e["step"] for e in steps(tiny_run.path, "skip")] == list(range(1, limit + 1))
    assert {e["action"] for e in steps(tiny_run.path)} == {"skip"}  # nothing NaN was ever applied
    assert steps(tiny_run.path, "diverged")[0]["step"] == limit


def test_resume_after_a_crash_in_process_is_exact(tiny_run, tmp_path):
    reference = copy_run(tiny_run, tmp_path / "ref")
    run_train(reference, progress=False)

    def crash(step, model):
        if step == 15:
            raise RuntimeError("simulated crash")

    crashing = with_config(tiny_run, eval_every=5)  # eval_every is part of the fingerprint
    ref2 = with_config(reference, eval_every=5)
    with pytest.raises(RuntimeError, match="simulated"):
        run_train(crashing, on_eval=crash, progress=False)
    evals = []
    run_train(crashing, resume=True, progress=False, on_eval=lambda s, m: evals.append(s))
    assert steps(crashing.path, "resumed")[0]["step"] == 10
    assert evals == [10, 15, 20, 25, 30]  # the eval due at the resumed step runs again
    assert losses(crashing.path) == losses(ref2.path)


# --------------------------------------------------------------------------- real processes
def test_sigkill_then_resume_reproduces_the_uninterrupted_run_bitwise(tiny_run, tmp_path):
    full = copy_run(tiny_run, tmp_path / "full")
    killed = copy_run(tiny_run, tmp_path / "killed")
    p_full = worker(full.path)
    p_kill = worker(killed.path, "--sleep", "0.05")
    wait_for(lambda: (killed.path / "checkpoints" / "step_10").exists(), p_kill)
    os.kill(p_kill.pid, signal.SIGKILL)
    assert p_kill.wait(timeout=30) == -signal.SIGKILL
    rc, out = finish(p_full)
    assert rc == 0, out
    done_before_kill = max(e["step"] for e in steps(killed.path))
    assert done_before_kill < 30

    rc, out = finish(worker(killed.path, "--resume"))
    assert rc == 0, out
    resumed = steps(killed.path, "resumed")[0]["step"]
    assert 10 <= resumed <= done_before_kill
    reference = losses(full.path)
    assert sorted(reference) == list(range(1, 31))
    assert losses(killed.path) == reference  # every step, including those run twice
    grad = {e["step"]: e["grad_norm"] for e in steps(full.path)}
    assert all(grad[e["step"]] == e["grad_norm"] for e in steps(killed.path))
    for name in ("model.safetensors", "optim.pt"):  # the final state is byte-identical
        a = (full.path / "checkpoints" / "step_30" / name).read_bytes()
        assert a == (killed.path / "checkpoints" / "step_30" / name).read_bytes(), name


def test_sigint_finishes_the_step_saves_and_exits_nonzero(tiny_run, tmp_path):
    reference = copy_run(tiny_run, tmp_path / "ref")
    proc = worker(tiny_run.path, "--sleep", "0.05")
    wait_for(lambda: len(steps(tiny_run.path)) >= 3, proc)
    proc.send_signal(signal.SIGINT)
    rc, out = finish(proc)
    assert rc == 130, out
    (ev,) = steps(tiny_run.path, "interrupted")
    n = ev["step"]
    assert 3 <= n < 30 and f"interrupted at step {n}; checkpoint saved" in out
    assert max(e["step"] for e in steps(tiny_run.path)) == n  # stopped right after that step
    ckpt = tiny_run.path / "checkpoints" / f"step_{n}"
    assert verify_checkpoint(ckpt)["step"] == n and ev["checkpoint"] == str(ckpt)

    run_train(tiny_run, resume=True, progress=False)  # continue (in this process: same threads)
    run_train(reference, progress=False)
    assert losses(tiny_run.path) == losses(reference.path)


def test_resume_on_changed_data_is_refused(tiny_run):
    import json as _json

    from tokenmill.mixture.errors import MixtureError

    tiny_run.config.train.max_steps = 10
    run_train(tiny_run, progress=False)
    meta_path = tiny_run.path / "tokens" / "_meta.json"
    meta = _json.loads(meta_path.read_text())
    meta["note"] = "re-tokenized"  # any change to the store changes its fingerprint
    meta_path.write_text(_json.dumps(meta))
    tiny_run.config.train.max_steps = 10
    with pytest.raises(MixtureError, match="step_10"):
        run_train(tiny_run, resume=True, progress=False)


@pytest.mark.parametrize("objective", ["mlm", "span", "prefix_lm"])
def test_training_objective_is_used(tiny_run, monkeypatch, objective):
    from tokenmill.model import objectives

    calls = []
    real = objectives.objective_loss
    monkeypatch.setattr(objectives, "objective_loss", lambda *a, **k: (calls.append(a[2].objective), real(*a, **k))[1])
    tiny_run.config.train.objective = objective
    tiny_run.config.train.max_steps = 2
    tiny_run.config.train.ckpt_every = 0
    summary = run_train(tiny_run, progress=False)
    assert calls == [objective] * (2 * tiny_run.config.train.grad_accum)
    assert math.isfinite(summary["final_loss"])


def test_z_loss_and_moe_aux_are_trained_and_logged(tiny_run):
    tiny_run.config.model.z_loss = 1e-3
    tiny_run.config.model.n_experts = 4
    tiny_run.config.model.top_k = 2
    tiny_run.config.train.max_steps = 3
    tiny_run.config.train.ckpt_every = 0
    run_train(tiny_run, progress=False)
    ev = steps(tiny_run.path)
    assert len(ev) == 3
    for e in ev:
        assert e["z_loss"] > 0 and e["moe_aux"] > 0
        util = e["expert_utilization"]
        assert len(util) == tiny_run.config.model.n_layers and all(abs(sum(u) - 1.0) < 1e-5 for u in util)


def test_health_metrics_every_step_or_every_k(tiny_run):
    run_train(tiny_run, progress=False)
    every = steps(tiny_run.path)
    assert all(e["grad_norms"] and e["update_ratio"] > 0 for e in every)
    # The group norms combine to the global pre-clip norm.
    assert all(abs(sum(v * v for v in e["grad_norms"].values()) ** 0.5 - e["grad_norm"]) <= 1e-4 * e["grad_norm"]
               for e in every)
    sparse = with_config(copy_run(tiny_run, tiny_run.path.parent / "sparse"), metrics_every=7)
    shutil.rmtree(sparse.path / "checkpoints")
    (sparse.path / "events.jsonl").unlink()
    run_train(sparse, progress=False)
    got = steps(sparse.path)
    assert [e["step"] for e in got if "grad_norms" in e] == [7, 14, 21, 28]
    assert all(e["update_ratio"] is None for e in got if e["step"] % 7)
    assert [e["loss"] for e in got] == [e["loss"] for e in every]  # measuring never changes training


def test_a_context_extension_phase_rebuilds_rope_and_resumes_exactly(tiny_run, tmp_path):
    """Phase 'long' quadruples seq_len with YaRN: the tables change at its first step (an event
    says so), checkpoints from then on describe the extended model, and a crash inside the phase
    resumes (from a checkpoint written in it) to the uninterrupted run's losses."""
    from tokenmill.train.restore import load_model

    data = tiny_run.config.model_dump()
    data["train"].update(eval_every=5)
    data["mixture"]["phases"] = [
        {"name": "short", "fraction": 0.6},
        {"name": "long", "fraction": 0.4, "seq_len": 128,
         "rope": {"rope_scaling": "yarn", "rope_scaling_factor": 4.0}}]
    cfg = RunConfig.model_validate(data)
    reference = RunDir.create(cfg, tmp_path / "ref")
    shutil.copytree(tiny_run.path / "tokens", reference.path / "tokens")
    crashing = RunDir.create(cfg, tmp_path / "crash")
    shutil.copytree(tiny_run.path / "tokens", crashing.path / "tokens")
    run_train(reference, progress=False)
    changed = steps(reference.path, "rope_changed")
    assert [(e["step"], e["phase"], e["max_seq_len"], e["rope_scaling"]) for e in changed] == [(19, "long", 128, "yarn")]
    assert not steps(reference.path, "rope_warning")  # the phase names its RoPE
    model, step = load_model(reference.path / "checkpoints", "cpu")
    assert step == 30 and (model.config.max_seq_len, model.config.rope_scaling) == (128, "yarn")
    assert model.config.rope_original_max_seq_len is None and model.rope_cos.shape[0] == 128

    def crash(step, model):
        if step == 25:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated"):
        run_train(crashing, on_eval=crash, progress=False)
    run_train(crashing, resume=True, progress=False)
    assert steps(crashing.path, "resumed")[-1]["step"] == 20  # inside the long phase
    assert losses(crashing.path) == losses(reference.path)


def test_lengthening_the_context_with_rope_unchanged_is_warned(tiny_run, capsys):
    data = tiny_run.config.model_dump()
    data["mixture"]["phases"] = [{"name": "short", "fraction": 0.5}, {"name": "long", "fraction": 0.5, "seq_len": 64}]
    data["train"].update(max_steps=4)
    run = RunDir.create(RunConfig.model_validate(data), tiny_run.path)
    run_train(run, progress=False)
    warned = steps(run.path, "rope_warning")
    assert len(warned) == 1 and "raises seq_len from 32 to 64 with RoPE unchanged" in warned[0]["message"]
    assert "RoPE unchanged" in capsys.readouterr().err


@pytest.mark.parametrize("split", ["train", "val"])
def test_token_id_past_the_vocabulary_gives_one_line_in_train_and_eval(tmp_path, split):
    """A .bin holding an id >= the vocabulary (here 60000 of 64): `tokenmill train` (a train
    shard) and `tokenmill eval` (a val shard) exit 1 with one line naming the file and offset,
    not an IndexError from the embedding. Real processes on the tiny run."""
    import numpy as np

    from tests.adversarial.conftest import assert_clean_error, run_cli
    from tests.train.dist_helpers import make_run

    # train: 12 steps read every token of bucket a; eval: a checkpoint first, of 2 steps
    run = make_run(tmp_path / "run", max_steps=12 if split == "train" else 2, ckpt_every=2)
    if split == "val":
        run_train(run, progress=False)
    bin_path = run.path / "tokens" / "a" / f"{split}-00000.bin"
    tokens = np.memmap(bin_path, dtype=np.uint16, mode="r+")
    tokens[5] = 60000
    tokens.flush()
    del tokens
    result = run_cli("train" if split == "train" else "eval", run.path / "config.yaml", "--run-dir", run.path,
                     "--set", "train.eval_every=0", timeout=120)
    assert_clean_error(result, f"{bin_path}: token id 60000 at token 5 (byte offset 10; document 0, token 5) is not "
                               "below the vocabulary size 64", max_lines=4)
    assert "IndexError" not in result.stderr + result.stdout
