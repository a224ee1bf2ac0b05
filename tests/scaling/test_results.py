"""Sweep results files: valid records round-trip; a bad record stops loading with an error that
names the file, the record and the field."""

import json

import pytest

from tokenmill.errors import UserError
from tokenmill.scaling.results import (
    RunResult,
    ScalingResultsError,
    holdout_runs,
    load_results,
    parse_results,
    sweep_runs,
)


def record(**over):
    base = {"name": "n1-c1", "params": 1000, "params_total": 1500, "tokens": 20000, "flops": 1.2e8,
            "budget": 1e8, "loss": 3.5, "role": "sweep"}
    base.update(over)
    return base


def write(tmp_path, runs):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": runs}))
    return path


def test_records_round_trip_and_extra_keys_are_allowed(tmp_path):
    runs = [record(), record(name="big", budget=None, role="holdout", lr=3e-4)]
    loaded = load_results(write(tmp_path, runs))
    assert loaded[0] == RunResult("n1-c1", 1000, 1500, 20000, 1.2e8, 1e8, 3.5, "sweep")
    assert loaded[1].budget is None and loaded[1].role == "holdout"
    assert [r.name for r in sweep_runs(loaded)] == ["n1-c1"]
    assert [r.name for r in holdout_runs(loaded)] == ["big"]
    assert parse_results([r.to_dict() for r in loaded]) == loaded


@pytest.mark.parametrize("bad, message", [
    ({"loss": None, "drop": "loss"}, "missing field(s) 'loss'"),
    ({"loss": 0.0}, "'loss' must be a positive finite number"),
    ({"loss": -1.0}, "'loss' must be a positive finite number"),
    ({"loss": float("nan")}, "'loss' must be a positive finite number"),
    ({"params": 10.5}, "'params' must be a positive integer"),
    ({"tokens": 0}, "'tokens' must be a positive integer"),
    ({"flops": "1e9"}, "'flops' must be a positive finite number"),
    ({"budget": -5}, "'budget' must be a positive finite number"),
    ({"role": "train"}, "'role' must be one of sweep, holdout"),
    ({"params": True}, "'params' must be a positive integer"),
])
def test_bad_record_names_the_file_the_record_and_the_field(tmp_path, bad, message):
    bad = dict(bad)
    drop = bad.pop("drop", None)
    broken = record(name="second", **bad)
    if drop:
        del broken[drop]
    path = write(tmp_path, [record(), broken])
    with pytest.raises(ScalingResultsError) as info:
        load_results(path)
    text = str(info.value)
    assert str(path) in text and "record 1 ('second')" in text and message in text


def test_duplicate_names_and_non_objects_are_rejected(tmp_path):
    with pytest.raises(ScalingResultsError, match=r"record 1 \('n1-c1'\): duplicate run name"):
        load_results(write(tmp_path, [record(), record()]))
    with pytest.raises(ScalingResultsError, match="record 0: a run must be an object"):
        load_results(write(tmp_path, [[1, 2]]))


def test_unreadable_files_are_user_errors(tmp_path):
    with pytest.raises(ScalingResultsError, match="no such results file"):
        load_results(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ScalingResultsError, match="not valid JSON"):
        load_results(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ScalingResultsError, match="'runs' list"):
        load_results(tmp_path / "list.json")
    assert issubclass(ScalingResultsError, UserError)
