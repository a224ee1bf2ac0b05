"""train.dtype=float16 on the CPU (torch's CPU autocast runs fp16 matmuls, SDPA and their backward):
it trains like fp32, an overflowing loss scale skips the step as an `overflow` (no spike, no
rollback) and backs off, deferred host reads decide exactly as immediate ones, a SIGKILLed run
resumes with the same scale and the same losses, and combinations that cannot run are refused."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from tokenmill.runs import RunDir
from tokenmill.train.config import LossScaleConfig, TrainConfig
from tokenmill.train.errors import TrainError
from tokenmill.train.loss_scale import LossScaler
from tokenmill.train.trainer import run_train

from tests.train.dist_helpers import events, make_run, max_rel_diff, run_ok, series
from tests.train.test_distributed import FSDP_RTOL
from tests.train.test_host_reads import _events, _same_state

WORKER = Path(__file__).parent / "train_worker.py"
# a scale that overflows the tiny model's fp16 gradients for three steps, then grows back into
# overflow every few steps: the scaler's state changes all along the run
OVERFLOWING = {"init_scale": 2.0**24, "growth_interval": 2}


def _config(root: Path, name: str, mode: str = "immediate", **train: Any) -> RunDir:
    """The distributed tests' tiny run (global batch 512 tokens: grad_accum 2 in one process) in fp16."""
    train = {"dtype": "float16", "host_reads": mode, "peak_tflops": 1.0, "checksum_every": 0, **train}
    return make_run(root / name, **train)


def _run(root: Path, name: str, mode: str = "immediate", **train: Any) -> RunDir:
    run = _config(root, name, mode, **train)
    run_train(run, progress=False)
    return run


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """One process, immediate host reads, the overflowing scale: the reference of three tests."""
    return _run(tmp_path_factory.mktemp("fp16"), "overflowing", loss_scale=OVERFLOWING)


def _steps(run: RunDir) -> dict[int, dict[str, Any]]:
    """The last train_step event of each step (a resumed run logs the steps after its checkpoint again)."""
    return {e["step"]: e for e in _events(run) if e["kind"] == "train_step"}


def test_fp16_trains_like_fp32(tmp_path: Path) -> None:
    """12 steps of the tiny model: the loss falls by more than 1.4 nats and every step's loss is
    within 1e-3 (relative) of the fp32 run's; the scale is logged per step and checkpointed."""
    fp16, fp32 = _steps(_run(tmp_path, "fp16")), _steps(_run(tmp_path, "fp32", dtype="float32"))
    assert sorted(fp16) == list(range(1, 13)) and all(e["action"] == "apply" for e in fp16.values())
    assert fp16[1]["loss"] - fp16[12]["loss"] > 1.4
    worst = max(abs(fp16[s]["loss"] - fp32[s]["loss"]) / fp32[s]["loss"] for s in fp16)
    assert worst < 1e-3, worst  # measured: 4e-5
    assert fp16[12]["loss"] != fp32[12]["loss"]  # fp16 matmuls did run
    assert {e["loss_scale"] for e in fp16.values()} == {2.0**16} and "loss_scale" not in fp32[12]
    state = json.loads((tmp_path / "fp16" / "checkpoints" / "step_12" / "state.json").read_text())
    assert state["loss_scale"] == {"scale": 2.0**16, "growth_tracker": 12, "overflows": 0, "in_a_row": 0}


def test_overflow_is_skipped_backed_off_and_deferred_decides_the_same(overflowing: RunDir, tmp_path: Path) -> None:
    """A 2^24 scale overflows the fp16 backward: each such step is an `overflow` skip (not a spike,
    no rollback, its loss finite), the next runs at half the scale, the scale regrows after 2 clean
    steps (GradScaler's rule with growth_interval 2); the
    deferred mode (skip and scale update on the device) gives the same events and checkpoints."""
    imm, dfr = overflowing, _run(tmp_path, "dfr", "deferred", loss_scale=OVERFLOWING)
    ev = _events(imm)
    steps = _steps(imm)
    overflows = [e["step"] for e in ev if e["kind"] == "overflow"]
    assert overflows[:2] == [1, 2] and len(overflows) >= 4 and not [e for e in ev if e["kind"] in ("spike", "skip", "rollback")]
    scale, clean = 2.0**24, 0  # the rule, replayed: halve on overflow, double after 2 clean steps
    for s in range(1, 13):
        assert steps[s]["loss_scale"] == scale, s
        overflowed = s in overflows
        assert steps[s]["action"] == ("skip" if overflowed else "apply") and math.isfinite(steps[s]["loss"])
        assert math.isfinite(steps[s]["grad_norm"]) != overflowed
        clean = 0 if overflowed else clean + 1
        scale, clean = (scale / 2, 0) if overflowed else ((scale * 2, 0) if clean == 2 else (scale, clean))
    assert steps[12]["loss"] < steps[1]["loss"] - 0.5  # it trains between the overflows
    state = json.loads((imm.path / "checkpoints" / "step_12" / "state.json").read_text())
    assert state["guard"]["overflows"] == len(overflows) == state["loss_scale"]["overflows"]
    assert [e for e in ev if e["kind"] != "train_start"] == [e for e in _events(dfr) if e["kind"] != "train_start"]
    _same_state(imm, dfr)


