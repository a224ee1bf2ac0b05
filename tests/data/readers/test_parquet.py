"""Parquet files: the text column, ids and metadata, unreadable files."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source


def test_parquet_rows_and_unreadable_files(tmp_path):
    pq.write_table(pa.table({"text": ["a", None, "c"], "url": ["u0", "u1", None]}), tmp_path / "p.parquet")
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "q.parquet")
    (tmp_path / "r.parquet").write_bytes(b"not parquet at all")
    records = list(read_source(files_source(tmp_path), 1000))
    summary = [(r.locator, r.text, r.problem.rule if r.problem else None) for r in records]
    assert summary == [("p.parquet#0", "a", None), ("p.parquet#1", None, "missing_field"),
                       ("p.parquet#2", "c", None), ("q.parquet", None, "missing_field"),
                       ("r.parquet", None, "unreadable")]
    assert records[0].url == "u0" and records[2].url == f"{tmp_path / 'p.parquet'}#2"


def test_parquet_keeps_id_and_metadata(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"], "id": ["x1", None], "source": ["s", "s"]}), tmp_path / "p.parquet")
    records = list(read_source(files_source(tmp_path / "p.parquet"), 100))
    assert [r.locator for r in records] == ["p.parquet#id=x1", "p.parquet#1"]
    assert json.loads(records[0].metadata) == {"id": "x1", "source": "s"}
