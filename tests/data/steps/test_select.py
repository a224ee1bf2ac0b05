"""The select step: only the records an id list names are curated, by the record's own id or
its hash id; an unreadable list is one clear line; selecting a few records never trips the
removal-share stop."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.adversarial.conftest import assert_clean_error, run_cli
from tokenmill.config import CurateConfig
from tokenmill.data.document import Doc
from tokenmill.data.steps.select import Select, SelectError, read_id_list, record_id

TEXT = "The keeper of the lighthouse wrote down the weather every morning, and the ships read it. " * 4


def _doc(doc_id: str, meta_id: str | int | None) -> Doc:
    meta = json.dumps({"id": meta_id}) if meta_id is not None else None
    return Doc(id=doc_id, text=TEXT, source="s.jsonl", url="s.jsonl:1", bucket="web", license="", format="jsonl",
               metadata=meta)


def test_record_id_prefers_the_records_own_id():
    assert record_id(_doc("h" * 16, "page-7")) == "page-7"
    assert record_id(_doc("h" * 16, 42)) == "42"
    assert record_id(_doc("h" * 16, None)) == "h" * 16


def test_step_keeps_listed_ids_and_names_the_rule(tmp_path):
    (tmp_path / "ids.txt").write_text("page-1\n\n  page-3  \n")
    step = Select(CurateConfig(select={"ids": "ids.txt"}), base_dir=tmp_path)
    step.setup(tmp_path)
    assert step.process(_doc("x", "page-1")) is None and step.process(_doc("y", "page-3")) is None
    rej = step.process(_doc("z", "page-2"))
    assert rej is not None and (rej.step, rej.rule, rej.value) == ("select", "not_selected", "page-2")
    assert not Select(CurateConfig(), base_dir=tmp_path).enabled()


def test_jsonl_lists_and_their_errors(tmp_path):
    good = tmp_path / "ids.jsonl"
    good.write_text('{"id": "a"}\n{"id": 7}\n')
    assert read_id_list(good) == ["a", "7"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n{"name": "b"}\n')
    with pytest.raises(SelectError, match=r"bad.jsonl:2: needs an \"id\""):
        read_id_list(bad)
    bad.write_text('{"id": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(SelectError, match=r"bad.jsonl:2: JSON nested deeper than 200 levels$"):
        read_id_list(bad)
    with pytest.raises(SelectError, match="id list not found"):
        read_id_list(tmp_path / "absent.txt")


def _corpus(path: Path, n: int) -> None:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "text": f"Record {i}. " + TEXT}) + "\n")


@pytest.mark.slow
def test_cli_curates_only_the_listed_records(tmp_path):
    _corpus(tmp_path / "in.jsonl", 30)
    (tmp_path / "ids.txt").write_text("r4\nr17\n")  # 28 of 30 removed: over max_removal_share, yet no stop
    res = run_cli("curate", "in.jsonl", "-o", "out", "--steps", "select,extract,normalize",
                  "--set", "curate.select.ids=ids.txt", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    kept = sorted(i for p in (tmp_path / "out").glob("web/part-*.parquet") for i in pq.read_table(p)["id"].to_pylist())
    assert kept == ["r17", "r4"]
    rules = {r for p in (tmp_path / "out/_rejected").glob("*.parquet") for r in pq.read_table(p)["rule"].to_pylist()}
    assert rules == {"not_selected"}
    funnel = json.loads((tmp_path / "out/_funnel.json").read_text())
    assert funnel["total"]["select"]["docs_rejected"] == 28


def test_cli_missing_list_is_one_line(tmp_path):
    _corpus(tmp_path / "in.jsonl", 3)
    res = run_cli("curate", "in.jsonl", "-o", "out", "--set", "curate.select.ids=nope.txt", cwd=tmp_path)
    assert_clean_error(res, "nope.txt", "id list not found")
