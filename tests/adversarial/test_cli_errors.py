"""Errors, not tracebacks: the real `tokenmill` process, given data, paths and ids that hold rich
markup (`[/]`, `[red]`), prints them as they are; a bad config value is refused in one line naming
the field before any stage runs (nothing curated); no hint to resume where nothing resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.adversarial.conftest import CliResult, assert_clean_error, run_cli, tree_snapshot

MARKUP_IDS = ["[/]doc-0", "[red]doc-1[/red]", "plain [/] [bold]", "[link=x]doc-3"]
RESUME_WORDS = ("--resume", "again", "continue")


def _texts(n: int) -> list[str]:
    import pydoc_data.topics as topics

    return [topics.topics[k] for k in sorted(topics.topics) if len(topics.topics[k]) > 2000][:n]


def _source(dirpath: Path, ids: list[str]) -> Path:
    src = dirpath / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t, "url": f"https://u.example/[/]{k}"}) + "\n"
                           for k, (i, t) in enumerate(zip(ids, _texts(len(ids))))))
    return src


def _run_config(workdir: Path, src: Path, root: Path) -> Path:
    cfg = workdir / "run.yaml"
    cfg.write_text(f"""name: "m[red]x"
root: {json.dumps(str(root))}
curate: {{sources: [{{path: {json.dumps(str(src))}, bucket: prose}}], steps: [normalize], workers: 1}}
tokenizer: {{vocab_size: 400}}
tokenize: {{val_fraction: 0.1, min_val_docs: 1}}
model: {{d_model: 32, n_layers: 1, n_heads: 2, max_seq_len: 64}}
train: {{seq_len: 64, micro_batch: 2, grad_accum: 1, max_steps: 2, ckpt_every: 1, warmup_steps: 0,
         threads: 1, eval_every: 0, log_every: 0, compile: false, dtype: float32}}
""")
    return cfg


def _no_resume_hint(result: CliResult) -> None:
    text = result.stderr + result.stdout
    assert not any(w in text for w in RESUME_WORDS), text


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run whose path and document ids hold markup: curated, tokenized, trained 2 steps."""
    from tokenmill.config import load_config
    from tokenmill.data.curate import run_curate
    from tokenmill.runs import RunDir
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize
    from tokenmill.train.trainer import run_train

    base = tmp_path_factory.mktemp("markup") / "[/]runs"
    base.mkdir(parents=True)  # "[/]" is two path parts: "[" and "]runs"
    ids = MARKUP_IDS * 4
    ids = [f"{i} #{k}" for k, i in enumerate(ids)]
    run = RunDir.create(load_config(_run_config(base, _source(base, ids), base)))
    run_curate(run, progress=False)
    run_tokenizer(run)
    run_tokenize(run)
    run_train(run, progress=False)
    return run.path


@pytest.mark.slow
def test_replay_prints_ids_and_paths_with_markup_as_they_are(trained: Path):
    listed = run_cli("replay", trained, "--step", "2")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-2000:]
    shown = [i for i in (f"{m} #{k}" for k, m in enumerate(MARKUP_IDS * 4)) if i in listed.stdout]
    assert shown, listed.stdout  # the batch's ids, brackets and all (none read as a style)
    assert f"loss recomputed from {trained / 'checkpoints' / 'step_1'}" in listed.stderr
    assert "identical: True" in listed.stderr


def test_replay_of_a_path_with_markup_that_is_no_run(workdir: Path):
    missing = workdir / "[/]x" / "[red]run"
    missing.mkdir(parents=True)
    result = run_cli("replay", missing, "--step", "1")
    assert_clean_error(result, f"{missing / 'config.yaml'}: not a run directory", max_lines=1)
    _no_resume_hint(result)


@pytest.mark.parametrize("content, expected", [
    (None, "config file not found"),
    ("train: {lr: [red]}\n", "train.lr: Input should be a valid number"),
    ("train:\n  lr: [1\n", "not valid YAML: line 3"),
    ("- [/]\n", "top level must be a mapping"),
])
def test_a_config_path_with_markup_is_printed_as_is(workdir: Path, content: str | None, expected: str):
    cfg = workdir / "[/]x" / "run.yaml"
    cfg.parent.mkdir(parents=True)
    if content is not None:
        cfg.write_text(content)
    result = run_cli("train", cfg, cwd=workdir)
    assert_clean_error(result, f"config error: {cfg}: ", expected, max_lines=1)
    assert result.returncode == 2
    _no_resume_hint(result)


