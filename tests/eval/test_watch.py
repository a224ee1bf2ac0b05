"""Evaluation tiers: `tokenmill eval --watch RUN` as a real second process beside a real trainer,
the trainer's cheap tier, and the watcher's handling of pruned and already-scored checkpoints."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.adversarial.conftest import assert_clean_error, run_cli
from tests.conftest import write_tiny_store
from tokenmill.config import RunConfig, load_config
from tokenmill.eval.config import EvalConfig
from tokenmill.eval.evaluate import run_eval
from tokenmill.eval.watch import TrainEnd, Watcher, finished_step, is_due, watch_path
from tokenmill.report.run_files import watch_history
from tokenmill.runs import RunDir
from tokenmill.train.checkpoint import list_checkpoints

REPO = Path(__file__).resolve().parents[2]
TRAIN = {"seq_len": 32, "micro_batch": 8, "grad_accum": 1, "max_steps": 24, "lr": 0.01, "warmup_steps": 3,
         "ckpt_every": 4, "keep_checkpoints": 20, "device": "cpu", "dtype": "float32", "threads": 1,
         "log_every": 0, "eval_every": 0}
TIERS = {"cheap": {"every_steps": 6}, "expensive": {"poll_seconds": 0.1}}


def _run(path: Path, **train) -> RunDir:
    cfg = RunConfig.model_validate({
        "name": "tiny", "root": str(path.parent), "seed": 11,
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
        "train": {**TRAIN, **train}, "eval": {"tiers": TIERS, "memorization_docs": 4, "max_docs": 8},
    })
    run = RunDir.create(cfg, path)
    write_tiny_store(run.path / "tokens")
    run.mark_done("tokenize")
    return run


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _tokenmill(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tokenmill", *args], env=_env(), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("source", "device", "checkpoint")}


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunDir, str, float]:
    """A trainer and a watcher started together as real processes; the watcher's output and its
    seconds past the trainer's end."""
    run = _run(tmp_path_factory.mktemp("watch") / "tiny")
    watcher = _tokenmill("eval", "--watch", str(run.path), "--device", "cpu")
    # the trainer rewrites config.yaml with its --set when it starts, after the watcher read it
    trainer = _tokenmill("train", str(run.path / "config.yaml"), "--run-dir", str(run.path),
                         "--set", "eval.tiers.expensive.every_checkpoints=2")
    train_out, _ = trainer.communicate(timeout=120)
    ended = time.monotonic()
    assert trainer.returncode == 0, train_out
    watch_out, _ = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, watch_out
    return run, watch_out, time.monotonic() - ended


@pytest.mark.slow
def test_watcher_scores_every_due_checkpoint_once_and_exits_after_the_run(watched):
    run, out, after = watched
    steps = [s for s, _ in list_checkpoints(run.sub("checkpoints"))]
    assert steps == [4, 8, 12, 16, 20, 24]
    assert [r["step"] for r in watch_history(run.path)] == [8, 16, 24]  # every 2nd checkpoint (ckpt_every 4), and the last
    assert sorted(p.name for p in run.sub("eval", "watch").iterdir()) == ["step_000008.json", "step_000016.json",
                                                                         "step_000024.json"]
    for step in (8, 16, 24):
        assert out.count(f"step {step}: scored") == 1, out
    assert finished_step(run) == 24 and after < 30
    assert "✓ watch training ended at step 24; checkpoints scored: 8, 16, 24" in out  # a line, not a dict
    # the trainer ran the cheap tier only, every 6 steps (not train.eval_every = 0: only the end)
    cheap = sorted(int(p.stem) for p in run.sub("eval").glob("*.json"))
    assert cheap == [6, 12, 18, 24]
    assert "memorization" not in json.loads(run.sub("eval", "12.json").read_text())


def test_watcher_results_equal_tokenmill_eval_of_the_same_checkpoint(watched, tmp_path):
    run, _, _ = watched
    run = RunDir(config=load_config(run.sub("config.yaml")), path=run.path)
    copy = RunDir(config=run.config, path=tmp_path / "copy")  # `eval --checkpoint` writes eval/<step>.json: not in the run
    shutil.copytree(run.path, copy.path)
    res = run_cli("eval", str(copy.path / "config.yaml"), "--run-dir", str(copy.path), "--checkpoint",
                  str(copy.path / "checkpoints" / "step_24"), env=_env())
    assert res.returncode == 0, res.stderr
    assert "held-out evaluation at step 24" in res.stderr and "{" not in res.stderr  # run's table, not a dict
    cli = json.loads(copy.sub("eval", "24.json").read_text())
    watched_24 = json.loads(watch_path(run, 24).read_text())
    assert watched_24["source"] == "watch" and watched_24["buckets"]
    assert _comparable(watched_24) == _comparable(cli)
    run_eval(copy, copy.path / "checkpoints" / "step_8")  # the same scorer in this process, for an earlier one
    assert _comparable(json.loads(watch_path(run, 8).read_text())) == _comparable(json.loads(copy.sub("eval", "8.json").read_text()))


