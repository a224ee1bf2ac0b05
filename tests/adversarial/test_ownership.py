"""Ownership of output, as a hostile user meets it: tokenmill writes only into a directory that is new,
empty or one it made (a `.tokenmill` marker), replaces only what it wrote there, and refuses anything
else with one line before any work. Every case runs the real CLI on real files and compares a
snapshot of the whole case folder before and after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tests.adversarial.conftest import assert_clean_error, assert_untouched, run_cli, tree_snapshot

PROSE = ("Document {i} tells of a quiet town by the river, where the baker opens at dawn and the "
         "children walk to school past the old stone bridge while the market fills with voices.")


def _inputs(folder: Path, n: int = 6) -> Path:
    path = folder / "good.jsonl"
    path.write_text("".join(json.dumps({"text": PROSE.format(i=i)}) + "\n" for i in range(n)), encoding="utf-8")
    return path


def _foreign(folder: Path, files: dict[str, str]) -> None:
    """Files a user made, that tokenmill must neither delete nor change."""
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")


def _config(folder: Path, **values: object) -> Path:
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump({"root": str(folder / "runs"), "name": "r", **values}), encoding="utf-8")
    return path


def _curate(*args: str | Path, cwd: Path):  # type: ignore[no-untyped-def]
    return run_cli("curate", *args, "--steps", "normalize", "--workers", "1", cwd=cwd)


def test_curate_into_a_folder_of_other_files_is_refused(workdir: Path) -> None:
    good = _inputs(workdir)
    _foreign(workdir, {"out/notes.txt": "mine", "out/data/table.csv": "a,b\n1,2\n"})
    before = tree_snapshot(workdir)
    res = _curate(good, "-o", workdir / "out", cwd=workdir)
    assert_clean_error(res, str(workdir / "out"), "not made by tokenmill", "choose a new or empty folder")
    assert_untouched(before, tree_snapshot(workdir))


def test_curate_overwrite_never_replaces_a_users_files_shaped_like_its_output(workdir: Path) -> None:
    """A folder without a marker holding a user's `_funnel.json` and `web/part-00000.parquet` (the
    names curate writes) is refused even with --overwrite; every file stays byte-identical."""
    good = _inputs(workdir)
    _foreign(workdir, {"mine/_funnel.json": '{"my": "funnel"}\n', "mine/web/part-00000.parquet": "my table",
                       "mine/_rejected/part-00000-00000-a.parquet": "mine too"})
    before = tree_snapshot(workdir)
    res = _curate(good, "-o", workdir / "mine", "--overwrite", cwd=workdir)
    assert_clean_error(res, str(workdir / "mine"), "not made by tokenmill", "move your files out of this one")
    assert_untouched(before, tree_snapshot(workdir))


def test_curate_never_appends_to_a_users_file_named_like_its_event_log(workdir: Path) -> None:
    good = _inputs(workdir)
    _foreign(workdir, {".out.events.jsonl": "my notes, not events\n"})
    before = tree_snapshot(workdir)
    res = _curate(good, "-o", workdir / "out", cwd=workdir)
    assert_clean_error(res, str(workdir / ".out.events.jsonl"), "not a tokenmill event log")
    assert_untouched(before, tree_snapshot(workdir))
    (workdir / ".out.events.jsonl").unlink()  # without it, the same command works and its log is tokenmill's
    assert _curate(good, "-o", workdir / "out", cwd=workdir).returncode == 0
    assert _curate(good, "-o", workdir / "out", "--overwrite", cwd=workdir).returncode == 0  # its own log: appended


@pytest.mark.parametrize("out", ["pwd", "."])
def test_curate_into_the_folder_holding_its_input_is_refused(workdir: Path, out: str) -> None:
    good = _inputs(workdir)
    before = tree_snapshot(workdir)
    res = _curate(good.name, "-o", str(workdir) if out == "pwd" else out, cwd=workdir)
    assert_clean_error(res, "not made by tokenmill")
    assert_untouched(before, tree_snapshot(workdir))
    assert good.is_file()


@pytest.mark.parametrize("command", [("curate", "--config"), ("tokenizer", "train"), ("report",), ("run",)])
def test_a_config_pointing_at_a_foreign_folder_is_refused(workdir: Path, command: tuple[str, ...]) -> None:
    _foreign(workdir, {"runs/r/curated/a.csv": "x,y\n", "runs/r/tokens/shard.bin": "bytes", "runs/r/config.yaml": "mine: 1\n",
                       "runs/r/report.html": "<p>mine</p>", "runs/r/tokenizer/tokenizer.json": "{}"})
    cfg = _config(workdir, curate={"sources": [{"path": str(_inputs(workdir)), "bucket": "web"}]})
    before = tree_snapshot(workdir)
    res = run_cli(*command, cfg, cwd=workdir)
    assert_clean_error(res, str(workdir / "runs" / "r"), "not made by tokenmill")
    assert_untouched(before, tree_snapshot(workdir))


def test_run_dir_option_pointing_at_a_foreign_folder_is_refused(workdir: Path) -> None:
    _foreign(workdir, {"mine/report.html": "<p>mine</p>"})
    cfg = _config(workdir)
    before = tree_snapshot(workdir)
    res = run_cli("report", cfg, "--run-dir", workdir / "mine", cwd=workdir)
    assert_clean_error(res, str(workdir / "mine"), "not made by tokenmill")
    assert_untouched(before, tree_snapshot(workdir))


@pytest.mark.parametrize("name", ["../elsewhere", "ABSOLUTE", "a/b"])
def test_name_cannot_leave_root(workdir: Path, name: str) -> None:
    _foreign(workdir, {"elsewhere/config.yaml": "mine: 1\n"})
    cfg = _config(workdir, name=str(workdir / "elsewhere") if name == "ABSOLUTE" else name)
    before = tree_snapshot(workdir)
    res = run_cli("report", cfg, cwd=workdir)
    assert_clean_error(res, "name", "one folder name")
    assert_untouched(before, tree_snapshot(workdir))


def test_a_refused_stage_leaves_config_yaml_alone(workdir: Path) -> None:
    """A run tokenmill made; `tokenizer train` with a changed config fails its checks (nothing
    curated yet): the run's config.yaml still holds the config the run was made with."""
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir

    cfg = _config(workdir)
    RunDir.create(load_config(cfg))
    before = tree_snapshot(workdir)
    res = run_cli("tokenizer", "train", cfg, "--set", "tokenizer.vocab_size=999", cwd=workdir)
    assert_clean_error(res, "curated")
    assert_untouched(before, tree_snapshot(workdir))


