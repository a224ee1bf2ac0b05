"""`tokenmill plan --config` plans for the config's own machine: its device, its batch, its steps;
on a CPU the step time is measured from the trainer's own steps (scaling/plan_measure.py)."""

import json

import pytest
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.config import load_config
from tokenmill.scaling.plan import config_target
from tokenmill.scaling.plan_measure import TIMED_STEPS, WARMUP_STEPS, phase_geometry

DEMO = "src/tokenmill/configs/demo.yaml"


def test_the_demo_curriculum_is_timed_at_each_of_its_sequence_lengths():
    """demo.yaml: 80% of 300 steps at seq_len 128 (12 rows of the 6 × 256 micro-batch), then 256."""
    cfg = load_config(DEMO)
    assert phase_geometry(cfg, cfg.train) == [(128, 12, 240), (256, 6, 60)]


def test_the_target_is_the_configs_device_and_world_unless_a_flag_says_otherwise():
    cfg = load_config(DEMO, ["train.device=cpu"])
    device, devices, notes = config_target(cfg, None, None)
    assert (device, devices) == ("cpu", 1)
    assert any("train.device 'cpu'" in n for n in notes)
    assert config_target(cfg, "h100", 16)[:2] == ("h100", 16)
    assert config_target(None, None, None)[:2] == ("h100", 8)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_plan_times_the_configs_own_steps_on_a_cpu(tiny_run, cache):
    """tiny_run: cpu, 1 thread, 8 × 32 tokens × 2 micro-batches, 30 steps, a checkpoint every 10,
    one evaluation (at the end) on its own held-out tokens; no calibration: measured on the spot."""
    res = CliRunner().invoke(app, ["plan", "--config", str(tiny_run.path / "config.yaml"), "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert (plan["devices"], plan["device"]["name"]) == (1, "cpu")
    assert (plan["global_batch_tokens"], plan["steps"]) == (8 * 32 * 2, 30)
    m = plan["measured"]
    (phase,) = m["phases"]
    assert (phase["seq_len"], phase["rows"], phase["steps"]) == (32, 8, 30)
    assert len(phase["seconds"]) == WARMUP_STEPS + TIMED_STEPS and phase["median_s"] > 0
    assert (m["threads"], m["evals"], m["checkpoints"]) == (1, 1, 3)
    assert m["eval_seconds"] > 0 and "this run's held-out tokens" in m["eval_how"]
    assert 0 < plan["mfu"] == m["mfu"] <= 1
    assert plan["wall_clock_seconds"] == m["predicted_seconds"] >= 30 * phase["median_s"]
    assert any("measured just now" in a for a in plan["assumptions"])
    assert not (tiny_run.path / "checkpoints").exists()  # the timing ran elsewhere


def test_the_printout_names_the_measurement_and_the_calibrated_peak(tiny_run, cache):
    from tokenmill.scaling.calibrate import calibrate, write_calibration

    write_calibration(calibrate("cpu", threads=1, seconds=0.05, sizes=(128,)))
    res = CliRunner().invoke(app, ["plan", "--config", str(tiny_run.path / "config.yaml")])
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert f"measured {TIMED_STEPS} steps of this config's model after {WARMUP_STEPS} warm-up steps" in text
    assert "GFLOP/s" in text and "(`tokenmill calibrate`," in text and "measured just now" not in text
    assert "s/step measured × 30 steps" in text


def test_a_slow_model_is_timed_in_fewer_steps(tiny_run, cache, monkeypatch):
    """A step budget below one step: the trainer stops after its first step, which is then the
    measurement (no warm-up left to drop), and the printout says so."""
    from tokenmill.scaling import plan_measure

    monkeypatch.setattr(plan_measure, "BUDGET_S", 1e-6)
    m = plan_measure.measure_cpu_plan(load_config(tiny_run.path / "config.yaml"))
    (phase,) = m.phases
    assert len(phase.seconds) == 1 and phase.warmup == 0 and phase.median_s == phase.seconds[0] > 0
    assert "measured 1 step of this config's model after 0 warm-up steps" in m.lines()[0]
