"""MFU a user can trust: the peak says where it came from, a step that beats it raises it (one
event per raise), and no logged MFU exceeds 100%."""

from __future__ import annotations

import pytest
import torch

from tokenmill.config import RunConfig
from tokenmill.runs import RunDir, read_events
from tokenmill.scaling import calibrate as cal
from tokenmill.scaling.flops import QUICK_TIMINGS, Peak, peak_of
from tokenmill.train.mfu import MfuPeak
from tokenmill.train.trainer import run_train


@pytest.fixture()
def no_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path / "cache"))


def events(run: RunDir, kind: str) -> list[dict]:
    return [e for e in read_events(run.path / "events.jsonl") if e["kind"] == kind]


def test_the_peak_is_a_running_maximum_raised_once_per_beat():
    peak = MfuPeak.of(Peak(1e9, "measured", "quick"), world_size=2)
    assert peak.flops == 2e9  # the job's peak: every rank's
    achieved = [1e9, 4e9, 3e9, 4e9, 6e9, 0.5e9]
    out = [peak.mfu(a, step) for step, a in enumerate(achieved, start=1)]
    assert [m for m, _ in out] == [0.5, 1.0, 0.75, 1.0, 1.0, 0.5 / 6]
    raised = [r for _, r in out if r is not None]
    assert [(r["step"], r["old_peak"], r["new_peak"]) for r in raised] == [(2, 2e9, 4e9), (5, 4e9, 6e9)]
    assert raised[0]["old_source"] == "measured" and raised[1]["old_source"] == "raised"


def test_every_source_is_named(no_calibration):
    quick = peak_of("cpu", torch.float32)
    assert quick.kind == "measured" and quick.flops > 0
    assert f"best of {QUICK_TIMINGS}" in quick.origin and f"on {torch.get_num_threads()} threads" in quick.origin
    config = peak_of("cpu", torch.float32, configured_tflops=2.5)
    assert (config.flops, config.kind) == (2.5e12, "config") and "train.peak_tflops = 2.5" in config.origin
    entry = {"device": cal.device_name("cpu"), "device_type": "cpu", "threads": torch.get_num_threads(),
             "dtype": "float32", "peak_flops": 1.5e11, "date": "2030-01-02T03:04:05+00:00"}
    cal.write_calibration([entry])
    calibrated = peak_of("cpu", torch.float32)
    assert (calibrated.flops, calibrated.kind) == (1.5e11, "calibration")
    assert "tokenmill calibrate" in calibrated.origin and "2030-01-02" in calibrated.origin


def _run(tiny_run: RunDir, **train) -> RunDir:
    data = tiny_run.config.model_dump()
    data["train"].update(max_steps=8, ckpt_every=8, **train)
    return RunDir.create(RunConfig.model_validate(data), tiny_run.path)


def test_a_peak_below_what_steps_achieve_is_raised_and_mfu_never_exceeds_one(tiny_run, capsys):
    run = _run(tiny_run, peak_tflops=1e-9)  # 1 kFLOP/s: every machine's first step beats it
    run_train(run, progress=False)
    (start,) = events(run, "train_start")
    assert start["peak_source"] == "config" and "train.peak_tflops" in start["peak_origin"]
    steps, raised = events(run, "train_step"), events(run, "peak_raised")
    assert all(0 < s["mfu"] <= 1.0 for s in steps)
    # one event exactly at each step whose achieved FLOP/s beat the running peak, and only there
    peak, expected = start["peak_flops"], []
    for s in steps:
        achieved = start["flops_per_token"] * s["tokens_per_s"]
        if achieved > peak:
            expected.append((s["step"], peak, achieved))
            peak = achieved
            assert s["mfu"] == 1.0
    assert [(r["step"], r["old_peak"], r["new_peak"]) for r in raised] == expected
    assert raised and raised[0]["step"] == 1 and raised[0]["old_source"] == "config"
    err = capsys.readouterr().err
    assert "mfu against a peak of" in err and "peak raised" in err


def test_a_measured_peak_names_its_timings(tiny_run, no_calibration):
    run = _run(tiny_run)
    run_train(run, progress=False)
    (start,) = events(run, "train_start")
    assert start["peak_source"] == "measured" and f"best of {QUICK_TIMINGS}" in start["peak_origin"]
    assert all(0 < s["mfu"] <= 1.0 for s in events(run, "train_step"))