def test_sigkilled_fp16_run_resumes_with_its_scale_exactly(overflowing: RunDir, tmp_path: Path) -> None:
    """A real process SIGKILLed at step 7 (faults.kill), resumed from step 4's checkpoint: every
    step's loss, norm and scale, the overflow steps after the resume and the final weights, optimizer
    state and scaler state are those of the uninterrupted run, byte for byte."""
    reference = overflowing
    killed = _config(tmp_path, "killed", faults={"kill": [7, 0]}, loss_scale=OVERFLOWING)
    proc = subprocess.run([sys.executable, str(WORKER), str(killed.path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    run_train(killed, resume=True, progress=False)
    ref, got = _steps(reference), _steps(killed)
    assert [e for e in _events(killed) if e["kind"] == "resumed"][0]["step"] == 4
    assert any(e["action"] == "skip" for s, e in ref.items() if s > 4)  # the scaler's state mattered after the resume
    keys = ("loss", "grad_norm", "loss_scale", "action")
    assert {s: [e[k] for k in keys] for s, e in got.items()} == {s: [e[k] for k in keys] for s, e in ref.items()}
    a, b = reference.path / "checkpoints" / "step_12", killed.path / "checkpoints" / "step_12"
    for name in ("model.safetensors", "optim.pt"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (json.loads((d / "state.json").read_text()) for d in (a, b))
    assert sa["loss_scale"] == sb["loss_scale"] and sa["guard"] == sb["guard"]


def test_a_scale_stuck_at_its_floor_stops_the_run() -> None:
    """Overflow after overflow at min_scale is not transient: a one-line TrainError naming it."""
    scaler = LossScaler(LossScaleConfig(init_scale=4.0, min_scale=1.0, max_overflows_at_floor=3), torch.device("cpu"))
    seen = []
    with pytest.raises(
        TrainError, match="fp16 loss scale collapsed: 3 overflowing steps in a row up to step 5 with the scale at its floor"
    ):
        for step in range(1, 10):
            seen.append(float(scaler.scale))
            scaler.note(step, True, seen[-1])
            scaler.update(torch.tensor(1.0))
    assert seen == [4.0, 2.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"fp8": True}, "train.fp8 runs on top of bf16 autocast: not with train.dtype=float16"),
        ({"parallel": {"pp": 2}}, "train.dtype=float16 .loss scaling. is not supported with train.parallel.pp > 1"),
    ],
)
def test_fp16_combinations_that_cannot_run_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainConfig(dtype="float16", **fields)
    TrainConfig(dtype="float16", optimizer="muon")  # Muon steps on unscaled gradients: allowed


@pytest.mark.slow
def test_fsdp2_ranks_skip_and_scale_as_one_process(overflowing: RunDir, tmp_path: Path) -> None:
    """2 gloo ranks under FSDP2 (each holds half of every gradient): the overflow is found from the
    all-reduced global norm, so both ranks skip the same steps and keep the one-process run's
    scale; losses within the FSDP tolerance; the sharded checkpoint carries the scaler's state."""
    single = overflowing
    fsdp = _config(tmp_path, "fsdp", distributed="fsdp", loss_scale=OVERFLOWING)
    run_ok(fsdp)
    assert max_rel_diff(series(fsdp), series(single)) <= FSDP_RTOL
    for key in ("loss_scale", "action"):
        assert series(fsdp, key) == series(single, key)
    assert [e["step"] for e in events(fsdp, "overflow")] == [e["step"] for e in events(single, "overflow")]
    sa, sb = (json.loads((r.path / "checkpoints" / "step_12" / "state.json").read_text()) for r in (fsdp, single))
    assert sa["kind"] == "dcp" and sa["loss_scale"] == sb["loss_scale"]


def test_bench_fp16_smoke_runs_both_arms_on_the_cpu(tiny_run: RunDir, tmp_path: Path) -> None:
    """benchmarks/bench_fp16.py --smoke: bf16 then fp16 through the real trainer on the CPU, the
    JSON with both arms, the fp16 arm's scale and overflow steps, and the ratios."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_fp16

    out = tmp_path / "fp16.json"
    result = bench_fp16.main(["--smoke", "--run", str(tiny_run.path), "--steps", "3", "--warmup", "1", "--eval-docs", "2",
                              "--json", str(out), "--commit", "c1", "--set", "train.threads=1"])  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    bf16, fp16 = result["arms"]["bf16"], result["arms"]["fp16"]
    assert bf16["dtype"] == "bfloat16" and bf16["final_scale"] is None and bf16["steps"] == fp16["steps"] == 3
    assert fp16["final_scale"] == 2.0**16 and fp16["overflow_steps"] == [] and fp16["held_out_loss"] > 0
    assert set(result["fp16_over_bf16"]) >= {"tokens_per_s", "final_train_loss", "target_loss_within_1pct"}


def test_replay_rolls_an_fp16_run_forward_with_its_scale(overflowing: RunDir) -> None:
    """`tokenmill replay` of steps 7 and 11 (from checkpoints 4 and 8, rolling forward over overflow
    skips with the checkpointed scale): the logged losses, bit for bit."""
    from tokenmill.train.replay import replay_loss

    overflows = {e["step"] for e in _events(overflowing) if e["kind"] == "overflow"}
    assert overflows & {5, 6, 9, 10}  # the rolled-forward steps include overflow skips
    for step in (7, 11):
        r = replay_loss(overflowing, step)
        assert r["matches_log"] and r["rolled_forward_steps"] == 2, r


def test_memory_model_counts_fp16_as_bf16_on_cuda() -> None:
    """fp16 and bf16 hold 2-byte activations and weight copies and take the same CUDA attention
    kernel; the scaler adds two scalars. So the planned bytes of every part are the same."""
    from tokenmill.model.config import ModelConfig
    from tokenmill.scaling.memory import estimate_train_memory

    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64, vocab_size=512)
    tc = TrainConfig(seq_len=64, micro_batch=4)
    fp16, bf16 = (estimate_train_memory(cfg, tc, d, device="cuda") for d in ("float16", "bfloat16"))
    assert fp16 == bf16 and fp16["activations"] < estimate_train_memory(cfg, tc, "float32", device="cuda")["activations"]
