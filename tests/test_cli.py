"""The CLI surface: help texts, config errors, overrides (fast, in-process)."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tokenmill.cli import app, demo_config_path
from tokenmill.config import load_config

runner = CliRunner()


def test_every_command_has_help():
    for cmd in (["--help"], ["curate", "--help"], ["tokenizer", "train", "--help"], ["tokenize", "--help"],
                ["train", "--help"], ["eval", "--help"], ["report", "--help"], ["run", "--help"], ["demo", "--help"]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 0, (cmd, res.output)
        assert "Usage" in res.output
    assert "--resume" in runner.invoke(app, ["train", "--help"]).output


def test_unknown_key_exits_2_with_its_path(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("train:\n  lrr: 1\n")
    res = runner.invoke(app, ["curate", "--config", str(cfg)])
    assert res.exit_code == 2 and "train.lrr" in res.output


def test_missing_input_is_a_clear_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "x", "root": str(tmp_path)}))
    res = runner.invoke(app, ["tokenize", str(cfg)])
    assert res.exit_code == 1 and "tokenizer" in res.output


def test_report_writes_resolved_config_with_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "x", "root": str(tmp_path)}))
    res = runner.invoke(app, ["report", str(cfg), "--set", "train.lr=0.123"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "x" / "report.html").exists()
    assert yaml.safe_load((tmp_path / "x" / "config.yaml").read_text())["train"]["lr"] == 0.123


def test_run_rejects_unknown_force_stage(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "x", "root": str(tmp_path)}))
    res = runner.invoke(app, ["run", str(cfg), "--force", "bake"])
    assert res.exit_code == 2 and "--force bake: unknown stage; stages are curate, tokenizer" in res.output
    typo = runner.invoke(app, ["run", str(cfg), "--force", "trian"])
    assert typo.exit_code == 2 and "--force trian: unknown stage (did you mean train?)" in typo.output


def test_packaged_demo_config_is_valid_and_every_example_loads():
    cfg = load_config(demo_config_path())
    assert cfg.name == "demo" and {s.bucket for s in cfg.curate.sources} == {"code", "web", "reference"}
    examples = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))
    assert len(examples) >= 3
    for path in examples:
        assert load_config(path).curate.sources, path


def test_train_refuses_to_overwrite_then_resumes(tiny_run):
    cfg = tiny_run.path / "config.yaml"  # the resolved config RunDir.create wrote
    args = ["train", str(cfg), "--set", "train.max_steps=4", "--set", "train.ckpt_every=2"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, args)
    assert again.exit_code == 1 and "--resume" in again.output and "Traceback" not in again.output
    assert f"`tokenmill train {cfg} --set train.max_steps=4 --set train.ckpt_every=2 --resume` continues" in again.output
    more = runner.invoke(app, [*args[:-2], "--set", "train.max_steps=6", "--resume"])
    assert more.exit_code == 1 and "train.max_steps: 4 -> 6" in more.output
    same = runner.invoke(app, [*args, "--resume"])
    assert same.exit_code == 0, same.output


def test_replay_command_lists_documents_and_loss(tiny_run):
    import json as _json

    from tokenmill.train.trainer import run_train

    run_train(tiny_run, progress=False)
    res = runner.invoke(app, ["replay", str(tiny_run.path), "--step", "12", "--json"])
    assert res.exit_code == 0, res.output
    out = _json.loads(res.output[res.output.index("{"):])
    assert out["documents"] and out["loss"]["matches_log"] is True
    bad = runner.invoke(app, ["replay", str(tiny_run.path), "--step", "999"])
    assert bad.exit_code == 1 and "1..30" in bad.output


def test_stop_signals_prints_the_verdict_json_and_too_few_evaluations(tmp_path):
    import json as _json

    from tests.report.stopping_synthetic import events, write_run
    from tokenmill.runs import RunDir

    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=s"]))
    write_run(run, *events([100, 200], lambda s: {"web": 3.0}, lambda s: 2.9, non_embedding=1000))
    few = runner.invoke(app, ["stop-signals", str(run.path)])
    assert few.exit_code == 0 and "needs ≥ 3 evaluations" in few.output, few.output
    write_run(run, [], [{"step": 300, "buckets": {"web": {"loss": 3.0, "tokens": 100}}}])  # flat, 300 tokens/param
    res = runner.invoke(app, ["stop-signals", str(run.path)])
    assert res.exit_code == 0 and "verdict: diminishing returns" in res.output and "per bucket" in res.output
    out = _json.loads(runner.invoke(app, ["stop-signals", str(run.path), "--json"]).output)
    assert out["verdict"] == "diminishing returns" and out["law"]["published"] is True
    missing = runner.invoke(app, ["stop-signals", str(run.path), "--law", str(tmp_path / "no.json")])
    assert missing.exit_code == 1 and "no such scaling-law file" in missing.output


def test_checkpoint_tools_have_help():
    for cmd in (["checkpoint", "--help"], ["checkpoint", "average", "--help"], ["verify-resume", "--help"]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 0 and "Usage" in res.output, (cmd, res.output)
    assert "--restarts" in runner.invoke(app, ["train", "--help"]).output
    assert "--last" in runner.invoke(app, ["checkpoint", "average", "--help"]).output
    bad = runner.invoke(app, ["train", "x.yaml", "--restarts", "-1"])
    assert bad.exit_code == 2


def test_restarts_with_a_config_error_starts_no_child(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("train:\n  lrr: 1\n")
    res = runner.invoke(app, ["train", str(cfg), "--restarts", "2"])
    assert res.exit_code == 2 and "train.lrr" in res.output


def test_quality_calibrate_and_curate_eval_quality_from_the_cli(tmp_path):
    import json

    from tests.data.test_curate_eval import EN_PAGE
    from tests.data.steps.test_quality import DE_PAGE

    ref = tmp_path / "ref.jsonl"
    rows = [{"text": f"{page}\nPage {i}.", "language": lang, "group": f"p{i}"}
            for i in range(10) for lang, page in (("en", EN_PAGE), ("de", DE_PAGE))]
    ref.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    out = tmp_path / "profiles.json"
    res = runner.invoke(app, ["quality-calibrate", str(ref), "--out", str(out)])
    assert res.exit_code == 0, res.output
    profiles = json.loads(out.read_text())["profiles"]
    assert set(profiles) == {"en", "de"} and profiles["de"]["documents"] == 10
    assert profiles["de"]["scale"]["word_len"] > 1  # German words are longer than English ones
    res = runner.invoke(app, ["curate-eval", "quality", str(ref), "--set",
                              f"curate.quality.language_profiles={out}", "--set", "curate.min_chars=10"])
    assert res.exit_code == 0, res.output
    result = json.loads(res.output)
    assert result["by_language"]["de"]["keep_rate"] == result["by_language"]["en"]["keep_rate"] == 1.0
    assert result["agreement"] == 1.0
    res = runner.invoke(app, ["quality-calibrate", str(tmp_path / "nope.jsonl"), "--out", str(out)])
    assert res.exit_code != 0 and "nope.jsonl" in res.output


def test_train_continues_another_runs_model_from_the_cli(tiny_run):
    from tokenmill.runs import RunDir, read_events
    from tokenmill.train.trainer import run_train

    run_train(tiny_run, progress=False)
    cont = tiny_run.path.parent / "cont"
    RunDir.create(tiny_run.config, cont)  # tokenmill makes the run directory: a folder it did not make is refused
    (cont / "tokens").symlink_to(tiny_run.path / "tokens")
    cfg = tiny_run.path / "config.yaml"
    args = ["train", str(cfg), "--set", "name=cont", "--set", f"train.init_from={tiny_run.path / 'checkpoints'}",
            "--set", "train.max_steps=3"]
    misfit = runner.invoke(app, [*args, "--set", "model.d_model=64"])
    assert misfit.exit_code == 1 and "do not fit this run's model" in misfit.output and "Traceback" not in misfit.output
    ok = runner.invoke(app, args)
    assert ok.exit_code == 0, ok.output
    start = next(e for e in read_events(cont / "events.jsonl") if e["kind"] == "train_start")
    assert start["init_from"] == str((tiny_run.path / "checkpoints").resolve())


def test_stop_signals_and_report_skip_and_count_event_lines_that_are_not_objects(tmp_path):
    """`[1,2,3]`, `null`, `Infinity` and a line 100,000 levels deep among good events: both commands
    succeed and say how many lines they left out; an Infinity inside an event is a value."""
    from tests.report.stopping_synthetic import events, write_run
    from tokenmill.runs import RunDir

    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=s"]))
    write_run(run, *events([100, 200, 300], lambda s: {"web": 4.0 - s / 1000}, lambda s: 3.0, non_embedding=1000))
    with open(run.sub("events.jsonl"), "a") as fh:
        fh.write("[1,2,3]\nnull\nInfinity\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    run.events.write("train", "train_step", step=301, loss=float("inf"), tokens=301_000)
    note = "events.jsonl: skipped 4 lines that are not JSON objects (first at line 302)"
    res = runner.invoke(app, ["stop-signals", str(run.path)])
    assert res.exit_code == 0 and "verdict:" in res.output and f"note: {note}" in " ".join(res.output.split()), res.output

    shutil.rmtree(run.sub("eval"))  # the synthetic evaluations hold only what stop-signals reads
    res = runner.invoke(app, ["report", str(run.sub("config.yaml")), "--run-dir", str(run.path)])
    assert res.exit_code == 0 and f"warning: {note}" in " ".join(res.output.split()), res.output


def _topics_config(tmp_path: Path) -> Path:
    """A run config whose one source is real text (the language reference topics), curated by two cheap steps."""
    import pydoc_data.topics as t

    docs = [t.topics[k] for k in sorted(t.topics) if len(t.topics[k]) > 1500][:6]
    (tmp_path / "topics.jsonl").write_text("".join(json.dumps({"id": f"t{i}", "text": d}) + "\n" for i, d in enumerate(docs)))
    cfg = tmp_path / "my corpus.yaml"  # a space: every hint must still paste as one argument
    cfg.write_text(yaml.safe_dump({
        "name": "mine", "root": str(tmp_path / "runs"),
        "curate": {"sources": [{"path": str(tmp_path / "topics.jsonl"), "bucket": "reference"}], "steps": ["normalize", "exact_dedup"],
                   "workers": 1},
    }))
    return cfg


def test_curate_takes_its_config_as_every_stage_does(tmp_path):
    """`tokenmill curate CONFIG` curates the config's sources into its run directory, as
    `curate --config CONFIG` does; a YAML file is never curated as text: with -o it is refused with
    the command that was meant, and a config given twice is refused."""
    cfg = _topics_config(tmp_path)
    res = runner.invoke(app, ["curate", str(cfg)])
    assert res.exit_code == 0, res.output
    assert list((tmp_path / "runs" / "mine" / "curated" / "reference").glob("part-*.parquet"))
    refused = runner.invoke(app, ["curate", str(cfg), "-o", str(tmp_path / "out")])
    assert refused.exit_code == 2 and not (tmp_path / "out").exists()
    assert f"did you mean `tokenmill curate '{cfg}'`" in refused.output
    assert f"`tokenmill curate --config '{cfg}' INPUT... -o {tmp_path / 'out'}`" in refused.output
    # a run config among several INPUTs is refused too; other YAML there is data (a code tree's, say)
    data_yaml = tmp_path / "ci.yml"
    data_yaml.write_text("jobs:\n  test: {runs-on: ubuntu}\n")
    among = runner.invoke(app, ["curate", str(tmp_path / "topics.jsonl"), str(cfg), "-o", str(tmp_path / "out")])
    assert among.exit_code == 2 and "did you mean `tokenmill curate" in among.output
    twice = runner.invoke(app, ["curate", str(cfg), "--config", str(cfg)])
    assert twice.exit_code == 2 and "two configs" in twice.output
    nothing = runner.invoke(app, ["curate"])
    assert nothing.exit_code == 2 and "`tokenmill curate CONFIG`" in nothing.output
    no_out = runner.invoke(app, ["curate", str(tmp_path / "topics.jsonl")])
    assert no_out.exit_code == 2 and "-o OUT is required" in no_out.output
    assert "Traceback" not in refused.output + among.output + twice.output + nothing.output + no_out.output


def test_set_errors_name_the_command_line_and_typos_get_the_nearest_key(tmp_path):
    cfg = tmp_path / "my.yaml"
    cfg.write_text("train:\n  max_stpes: 5\n")
    in_file = runner.invoke(app, ["tokenize", str(cfg)])
    assert in_file.exit_code == 2
    assert f"config error: {cfg}: train.max_stpes: unknown key (did you mean max_steps?)" in in_file.output
    cfg.write_text("train:\n  max_steps: 5\n")
    on_line = runner.invoke(app, ["tokenize", str(cfg), "--set", "train.max_stpes=10"])
    assert on_line.exit_code == 2
    assert "config error: --set train.max_stpes=10: unknown key (did you mean train.max_steps?)" in on_line.output
    assert str(cfg) not in on_line.output  # the file holds no such key: it is not blamed
    section = runner.invoke(app, ["tokenize", str(cfg), "--set", "trian.lr=1"])
    assert "--set trian.lr=1: trian: unknown key (did you mean train?)" in section.output
    far = runner.invoke(app, ["tokenize", str(cfg), "--set", "train.zzzzqq=1"])
    assert "--set train.zzzzqq=1: unknown key" in far.output and "did you mean" not in far.output


def test_hints_are_commands_to_paste_with_the_users_config(tmp_path):
    """An error raised deep in a stage says `tokenmill tokenizer train CONFIG`; the user reads it
    with their config path, their --set overrides and --run-dir, quoted for the shell."""
    cfg = tmp_path / "my corpus.yaml"
    cfg.write_text(yaml.safe_dump({"name": "x", "root": str(tmp_path)}))
    res = runner.invoke(app, ["tokenize", str(cfg), "--set", "train.lr=0.01", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 1
    assert (f"(run `tokenmill tokenizer train '{cfg}' --set train.lr=0.01 --run-dir {tmp_path / 'r'}` first)"
            in res.output), res.output


def test_interrupt_hints_repeat_the_command_that_was_run(capsys):
    """After Ctrl-C with a checkpoint saved, the hint is the command the user ran, with --resume."""
    import typer

    from tokenmill.cli import RESUME_TRAIN, _guard, this_command

    class Stopped(KeyboardInterrupt):
        checkpoint = "step_4"

    def stop():
        raise Stopped("interrupted at step 4")

    group = typer.main.get_command(app)
    with group.make_context("python -m tokenmill", ["train"]) as root:
        train = group.get_command(root, "train")
        args = ["my x.yaml", "-s", "train.lr=1", "--nproc", "2"]
        with train.make_context("train", args, parent=root):
            assert this_command() == "tokenmill train 'my x.yaml' --set train.lr=1 --nproc 2"
            with pytest.raises(typer.Exit):
                _guard(stop, checkpoint_hint=RESUME_TRAIN)
    err = capsys.readouterr().err
    assert "`tokenmill train 'my x.yaml' --set train.lr=1 --nproc 2 --resume` continues from it." in err
    assert this_command() == ""  # outside a command: nothing to repeat


def test_training_evaluations_print_a_line_per_bucket_and_eval_prints_the_table(tiny_run):
    """train.eval_every prints one line per bucket as training goes; `tokenmill eval` ends with the
    bits-per-byte table `run` prints, for the checkpoint it scored."""
    import re

    cfg = tiny_run.path / "config.yaml"
    sets = ["--set", "train.max_steps=4", "--set", "train.eval_every=2", "--set", "train.ckpt_every=2"]
    res = runner.invoke(app, ["train", str(cfg), *sets])
    assert res.exit_code == 0, res.output
    for step in (2, 4):
        for bucket in ("a", "b"):
            assert re.search(rf"eval step {step} · {bucket}: \d+\.\d{{3}}( ± \d+\.\d{{3}}| \(no interval[^)]*\))? bits/byte, \d+\.\d{{3}} of the unigram's", res.output)
    latest = runner.invoke(app, ["eval", str(cfg), *sets])
    assert latest.exit_code == 0, latest.output
    assert "held-out evaluation at step 4" in latest.output and re.search(r"\n│ a +│ \d+\.\d{3} ± \d+\.\d{3} │", latest.output)
    older = runner.invoke(app, ["eval", str(cfg), *sets, "--checkpoint", str(tiny_run.path / "checkpoints" / "step_2")])
    assert older.exit_code == 0 and "held-out evaluation at step 2" in older.output
    assert "{" not in older.output  # a table, never the summary dict it printed before
