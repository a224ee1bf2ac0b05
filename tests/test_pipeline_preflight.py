"""`run` and `train` check the whole config before anything of the run moves, and a changed config
never deletes checkpoints: a real tiny run (trained, evaluated, reported) and the real CLI, in process.

Every refusal must leave the run byte for byte as it was (checkpoints, evaluations, config.yaml,
stage records) and print one line; a valid change moves checkpoints/ and eval/ aside, intact."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.config import RunConfig
from tokenmill.ownership import read_marker
from tokenmill.pipeline import _inputs, run_pipeline
from tokenmill.runs import RunDir, read_events

runner = CliRunner()


def snapshot(run_dir: Path) -> dict[str, str]:
    """sha256 of every file of the run except the event log (which a refusal may not write to
    either, checked apart) and the report."""
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name not in ("report.html",) and "tensorboard" not in p.parts
    }


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory) -> RunDir:
    """A tiny run (the tiny_run store and model) with its data stages recorded as finished, then
    `run`: trained 8 steps (checkpoints step_4 and step_8), evaluated, reported. Read-only."""
    from tests.conftest import write_tiny_store

    cfg = RunConfig.model_validate({
        "name": "tiny", "root": str(tmp_path_factory.mktemp("runs")), "seed": 11,
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
        "train": {"seq_len": 32, "micro_batch": 8, "grad_accum": 2, "max_steps": 8, "lr": 0.01, "warmup_steps": 2,
                  "ckpt_every": 4, "device": "cpu", "threads": 1, "log_every": 4, "eval_every": 0},
        "eval": {"max_docs": 4, "num_samples": 0},
        "report": {"tensorboard": "off"},
    })  # fmt: skip
    run = RunDir.create(cfg)
    write_tiny_store(run.sub("tokens"))
    for stage in ("curate", "tokenizer", "tokenize"):
        run.mark_done(stage, _inputs(run, stage))
    run_pipeline(run)
    assert sorted(p.name for p in run.sub("checkpoints").iterdir() if p.name.startswith("step_")) == ["step_4", "step_8"]
    assert list(run.sub("eval").glob("*.json"))
    return run


@pytest.fixture()
def trained(trained_once: RunDir, tmp_path: Path) -> RunDir:
    """A copy of the trained run of this test's own."""
    shutil.copytree(trained_once.path, tmp_path / "tiny", symlinks=True)
    return RunDir(trained_once.config, tmp_path / "tiny")


def invoke(run: RunDir, *args: str, run_dir: Path | None = None):
    """`tokenmill COMMAND <the run's config.yaml> --run-dir RUN ARGS...`."""
    return runner.invoke(app, [args[0], str(run.path / "config.yaml"), "--run-dir", str(run_dir or run.path), *args[1:]])


def refused(run: RunDir, *args: str) -> str:
    """Run the command; it must fail in one line and leave the run exactly as it was."""
    before, events = snapshot(run.path), run.sub("events.jsonl").read_bytes()
    res = invoke(run, *args)
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert snapshot(run.path) == before
    assert run.sub("events.jsonl").read_bytes() == events  # no stage started
    assert not list(run.path.glob("checkpoints.stale-*"))
    return res.output.strip()


@pytest.mark.parametrize("command", [("run",), ("train",), ("train", "--resume")])
def test_a_typo_in_a_mixture_bucket_touches_nothing(trained, command):
    line = refused(trained, *command, "--set", "mixture.weights={book: 1, a: 1}")
    if command != ("train",):  # plain `train` is refused first for holding checkpoints (also without a change)
        assert "mixture.weights names bucket(s) ['book'] that are not in the token store" in line


def test_a_bad_init_from_touches_nothing(trained, tmp_path):
    line = refused(trained, "run", "--set", f"train.init_from={tmp_path / 'no-such-run' / 'checkpoints'}")
    assert line.endswith("no-such-run/checkpoints: not found")
    (tmp_path / "empty").mkdir()
    line = refused(trained, "run", "--set", f"train.init_from={tmp_path / 'empty'}")
    assert "neither a tokenmill checkpoint" in line


def test_a_missing_eval_task_file_and_a_curriculum_typo_touch_nothing(trained, tmp_path):
    missing = tmp_path / "quiz.jsonl"
    line = refused(trained, "run", "--set", f"eval.tasks=[{{name: quiz, path: {missing}, format: jsonl}}]")
    assert line == f"error: {missing}: eval.tasks 'quiz': no such file"
    phases = "mixture.phases=[{name: early, fraction: 0.5}, {name: late, fraction: 0.5, weights: {bk: 1}}]"
    line = refused(trained, "run", "--set", phases)
    assert "mixture.phases[1] ('late').weights names bucket(s) ['bk']" in line


def test_a_valid_change_moves_checkpoints_and_evaluations_aside_intact(trained):
    before = snapshot(trained.path)
    res = invoke(trained, "run", "--set", "train.lr=0.02")
    assert res.exit_code == 0, res.output
    (aside,) = trained.path.glob("checkpoints.stale-*-config-changed")
    assert f"config changed since step_8 (train.lr: 0.01 -> 0.02); moved checkpoints/ and eval/ aside to {aside}" in res.output
    moved = {k.replace("checkpoints/", "", 1) if k.startswith("checkpoints/") else k: v for k, v in before.items()}
    now = snapshot(aside)
    assert {k: v for k, v in moved.items() if k.startswith(("step_", "eval/"))} == {
        k: v for k, v in now.items() if k.startswith(("step_", "eval/"))
    }
    assert now["config.yaml"] == before["config.yaml"]  # the config they were trained under
    assert read_marker(aside)["stage"] == "stale-checkpoints"
    assert (trained.sub("checkpoints", "step_8") / "state.json").is_file()  # the new run trained
    events = [e for e in read_events(trained.sub("events.jsonl")) if e["kind"] == "checkpoints_set_aside"]
    assert events == [{**events[0], "path": str(aside), "reason": "config-changed"}]
    # the moved directory is still a checkpoints directory: a run can start from it
    res = invoke(trained, "train", "--set", f"train.init_from={aside}", run_dir=trained.path.parent / "cont")
    assert res.exit_code == 1 and "token store" in res.output  # got past init_from (the new run has no data)


def test_force_train_moves_aside_and_nothing_is_deleted(trained):
    before = snapshot(trained.path)
    res = invoke(trained, "run", "--force", "train")
    assert res.exit_code == 0, res.output
    (aside,) = trained.path.glob("checkpoints.stale-*-forced")
    assert f"forced (--force train); moved checkpoints/ and eval/ aside to {aside}" in res.output
    kept = {f"checkpoints/{k}" if k.startswith("step_") else k: v for k, v in snapshot(aside).items()}
    assert {k: v for k, v in before.items() if k.startswith(("checkpoints/", "eval/"))}.items() <= kept.items()


def test_an_unchanged_run_continues_and_moves_nothing(trained):
    res = invoke(trained, "run", "--set", "train.log_every=2")  # a knob that never restarts training
    assert res.exit_code == 0, res.output
    assert "moved" not in res.output and not list(trained.path.glob("checkpoints.stale-*"))
