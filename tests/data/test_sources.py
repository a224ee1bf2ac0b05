"""Readers: formats, sorted order, quarantined bad records, limits, the embedded stdlib corpus."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import SourceConfig
from tokenmill.data.sources import (SourceError, detect_format, inputs_fingerprint, limit,
                                    list_source_files, pydoc_module_names, read_source, stdlib_dir)


def _src(path, bucket="web", **kw) -> SourceConfig:
    return SourceConfig(kind="files", path=str(path), bucket=bucket, **kw)


def test_detect_format():
    assert [detect_format(Path(p)) for p in ["a.HTML", "b.htm", "c.jsonl", "d.json", "e.parquet",
                                             "f.py", "g.rs", "h.txt", "i.md", "noext"]] == \
        ["html", "html", "jsonl", "jsonl", "parquet", "code", "code", "text", "text", "text"]


def test_directory_is_recursive_sorted_and_skips_hidden(tmp_path):
    for rel in ["b/z.txt", "a.txt", "b/a.md", ".git/config", "c/.hidden.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    records = list(read_source(_src(tmp_path), 1000))
    assert [r.locator for r in records] == ["a.txt", "b/a.md", "b/z.txt"]
    assert records[0].text == "a.txt" and records[0].source == str(tmp_path)
    assert records[0].url == str(tmp_path / "a.txt")


def test_glob_and_single_file(tmp_path):
    (tmp_path / "x.txt").write_text("x")
    (tmp_path / "y.md").write_text("y")
    assert [r.text for r in read_source(_src(tmp_path / "*.txt"), 1000)] == ["x"]
    assert [r.locator for r in read_source(_src(tmp_path / "y.md"), 1000)] == ["y.md"]


def test_missing_path_names_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SourceError, match=str(missing)):
        list(read_source(_src(missing), 1000))
    with pytest.raises(SourceError, match="matches no file"):
        list_source_files(str(tmp_path / "*.nothing"))


def test_bad_jsonl_lines_are_quarantined_with_line_numbers(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"text": "first", "url": "https://a.example/1"}), "{not json", "",
             json.dumps({"body": "no text field"}), json.dumps(["a", "list"]),
             json.dumps({"text": 42}), json.dumps({"text": "last"})]
    path.write_text("\n".join(lines) + "\n")
    records = list(read_source(_src(path), 1000))
    good = [r for r in records if r.problem is None]
    bad = [r for r in records if r.problem is not None]
    assert [r.text for r in good] == ["first", "last"]
    assert good[0].url == "https://a.example/1" and good[1].url == f"{path}:7"
    assert [(r.problem.rule, r.problem.value) for r in bad] == [
        ("bad_json", "2"), ("missing_field", "4"), ("missing_field", "5"), ("missing_field", "6")]
    assert all(r.problem.step == "read" and str(path) in r.problem.reason for r in bad)
    assert "line 2" in bad[0].problem.reason and bad[0].url == f"{path}:2"
    assert bad[0].text is None


def test_text_field_is_configurable(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"content": "hello"}) + "\n")
    assert [r.text for r in read_source(_src(path, text_field="content"), 1000)] == ["hello"]


def test_undecodable_and_too_large(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"ok \xff\xfe bytes")
    (tmp_path / "big.txt").write_text("x" * 200)
    (tmp_path / "lines.jsonl").write_bytes(b'{"text": "\xff"}\n' + json.dumps({"text": "y" * 300}).encode() + b"\n")
    (tmp_path / "surrogate.jsonl").write_text('{"text": "a\\ud800b"}\n')
    records = {r.locator: r for r in read_source(_src(tmp_path), 100)}
    assert records["bad.txt"].problem.rule == "undecodable" and "byte 3" in records["bad.txt"].problem.reason
    assert records["big.txt"].problem.rule == "too_large" and records["big.txt"].problem.value == "200"
    assert records["lines.jsonl:1"].problem.rule == "undecodable"
    assert records["lines.jsonl:2"].problem.rule == "too_large"
    assert records["surrogate.jsonl:1"].problem.rule == "undecodable"


def test_utf8_bom_is_dropped(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffhello".encode("utf-8"))
    assert [r.text for r in read_source(_src(tmp_path), 100)] == ["hello"]


def test_parquet_and_json_array(tmp_path):
    pq.write_table(pa.table({"text": ["a", None, "c"], "url": ["u0", "u1", None]}), tmp_path / "p.parquet")
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "q.parquet")
    (tmp_path / "r.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "s.json").write_text(json.dumps([{"text": "j0"}, {"nope": 1}]))
    records = list(read_source(_src(tmp_path), 1000))
    summary = [(r.locator, r.text, r.problem.rule if r.problem else None) for r in records]
    assert summary == [("p.parquet#0", "a", None), ("p.parquet#1", None, "missing_field"),
                       ("p.parquet#2", "c", None), ("q.parquet", None, "missing_field"),
                       ("r.parquet", None, "unreadable"), ("s.json#0", "j0", None),
                       ("s.json#1", None, "missing_field")]
    assert records[0].url == "u0" and records[2].url == f"{tmp_path / 'p.parquet'}#2"


def test_format_override(tmp_path):
    (tmp_path / "page.txt").write_text("<html><body><p>x</p></body></html>")
    assert next(read_source(_src(tmp_path, format="html"), 1000)).format == "html"
    assert next(read_source(_src(tmp_path), 1000)).format == "text"


def test_limits_take_a_sorted_prefix(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text("x" * 10)
    assert [r.locator for r in read_source(_src(tmp_path, max_docs=2), 1000)] == ["0.txt", "1.txt"]
    assert [r.locator for r in read_source(_src(tmp_path, max_bytes=35), 1000)] == ["0.txt", "1.txt", "2.txt"]
    assert list(limit(iter([]), 1, 1)) == []


def test_fingerprint_tracks_size_and_mtime(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    src = _src(tmp_path)
    fp = inputs_fingerprint(src)
    assert fp == inputs_fingerprint(src)
    (tmp_path / "a.txt").write_text("three")
    assert inputs_fingerprint(src) != fp
    assert "error" in inputs_fingerprint(_src(tmp_path / "missing"))


# --------------------------------------------------------------------------- python_stdlib
def _stdlib(part: str, **kw) -> SourceConfig:
    return SourceConfig(kind="python_stdlib", part=part, bucket="b", **kw)


def test_stdlib_code_excludes_tests_and_packages():
    records = list(read_source(_stdlib("code", max_bytes=3_000_000), 2_000_000))
    locators = [r.locator for r in records]
    assert locators == [r.locator for r in read_source(_stdlib("code", max_bytes=3_000_000), 2_000_000)]
    assert "abc.py" in locators
    assert all(r.format == "code" and r.source == "python_stdlib:code" for r in records)
    assert sum(r.n_bytes for r in records) <= 3_000_000
    banned = {"test", "tests", "site-packages", "dist-packages", "idlelib"}
    assert not any(banned & set(loc.split("/")[:-1]) for loc in locators)
    assert all(Path(r.url).is_file() and Path(r.url).is_relative_to(stdlib_dir()) for r in records)


def test_pydoc_pages_render_in_a_child_process():
    names = pydoc_module_names()
    assert "antigravity" not in names and "this" not in names and "tkinter" not in names
    assert not any(n.startswith("_") for n in names) and names == sorted(names)
    first_three = names[:3]
    fresh = [n for n in first_three if n not in sys.modules]
    records = list(read_source(_stdlib("pydoc_html", max_docs=3), 2_000_000))
    assert [r.locator for r in records] == first_three
    assert all(r.format == "html" and "<html" in r.text for r in records)
    assert all(n not in sys.modules for n in fresh)  # the imports happened elsewhere
    assert " at 0x7" not in "".join(r.text for r in records)


def test_reference_topics():
    records = list(read_source(_stdlib("reference"), 2_000_000))
    from pydoc_data.topics import topics

    assert len(records) == len(topics) and [r.locator for r in records] == sorted(topics)
    assert all(r.format == "text" and r.text for r in records)


def test_system_html_is_optional():
    records = list(read_source(_stdlib("system_html", max_docs=2), 2_000_000))
    assert all(r.format == "html" for r in records)  # none on most machines, and that is fine


def test_stdlib_fingerprint():
    fp = inputs_fingerprint(_stdlib("code"))
    assert fp["python"] == sys.version and fp["stdlib"] == str(stdlib_dir())


def test_files_source_needs_path():
    with pytest.raises(SourceError, match="needs a path"):
        list(read_source(SourceConfig(kind="files", bucket="web"), 100))