@pytest.mark.parametrize("override, field, says", [
    ("train.micro_batch=0", "train.micro_batch", "must be ≥ 1 (got 0)"),
    ("train.seq_len=0", "train.seq_len", "must be ≥ 1 (got 0)"),
    ("curate.workers=0", "curate.workers", "must be ≥ 1 (got 0)"),
    ("curate.workers=-3", "curate.workers", "must be ≥ 1 (got -3)"),
    ("eval.max_docs=-1", "eval.max_docs", "must be ≥ 1 (got -1)"),
    ("train.ckpt_every=-1", "train.ckpt_every", "must be ≥ 0 (got -1)"),
    ("train.warmup_steps=-5", "train.warmup_steps", "must be ≥ 0 (got -5)"),
    ("train.lr=0", "train.lr", "must be > 0.0 (got 0)"),
    ("tokenize.shard_tokens=0", "tokenize.shard_tokens", "must be ≥ 1 (got 0)"),
    ("curate.langid.min_score=1.5", "curate.langid.min_score", "must be ≤ 1.0 (got 1.5)"),
    ("mixture.weights={prose: -1}", "mixture.weights.prose", "must be ≥ 0.0 (got -1)"),
    ("model.n_heads=3", "model.d_model=32 is not divisible by model.n_heads=3", ""),
    ("train.seq_len=128", "train.seq_len=128 exceeds model.max_seq_len=64", ""),
    ("tokenizer.vocab_size=100", "tokenizer.vocab_size=100: must be at least 292", ""),
])
def test_a_bad_value_is_refused_before_any_stage_runs(workdir: Path, override: str, field: str, says: str):
    src = _source(workdir, ["a", "b"])
    cfg = _run_config(workdir, src, workdir / "runs")
    before = tree_snapshot(workdir)
    result = run_cli("run", cfg, "--set", override, cwd=workdir)
    # a value given with --set is blamed on the command line; a clash between fields on the file they meet in
    blamed = f"config error: --set {override}:" if says else f"config error: {cfg}: {field}"
    assert_clean_error(result, blamed, says, max_lines=1)
    assert result.returncode == 2 and "▶" not in result.stderr + result.stdout  # no stage started
    assert tree_snapshot(workdir) == before and not (workdir / "runs").exists()  # nothing curated
    _no_resume_hint(result)


def test_a_user_path_that_is_a_directory_is_one_line(workdir: Path):
    labelled = workdir / "[/]labelled.jsonl"
    labelled.mkdir(parents=True)
    result = run_cli("curate-eval", "pii", labelled, cwd=workdir)
    assert_clean_error(result, str(labelled), max_lines=1)
    _no_resume_hint(result)


def test_a_config_that_is_a_directory_is_one_line(workdir: Path):
    folder = workdir / "[red]configs"
    folder.mkdir()
    for command in (["tokenize"], ["tokenizer", "train"], ["run"]):
        result = run_cli(*command, folder, cwd=workdir)
        assert_clean_error(result, f"config error: {folder}: is a directory", max_lines=1)


def test_the_resume_hint_only_where_the_work_resumes(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    """_guard after Ctrl-C: the trainer's interrupt (a checkpoint saved) gets the command's
    checkpoint hint; a bare Ctrl-C gets the resume hint only from a command that resumes."""
    import typer

    from tokenmill.cli import RESUME_TRAIN, _guard, hint_text
    from tokenmill.train.trainer import TrainingInterrupted, TrainingPreempted

    def raising(exc: BaseException):
        def fn() -> None:
            raise exc
        return fn

    ckpt = tmp_path / "[/]run" / "checkpoints" / "step_7"
    cases = [(TrainingPreempted(7, ckpt), {"checkpoint_hint": RESUME_TRAIN}, 75, RESUME_TRAIN),
             (TrainingInterrupted(7, ckpt), {}, 130, None),
             (KeyboardInterrupt(), {"checkpoint_hint": RESUME_TRAIN}, 130, None),
             (KeyboardInterrupt(), {"resume_hint": "finished shards are not redone"}, 130,
              "finished shards are not redone")]
    for exc, hints, code, hint in cases:
        with pytest.raises(typer.Exit) as ended:
            _guard(raising(exc), **hints)
        err = capsys.readouterr().err
        assert ended.value.exit_code == code
        lines = err.strip().splitlines()
        assert len(lines) == (2 if hint else 1), err
        if isinstance(exc, TrainingInterrupted):
            assert str(ckpt) in lines[0]
        if hint:
            assert lines[1] == hint_text(hint) and "``" not in lines[1]
        else:
            assert not any(w in err for w in RESUME_WORDS), err
