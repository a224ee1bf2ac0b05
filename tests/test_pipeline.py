"""End to end: the real CLI in real processes on the tiny example config.

One uninterrupted run is shared by the tests; a second run is interrupted with a real SIGINT
during training and continued, and must reproduce the uninterrupted losses exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenmill.runs import STAGES, read_events
from tokenmill.summaries import summary_line

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "examples" / "tiny.yaml"


def tokenmill(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "tokenmill", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, **kw)


def finish(proc: subprocess.Popen, timeout: float = 420) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


# The report's TensorBoard scalars (imports TensorBoard, writes every event) are asserted by the
# report tests; the launches here that only check caching and resuming leave them out.
NO_TENSORBOARD = ("--set", "report.tensorboard='off'")


def losses(run_dir: Path) -> dict[int, float]:
    """Per-step loss; a step replayed after a resume must repeat the same value."""
    seen: dict[int, float] = {}
    for e in read_events(run_dir / "events.jsonl"):
        if e["kind"] == "train_step":
            assert seen.setdefault(e["step"], e["loss"]) == e["loss"], f"step {e['step']} replayed differently"
    return seen


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("runs")
    rc, out = finish(tokenmill("run", str(TINY), "--set", f"root={root}"))
    assert rc == 0, out
    return root / "tiny", out


def test_every_stage_writes_its_contract(tiny_pipeline):
    run_dir, out = tiny_pipeline
    assert out.strip().splitlines()[-1] == str((run_dir / "report.html").resolve())
    final = json.loads(max((run_dir / "eval").glob("*.json"), key=lambda p: int(p.stem)).read_text())
    assert f"held-out evaluation at step {final['step']}" in out  # the bits-per-byte table is printed
    assert all(f"{m['bpb']:.3f}" in out for m in final["buckets"].values())
    assert (run_dir / "config.yaml").exists()
    assert list((run_dir / "curated" / "code").glob("part-*.parquet"))
    assert json.loads((run_dir / "curated" / "_funnel.json").read_text())
    assert (run_dir / "tokenizer" / "tokenizer.json").exists()
    meta = json.loads((run_dir / "tokens" / "_meta.json").read_text())
    assert set(meta["buckets"]) == {"code", "reference"}
    assert (run_dir / "checkpoints" / "step_80" / "model.safetensors").exists()
    steps = [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == "train_step"]
    assert [e["step"] for e in steps] == list(range(1, 81))
    assert all({"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "t", "stage"} <= set(e) for e in steps)
    assert {e["stage"] for e in read_events(run_dir / "events.jsonl")} >= set(STAGES)


def test_stage_summaries_are_words_on_the_console_and_in_the_report(tiny_pipeline):
    """Each stage's ✓ line, and its row of the report's Stages table, word the summary the stage
    recorded (.stages/<stage>.json keeps the dict, for machines): no dict, list or quote."""
    import html

    run_dir, out = tiny_pipeline
    done = [line for line in out.splitlines() if line.startswith("✓ ")]
    assert [line.split()[1] for line in done] == list(STAGES), out
    for stage, line in zip(STAGES, done):
        summary = json.loads((run_dir / ".stages" / f"{stage}.json").read_text())["summary"]
        assert line == f"✓ {stage} {summary_line(stage, summary)}"
        assert not any(c in line for c in "{}[]'"), line
    curate = json.loads((run_dir / ".stages" / "curate.json").read_text())["summary"]
    assert f"{curate['docs_in']:,} documents in" in done[0] and f"{curate['docs_out']:,} kept" in done[0]
    page = (run_dir / "report.html").read_text()
    stages = page[page.index("<h2>Stages</h2>"):]
    stages = stages[: stages.index("</table>")]
    assert html.escape(done[0].split(" ", 2)[2]) in stages and "{" not in stages and "&#x27;" not in stages


def test_model_beats_the_unigram_baseline_on_every_bucket(tiny_pipeline):
    run_dir, _ = tiny_pipeline
    final = json.loads((run_dir / "eval" / "80.json").read_text())
    assert set(final["buckets"]) == {"code", "reference"}
    for bucket, m in final["buckets"].items():
        assert m["bpb"] < m["unigram_bpb"], (bucket, m)
    assert final["samples"] and (run_dir / "eval" / "40.json").exists()
    page = (run_dir / "report.html").read_text()
    assert "Model: evaluation at step 80" in page and "unigram bpb" in page


@pytest.mark.slow
def test_second_run_skips_unchanged_stages_and_reruns_changed_ones(tiny_pipeline, tmp_path):
    run_dir = tmp_path / "tiny"
    shutil.copytree(tiny_pipeline[0], run_dir)  # the shared run stays untouched for other tests
    root = ("--set", f"root={run_dir.parent}", *NO_TENSORBOARD)  # the report is not a cached stage either way
    rc, out = finish(tokenmill("run", str(TINY), *root))
    assert rc == 0, out
    assert sum(f"{s}: unchanged" in out for s in STAGES) == 5  # all but the report
    before = losses(run_dir)
    # A shorter budget changes the train config; a few steps show the restart as well as thirty would.
    shorter = ("--set", "train.max_steps=6", "--set", "train.eval_every=0")
    rc, out = finish(tokenmill("run", str(TINY), *root, *shorter))
    assert rc == 0, out
    assert all(f"{s}: unchanged" in out for s in ("curate", "tokenizer", "tokenize"))
    assert "moved checkpoints/ and eval/ aside to" in out  # the old run's checkpoints are kept, never deleted
    (aside,) = run_dir.glob("checkpoints.stale-*-config-changed")
    assert (aside / "step_80" / "model.safetensors").is_file() and (aside / "eval" / "80.json").is_file()
    after = [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == "train_step"][-6:]
    assert [e["step"] for e in after] == list(range(1, 7))
    assert before  # (the data order depends on the budget, so step 1 of a shorter run is another batch)

    rc, out = finish(tokenmill("run", str(TINY), *root, *shorter, "--force", "train"))
    assert rc == 0, out
    assert "forced" in out and "eval: unchanged" not in out
    again = [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == "train_step"][-6:]
    assert [(e["step"], e["loss"]) for e in again] == [(e["step"], e["loss"]) for e in after]  # deterministic


def upstream_of_training(shared: Path, run_dir: Path) -> None:
    """The shared run's curated data, tokenizer and token store with their finished records, and
    nothing of its training (no checkpoint, no event): training starts from step 0 here."""
    for part in ("curated", "tokenizer", "tokens"):
        shutil.copytree(shared / part, run_dir / part)
    (run_dir / ".stages").mkdir()
    for stage in ("curate", "tokenizer", "tokenize"):
        shutil.copy2(shared / ".stages" / f"{stage}.json", run_dir / ".stages")


@pytest.mark.slow
def test_ctrl_c_during_training_then_rerun_continues_exactly(tiny_pipeline, tmp_path):
    reference = losses(tiny_pipeline[0])
    upstream_of_training(tiny_pipeline[0], tmp_path / "tiny")  # what is interrupted is training
    proc = tokenmill("run", str(TINY), "--set", f"root={tmp_path}", *NO_TENSORBOARD)
    ckpt = tmp_path / "tiny" / "checkpoints" / "step_40"
    deadline = time.time() + 300
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    rc, out = finish(proc)
    assert rc == 130, out
    interrupted = [e for e in read_events(tmp_path / "tiny" / "events.jsonl") if e["kind"] == "interrupted"]
    assert interrupted and interrupted[0]["step"] < 80
    assert all(f"{s}: unchanged" in out for s in ("curate", "tokenizer", "tokenize"))
    assert not (tmp_path / "tiny" / "checkpoints" / "step_80").exists()
    rc, out = finish(tokenmill("run", str(TINY), "--set", f"root={tmp_path}", *NO_TENSORBOARD))
    assert rc == 0, out
    assert "continuing from" in out
    assert losses(tmp_path / "tiny") == reference