def test_a_restarted_watcher_skips_scored_checkpoints_and_a_pruned_one_costs_one_line(watched, tmp_path):
    run, _, _ = watched
    copy = RunDir(config=run.config, path=tmp_path / "copy")
    shutil.copytree(run.path, copy.path)
    watch_path(copy, 16).unlink()
    before = {p.name: p.stat().st_mtime_ns for p in copy.sub("eval", "watch").iterdir()}
    lines: list[str] = []
    w = Watcher(copy, __import__("torch").device("cpu"), lines.append)
    shutil.rmtree(copy.sub("checkpoints", "step_16"))  # retention deleted it while the watcher waited
    w.score(16, copy.sub("checkpoints", "step_16"))
    assert w.skipped == [16] and len(lines) == 1 and "retention" in lines[0]
    w.handled.add(16)
    assert w.run_until_done()["scored"] == []  # the others were scored by the first watcher
    assert {p.name: p.stat().st_mtime_ns for p in copy.sub("eval", "watch").iterdir()} == before


def test_due_rule_and_in_training_cadence():
    assert [s for s in range(1, 25) if is_due(s, 8, final=None)] == [8, 16, 24]
    assert [s for s in range(1, 25) if is_due(s, 8, final=23)] == [8, 16, 23, 24]
    assert [s for s in range(1, 25) if is_due(s, 0, final=20)] == [20]
    assert EvalConfig().in_training_every(50) == 50  # tiers absent: train.eval_every, as before
    assert EvalConfig.model_validate({"tiers": {}}).in_training_every(50) == 50
    assert EvalConfig.model_validate({"tiers": {"cheap": {"every_steps": 7}}}).in_training_every(50) == 7


def test_watch_of_a_directory_that_is_not_a_run_is_one_line(tmp_path):
    assert_clean_error(run_cli("eval", "--watch", str(tmp_path)), "not a run directory")


def test_the_report_joins_the_watchers_results_on_the_timeline(watched):
    from tokenmill.report.build import render

    run, _, _ = watched
    page = render(run)
    assert "held-out (watcher): a" in page and "held-out: a" in page  # both on the loss panel
    assert "Scored by the watcher" in page and "3 checkpoint(s) scored by `tokenmill eval --watch`" in page


def test_task_lines_keep_in_training_and_watcher_scores_apart():
    from tokenmill.report.timeline import task_lines

    evals = [{"step": 10, "tasks": [{"name": "arc", "acc": 0.25}]}, {"step": 20, "tasks": [{"name": "arc", "acc": 0.5}]}]
    watched = [{"step": 20, "tasks": [{"name": "arc", "acc": 0.5}, {"name": "gsm", "acc": 0.0}]}]
    assert task_lines(evals, watched) == {"arc": ([10, 20], [0.25, 0.5]), "arc (watcher)": ([20], [0.5]),
                                          "gsm (watcher)": ([20], [0.0])}


def test_train_end_reads_only_new_lines_and_waits_for_a_torn_one(tmp_path):
    """The follower's answer after every append equals a fresh read of the whole log, a line being
    written counts only once it ends, and a rewritten (shorter) log is read again from the start."""
    log = tmp_path / "events.jsonl"
    follow = TrainEnd(log)
    assert follow() is None  # no log yet

    def line(kind: str, step: int = 0) -> str:
        return json.dumps({"stage": "train", "kind": kind, "step": step}) + "\n"

    def whole() -> int | None:
        return TrainEnd(log)()

    log.write_text(line("stage_start") + line("train_step", 1))
    assert follow() is None is whole()
    with log.open("a") as fh:
        fh.write(line("train_done", 8)[:-5])  # torn: the trainer is mid-write
    assert follow() is None and follow.offset < log.stat().st_size
    with log.open("a") as fh:
        fh.write(line("train_done", 8)[-5:])
    assert follow() == 8 == whole()
    with log.open("a") as fh:
        fh.write(line("stage_start"))  # resumed
    assert follow() is None is whole()
    log.write_text(line("train_done", 3))  # rewritten shorter
    assert follow() == 3 == whole()


def test_train_end_skips_lines_that_are_not_event_objects(tmp_path):
    """A line 100,000 levels deep (a RecursionError for Python's json), bare values and bytes that
    are not UTF-8 are skipped; the train_done after them still ends the run."""
    log = tmp_path / "events.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    log.write_bytes(f"{deep}\n[1,2,3]\nnull\nInfinity\n".encode() + b"\xff\xfe\n")
    follow = TrainEnd(log)
    assert follow() is None and follow.offset == log.stat().st_size
    with log.open("a") as fh:
        fh.write(json.dumps({"stage": "train", "kind": "train_done", "step": 5}) + "\n")
    assert follow() == 5 == TrainEnd(log)()