def _model_checkpoint(run: Path) -> Path:
    """checkpoints/step_2 of a tiny random model in `run`."""
    from tokenmill.config import ModelConfig
    from tokenmill.model.transformer import Transformer
    from tokenmill.train.checkpoint import save_checkpoint

    model_cfg = ModelConfig(vocab_size=320, d_model=32, n_layers=1, n_heads=4, ffn_hidden=64, max_seq_len=32)
    model = Transformer(model_cfg, generator=torch.Generator().manual_seed(0))
    return save_checkpoint(run / "checkpoints", 2, model, None, {"model_config": model_cfg.model_dump(mode="json")})


def _checkpoint(folder: Path) -> Path:
    """A real (tiny, random) tokenmill run: tokenizer/tokenizer.json and checkpoints/step_2."""
    from tokenmill.config import TokenizerConfig
    from tokenmill.tokenizer.bpe import train_bpe

    run = folder / "runs" / "r"
    (run / "tokenizer").mkdir(parents=True)
    train_bpe([PROSE.format(i=i) for i in range(40)], TokenizerConfig(vocab_size=300, min_frequency=1)).save(
        str(run / "tokenizer" / "tokenizer.json"))
    return _model_checkpoint(run)


def test_export_never_touches_a_users_out_tmp(workdir: Path) -> None:
    ckpt = _checkpoint(workdir)
    _foreign(workdir, {"hf.tmp/weights.bin": "my own"})
    before = tree_snapshot(workdir)
    res = run_cli("export", "hf", ckpt, workdir / "hf", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert_untouched(before, tree_snapshot(workdir), created_under=("hf",))
    assert json.loads((workdir / "hf" / ".tokenmill").read_text())["stage"] == "export-hf"


@pytest.mark.slow
def test_export_overwrite_replaces_only_its_own_export(workdir: Path) -> None:
    """An earlier export is replaced with --overwrite (a file the user put beside it stays); a
    folder of other files is refused even with --overwrite."""
    from tokenmill.export.hf import export_hf

    ckpt = _checkpoint(workdir)
    export_hf(ckpt, workdir / "hf")
    _foreign(workdir, {"hf/README.md": "my notes", "theirs/config.json": "{}"})
    before = tree_snapshot(workdir)
    refused = run_cli("export", "hf", ckpt, workdir / "theirs", "--overwrite", cwd=workdir)
    assert_clean_error(refused, str(workdir / "theirs"), "not a tokenmill export")
    assert_untouched(before, tree_snapshot(workdir))
    res = run_cli("export", "hf", ckpt, workdir / "hf", "--overwrite", cwd=workdir)
    assert res.returncode == 0, res.stderr
    after = tree_snapshot(workdir)
    assert after["hf/README.md"] == before["hf/README.md"]
    assert_untouched({k: v for k, v in before.items() if not k.startswith("hf/")}, after, created_under=("hf",))


def test_checkpoint_average_never_touches_a_users_out_tmp_or_out_old(workdir: Path) -> None:
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir

    cfg = _config(workdir)
    ckpt = _model_checkpoint(RunDir.create(load_config(cfg)).path)
    _foreign(workdir, {"avg.tmp/keep.txt": "mine", "avg.old/keep.txt": "mine too"})
    before = tree_snapshot(workdir)
    res = run_cli("checkpoint", "average", cfg, "--last", "1", "-o", workdir / "avg", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert_untouched(before, tree_snapshot(workdir), created_under=("avg", "runs/r/events.jsonl"))
    assert ckpt.is_dir()


def test_curate_again_into_its_own_output_replaces_only_its_output(workdir: Path) -> None:
    """A second `curate -o DIR` into the DIR tokenmill made is refused without --overwrite (nothing
    changes); with it, the earlier output (a bucket the new run no longer writes too) is replaced and
    a file the user put there is kept."""
    good = _inputs(workdir)
    first = _curate(good, "-o", workdir / "out", "--bucket", "news", cwd=workdir)
    assert first.returncode == 0, first.stderr
    assert json.loads((workdir / "out" / ".tokenmill").read_text())["outputs"] == [
        "_decontamination.json", "_funnel.json", "_rejected", "news"]
    _foreign(workdir, {"out/NOTES.md": "mine"})
    before = tree_snapshot(workdir)
    refused = _curate(good, "-o", workdir / "out", "--bucket", "web", cwd=workdir)
    assert_clean_error(refused, str(workdir / "out"), "holds an earlier tokenmill curate output", "--overwrite")
    assert_untouched(before, tree_snapshot(workdir))
    second = _curate(good, "-o", workdir / "out", "--bucket", "web", "--overwrite", cwd=workdir)
    assert second.returncode == 0, second.stderr
    after = tree_snapshot(workdir)
    assert after["out/NOTES.md"] == before["out/NOTES.md"] and after["good.jsonl"] == before["good.jsonl"]
    assert "out/news" not in after and any(p.startswith("out/web/part-") for p in after)


def test_curate_overwrite_keeps_a_users_file_beside_its_output_and_refuses_a_clash(workdir: Path) -> None:
    """In a folder tokenmill made, --overwrite replaces only what its marker lists: a bucket name a
    user's folder took since is refused before any work, and nothing changes."""
    good = _inputs(workdir)
    assert _curate(good, "-o", workdir / "out", "--bucket", "news", cwd=workdir).returncode == 0
    _foreign(workdir, {"out/web/mine.txt": "mine"})
    before = tree_snapshot(workdir)
    clash = _curate(good, "-o", workdir / "out", "--overwrite", cwd=workdir)
    assert_clean_error(clash, str(workdir / "out" / "web"), "not written by tokenmill")
    assert_untouched(before, tree_snapshot(workdir))


def test_an_earlier_versions_curated_folder_in_a_run_dir_is_replaced(workdir: Path) -> None:
    """`curated/` without a marker is taken for old output only inside a run directory tokenmill
    made; there the stage reruns, replacing the entries shaped like curate output."""
    cfg = _config(workdir, curate={"sources": [{"path": str(_inputs(workdir)), "bucket": "web"}]})
    assert _curate("--config", cfg, cwd=workdir).returncode == 0
    curated = workdir / "runs" / "r" / "curated"
    (curated / ".tokenmill").unlink()  # as an earlier version left it
    (workdir / "runs" / "r" / ".stages").mkdir(exist_ok=True)
    for stage in (workdir / "runs" / "r" / ".stages").iterdir():
        stage.unlink()  # no cached stage: the stage runs again
    res = _curate("--config", cfg, cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert json.loads((curated / ".tokenmill").read_text())["stage"] == "curate"


def test_a_run_dir_is_reused_by_its_config(workdir: Path) -> None:
    """`curate --config` twice: the stage reruns in the run directory it made."""
    cfg = _config(workdir, curate={"sources": [{"path": str(_inputs(workdir)), "bucket": "web"}]})
    for _ in range(2):
        res = _curate("--config", cfg, cwd=workdir)
        assert res.returncode == 0, res.stderr
    assert json.loads((workdir / "runs" / "r" / "curated" / ".tokenmill").read_text())["stage"] == "curate"


def test_an_earlier_versions_run_dir_is_recognised(workdir: Path) -> None:
    """A run directory an earlier tokenmill made (`.stages/`, no marker) is still accepted, and marked."""
    legacy = workdir / "runs" / "old"
    (legacy / ".stages").mkdir(parents=True)
    (legacy / "config.yaml").write_text("name: old\n")
    res = run_cli("report", _config(workdir, name="old"), cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert (legacy / "report.html").is_file()
    assert json.loads((legacy / ".tokenmill").read_text())["stage"] == "run"


def test_quality_calibrate_never_replaces_a_users_file(workdir: Path) -> None:
    ref = workdir / "reference.jsonl"
    ref.write_text("".join(json.dumps({"text": PROSE.format(i=i), "language": "en"}) + "\n" for i in range(3)))
    _foreign(workdir, {"profiles.json": '{"mine": true}\n'})
    before = tree_snapshot(workdir)
    res = run_cli("quality-calibrate", ref, "-o", workdir / "profiles.json", cwd=workdir)
    assert_clean_error(res, str(workdir / "profiles.json"), "not a profile file tokenmill wrote")
    assert_untouched(before, tree_snapshot(workdir))


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["mine", "../mine"])
def test_an_experiment_directory_of_other_files_or_outside_root_is_refused(workdir: Path, name: str) -> None:
    """`scaling sweep` (like ablate, mixture optimize, source-value, lr-transfer) claims <root>/<name>
    before any run: a folder of the user's is refused, and so is a name that leaves root."""
    _foreign(workdir, {"mine/results.csv": "budget,loss\n1,2\n"})
    (workdir / "runs").mkdir()
    sweep = workdir / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": name, "root": str(workdir if name == "mine" else workdir / "runs"),
                                     "base": str(REPO / "examples" / "scaling" / "base.yaml"), "budgets": [1e12],
                                     "shapes": [{"d_model": 32, "n_layers": 2}, {"d_model": 48, "n_layers": 2}]}),
                     encoding="utf-8")
    before = tree_snapshot(workdir)
    res = run_cli("scaling", "sweep", sweep, cwd=workdir)
    assert_clean_error(res, "not made by tokenmill" if name == "mine" else "must be one folder name")
    assert_untouched(before, tree_snapshot(workdir))


def test_an_invalid_experiment_file_is_one_line_naming_the_field(workdir: Path) -> None:
    sweep = workdir / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": "base.yaml", "budgets": [1e12], "shapes": [{"d_model": 32}]}))
    res = run_cli("scaling", "sweep", sweep, cwd=workdir)
    assert_clean_error(res, f"{sweep}: invalid sweep config: shapes", max_lines=1)
