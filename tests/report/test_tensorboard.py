import importlib.util
import json

import pytest

import tokenmill.report.tensorboard as tb
from tokenmill.config import load_config
from tokenmill.report.tensorboard import TensorBoardTail, eval_scalars, step_scalars, write_tensorboard
from tokenmill.runs import RunDir

# TensorBoard is an optional extra (in the test extra too, so CI runs these).
needs_tensorboard = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                                       reason="TensorBoard is not installed: pip install 'tokenmill[tensorboard]'")


def _run(tmp_path):
    return RunDir.create(load_config(None, [f"root={tmp_path}", "name=tb"]))


def _step(run, s, loss):
    run.events.write("train", "train_step", step=s, loss=loss, lr=1e-3 * s, grad_norm=0.5 + s,
                     grad_norms={"embed": 0.1 * s, "blocks.0": 0.2 * s}, tokens_per_s=1000.0 + s, mfu=0.25,
                     data_wait_s=0.01, ckpt_age_steps=s % 5, ckpt_age_s=2.0 * s, action="apply", phase="short")


def _eval(run, step, bpb):
    (run.path / "eval").mkdir(exist_ok=True)
    rec = {"step": step, "buckets": {"web": {"loss": 2 * bpb, "bpb": bpb, "unigram_bpb": 3.0}},
           "probes": {"python-docs": {"loss": 3.0, "bpb": bpb + 0.5, "docs": 2, "tokens": 10}},
           "tasks": [{"name": "arc-mini", "acc": 0.25 + step / 1000}]}
    (run.path / "eval" / f"{step}.json").write_text(json.dumps(rec))


def _read(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _same(points, expected):
    """TensorBoard stores float32: steps exactly, values to float32 precision."""
    assert [s for s, _ in points] == [s for s, _ in expected]
    assert [v for _, v in points] == pytest.approx([v for _, v in expected], rel=1e-6)
    return True


def test_step_and_eval_scalars_name_every_metric():
    ev = {"kind": "train_step", "step": 7, "loss": 2.5, "lr": 1e-3, "grad_norm": 1.0, "grad_norms": {"head": 0.3},
          "action": "apply", "mfu": None, "ckpt_age_steps": 3}
    tags = {t: (v, s) for t, v, s in step_scalars(ev)}
    assert tags == {"train/loss": (2.5, 7), "train/lr": (1e-3, 7), "train/grad_norm": (1.0, 7),
                    "grad_norm/head": (0.3, 7), "checkpoint/age_steps": (3.0, 7)}
    assert step_scalars({"kind": "checkpoint", "step": 7}) == []
    health = {"kind": "train_step", "step": 50, "bucket_loss": {"web": 3.0, "code": 2.0},
              "act_rms": [0.5, 0.7], "attn_logit_max": [4.0, None]}
    assert sorted(step_scalars(health)) == sorted([
        ("bucket_loss/code", 2.0, 50), ("bucket_loss/web", 3.0, 50), ("activations/rms/layers.0", 0.5, 50),
        ("activations/rms/layers.1", 0.7, 50), ("activations/attn_logit_max/layers.0", 4.0, 50)])
    rec = {"step": 20, "buckets": {"code": {"loss": 2.0, "bpb": 1.1}}, "probes": {"p": {"loss": 1.0, "bpb": 0.9}},
           "tasks": [{"name": "arc", "acc": 0.5, "acc_norm": 0.75}]}
    assert sorted(eval_scalars(rec)) == sorted([
        ("eval/code/loss", 2.0, 20), ("eval/code/bpb", 1.1, 20), ("probes/p/loss", 1.0, 20),
        ("probes/p/bpb", 0.9, 20), ("tasks/arc/acc", 0.5, 20), ("tasks/arc/acc_norm", 0.75, 20)])


@needs_tensorboard
def test_write_tensorboard_reads_back_the_run_and_is_idempotent(tmp_path):
    run = _run(tmp_path)
    for s in range(1, 11):
        _step(run, s, 5.0 - 0.1 * s)
    _step(run, 10, 3.75)  # step 10 replayed after a resume: the last record counts
    run.events.write("train", "checkpoint", step=10, path="x")
    _eval(run, 5, 2.0)
    _eval(run, 10, 1.5)
    logdir = write_tensorboard(run)
    assert logdir == run.path / "tensorboard"
    first = _read(logdir)
    assert _same(first["train/loss"], [(s, 5.0 - 0.1 * s) for s in range(1, 10)] + [(10, 3.75)])
    assert _same(first["grad_norm/blocks.0"], [(s, 0.2 * s) for s in range(1, 11)])
    assert first["perf/tokens_per_s"][-1] == (10, 1010.0)
    assert first["checkpoint/age_s"][2] == (3, 6.0)
    assert first["eval/web/bpb"] == [(5, 2.0), (10, 1.5)]
    assert first["probes/python-docs/bpb"] == [(5, 2.5), (10, 2.0)]
    assert _same(first["tasks/arc-mini/acc"], [(5, 0.255), (10, 0.26)])
    assert write_tensorboard(run) == logdir
    assert _read(logdir) == first  # a rewrite replaces, never duplicates
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1


@needs_tensorboard
def test_tail_writes_only_what_is_new_and_waits_for_whole_lines(tmp_path):
    run = _run(tmp_path)
    tail = TensorBoardTail(run, tmp_path / "live")
    assert tail.update() == 0  # no events.jsonl yet
    _step(run, 1, 4.0)
    per_step = len(step_scalars(run.events.read()[-1]))
    assert tail.update() == per_step
    with open(run.path / "events.jsonl", "a") as fh:  # a line still being written
        fh.write('{"t": 1.0, "stage": "train", "kind": "train_step", "step": 2, "loss": 3.5')
    assert tail.update() == 0
    with open(run.path / "events.jsonl", "a") as fh:
        fh.write(', "lr": 0.002}\n')
    _eval(run, 2, 1.25)
    assert tail.update() == 2 + 5  # loss and lr of step 2; the eval record: 2 bucket + 2 probe + 1 task
    assert tail.update() == 0
    tail.close()
    scalars = _read(tmp_path / "live")
    assert scalars["train/loss"] == [(1, 4.0), (2, 3.5)]
    assert scalars["eval/web/loss"] == [(2, 2.5)]


def test_without_tensorboard_nothing_is_written_and_the_message_says_how_to_install(tmp_path, monkeypatch, capsys):
    run = _run(tmp_path)
    _step(run, 1, 4.0)
    monkeypatch.setattr(tb, "tensorboard_available", lambda: False)
    assert write_tensorboard(run) is None
    assert "pip install 'tokenmill[tensorboard]'" in capsys.readouterr().out
    assert not (run.path / "tensorboard").exists()
    with pytest.raises(RuntimeError, match="not installed"):
        TensorBoardTail(run)


def test_the_scalars_of_an_attempt_trained_over_are_left_out(tmp_path):
    from tests.report.test_attempts import two_attempts

    run = _run(tmp_path)
    # the first attempt reached step 24 at loss 9; the second is at step 10 so far
    events = [e for e in two_attempts() if not (e["kind"] == "train_step" and e["t"] > 111)]
    for e in events[:30]:
        if e["kind"] == "train_step":
            e["loss"] = 9.0
    run.sub("events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    losses = {step: v for (tag, v, step), _ in tb.run_scalars(run) if tag == "train/loss"}
    assert sorted(losses) == list(range(1, 11)) and 9.0 not in losses.values()
