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

from tokenmill.config import RunConfig
from tokenmill.runs import RunDir
from tokenmill.train.config import LossScaleConfig, TrainConfig
from tokenmill.train.errors import TrainError
from tokenmill.train.loss_scale import LossScaler
from tokenmill.train.trainer import run_train

from tests.conftest import write_tiny_store
from tests.train.test_host_reads import _events, _same_state

WORKER = Path(__file__).parent / "train_worker.py"
# a scale that overflows the tiny model's fp16 gradients for three steps, then grows back into
# overflow every few steps: the scaler's state changes all along the run
OVERFLOWING = {"init_scale": 2.0**24, "growth_interval": 2}


def _config(root: Path, name: str, mode: str = "immediate", **train: Any) -> RunDir:
    cfg = RunConfig.model_validate({
        "name": name, "root": str(root), "seed": 11,
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
        "train": {"seq_len": 32, "micro_batch": 4, "grad_accum": 2, "max_steps": 12, "lr": 0.01, "warmup_steps": 3,
                  "ckpt_every": 4, "keep_checkpoints": 10, "device": "cpu", "dtype": "float16", "threads": 1,
                  "log_every": 0, "eval_every": 0, "host_reads": mode, "peak_tflops": 1.0, **train},
    })  # fmt: skip
    run = RunDir.create(cfg, root / name)
    write_tiny_store(run.path / "tokens")
    return run


def _run(root: Path, name: str, mode: str = "immediate", **train: Any) -> RunDir:
    run = _config(root, name, mode, **train)
    run_train(run, progress=False)
    return run


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


def test_overflow_is_skipped_backed_off_and_deferred_decides_the_same(tmp_path: Path) -> None:
    """A 2^24 scale overflows the fp16 backward: each such step is an `overflow` skip (not a spike,
    no rollback), the next runs at half the scale, the scale regrows after 2 clean steps; the
    deferred mode (skip and scale update on the device) gives the same events and checkpoints."""
    kw = {"loss_scale": OVERFLOWING, "max_steps": 12}
    imm, dfr = _run(tmp_path, "imm", **kw), _run(tmp_path, "dfr", "deferred", **kw)
    ev = _events(imm)
    steps = _steps(imm)
    overflows = [e["step"] for e in ev if e["kind"] == "overflow"]
    assert overflows[:3] == [1, 2, 3] and len(overflows) >= 4 and not [e for e in ev if e["kind"] in ("spike", "skip", "rollback")]
    for s in overflows:
        assert steps[s]["action"] == "skip" and math.isfinite(steps[s]["loss"]) and not math.isfinite(steps[s]["grad_norm"])
        assert s == 12 or steps[s + 1]["loss_scale"] == steps[s]["loss_scale"] / 2
    assert [steps[s]["loss_scale"] for s in (1, 2, 3, 4)] == [2.0**24, 2.0**23, 2.0**22, 2.0**21]
    assert steps[12]["loss"] < steps[1]["loss"] - 0.5  # it trains between the overflows
    state = json.loads((imm.path / "checkpoints" / "step_12" / "state.json").read_text())
    assert state["guard"]["overflows"] == len(overflows) == state["loss_scale"]["overflows"]
    assert [e for e in ev if e["kind"] != "train_start"] == [e for e in _events(dfr) if e["kind"] != "train_start"]
    _same_state(imm, dfr)


def test_sigkilled_fp16_run_resumes_with_its_scale_exactly(tmp_path: Path) -> None:
    """A real process SIGKILLed at step 7 (faults.kill), resumed from step 4's checkpoint: every
    step's loss, norm and scale, the overflow steps after the resume and the final weights, optimizer
    state and scaler state are those of the uninterrupted run, byte for byte."""
    kw = {"loss_scale": OVERFLOWING}
    reference = _run(tmp_path, "ref", **kw)
    killed = _config(tmp_path, "killed", faults={"kill": [7, 0]}, **kw)
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
    with pytest.raises(TrainError, match="fp16 loss scale collapsed: 3 overflowing steps in a row up to step 5 with the scale at its floor"):
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

