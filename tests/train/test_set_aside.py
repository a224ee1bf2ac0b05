"""Moving checkpoints aside: renamed whole, with their evaluations, never replacing anything."""

from tokenmill.config import load_config
from tokenmill.ownership import read_marker
from tokenmill.runs import RunDir
from tokenmill.train.set_aside import set_aside, stale_name


def test_nothing_to_move_is_none(tmp_path):
    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=r"]))
    assert set_aside(run, "forced") is None
    assert sorted(p.name for p in run.path.iterdir()) == [".tokenmill", "config.yaml"]


def test_checkpoints_eval_and_a_users_file_move_whole(tmp_path):
    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=r"]))
    (run.sub("checkpoints", "step_4")).mkdir(parents=True)
    run.sub("checkpoints", "step_4", "model.safetensors").write_bytes(b"weights")
    run.sub("checkpoints", "notes.txt").write_text("mine")  # not tokenmill's: kept with the rest
    run.sub("eval").mkdir()
    run.sub("eval", "4.json").write_text("{}")
    where = set_aside(run, "config-changed")
    assert where is not None and where.parent == run.path and where.name.endswith("-config-changed")
    assert (where / "step_4" / "model.safetensors").read_bytes() == b"weights"
    assert (where / "notes.txt").read_text() == "mine" and (where / "eval" / "4.json").read_text() == "{}"
    assert (where / "config.yaml").read_text() == run.sub("config.yaml").read_text()
    assert not run.sub("checkpoints").exists() and not run.sub("eval").exists()
    assert set(read_marker(where)["outputs"]) == {"step_4", "notes.txt", "eval", "config.yaml"}


def test_a_taken_name_is_never_reused(tmp_path):
    first = stale_name(tmp_path, "forced", now=0.0)
    assert first.name == "checkpoints.stale-19700101T000000Z-forced"
    first.mkdir()  # an empty directory: a rename onto it would silently replace it
    second = stale_name(tmp_path, "forced", now=0.0)
    assert second.name == "checkpoints.stale-19700101T000000Z-forced-2" and not second.exists()
