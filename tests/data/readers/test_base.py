"""The reader interface and registry: format detection, the binary sniff, empty documents."""

from __future__ import annotations

import json
from pathlib import Path

from tokenmill.data.readers import detect_format
from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source


def test_detect_format():
    assert [detect_format(Path(p)) for p in ["a.HTML", "b.htm", "c.jsonl", "d.json", "e.parquet",
                                             "f.py", "g.rs", "h.txt", "i.md", "noext"]] == \
        ["html", "html", "jsonl", "jsonl", "parquet", "code", "code", "text", "text", "text"]


def test_compound_extensions():
    assert [detect_format(Path(p)) for p in ["a.warc", "a.warc.gz", "b.wet.gz", "c.arc.gz", "d.jsonl.gz",
                                             "e.jsonl.zst", "f.ndjson", "g.pm", "h.txt.gz"]] == \
        ["warc", "warc", "warc", "warc", "jsonl", "jsonl", "jsonl", "code", "text"]


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def test_binary_files_are_one_quarantined_record(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"text\x00with a NUL")
    (tmp_path / "b.jsonl").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "c.txt").write_bytes(b"\x01\x02\x03\x04 mostly controls \x05\x06\x07\x08" * 3)
    (tmp_path / "d.txt").write_bytes("tabs\tand\fform feeds\r\n are text".encode())
    records = {r.locator: r for r in read_source(files_source(tmp_path), 100_000)}
    assert sorted(records) == ["a.txt", "b.jsonl", "c.txt", "d.txt"]
    assert records["a.txt"].problem.rule == "binary" and "NUL byte at offset 4" in records["a.txt"].problem.reason
    assert records["b.jsonl"].problem.rule == "binary"
    assert records["c.txt"].problem.rule == "binary" and "control characters" in records["c.txt"].problem.reason
    assert records["d.txt"].problem is None


def test_empty_documents_are_quarantined(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"")
    (tmp_path / "b.md").write_bytes(b" \n\t\n")
    (tmp_path / "c.jsonl").write_bytes(_jsonl([{"text": ""}, {"text": "  \n"}, {"text": "x"}]))
    records = list(read_source(files_source(tmp_path), 100))
    assert [(r.locator, r.problem.rule if r.problem else "ok") for r in records] == [
        ("a.txt", "empty"), ("b.md", "empty"), ("c.jsonl:1", "empty"), ("c.jsonl:2", "empty"), ("c.jsonl:3", "ok")]
