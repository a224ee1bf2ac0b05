"""JSON Lines and JSON arrays: bad lines quarantined with their line number, compression, ids and metadata."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source


def test_bad_jsonl_lines_are_quarantined_with_line_numbers(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"text": "first", "url": "https://a.example/1"}), "{not json", "",
             json.dumps({"body": "no text field"}), json.dumps(["a", "list"]),
             json.dumps({"text": 42}), json.dumps({"text": "last"})]
    path.write_text("\n".join(lines) + "\n")
    records = list(read_source(files_source(path), 1000))
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
    assert [r.text for r in read_source(files_source(path, text_field="content"), 1000)] == ["hello"]


def test_undecodable_and_too_large_lines(tmp_path):
    (tmp_path / "lines.jsonl").write_bytes(b'{"text": "\xff"}\n' + json.dumps({"text": "y" * 300}).encode() + b"\n")
    (tmp_path / "surrogate.jsonl").write_text('{"text": "a\\ud800b"}\n')
    records = {r.locator: r for r in read_source(files_source(tmp_path), 100)}
    assert records["lines.jsonl:1"].problem.rule == "undecodable"
    assert records["lines.jsonl:2"].problem.rule == "too_large"
    assert records["surrogate.jsonl:1"].problem.rule == "undecodable"


def test_json_array(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps([{"text": "j0"}, {"nope": 1}]))
    records = list(read_source(files_source(tmp_path), 1000))
    summary = [(r.locator, r.text, r.problem.rule if r.problem else None) for r in records]
    assert summary == [("s.json#0", "j0", None), ("s.json#1", None, "missing_field")]


def test_a_line_nested_too_deep_is_quarantined_alone(tmp_path):
    """A 4 KB line nested 2,000 levels deep (a RecursionError for json.loads) is one `too_deep`
    record naming its file and line; the lines on either side are read as usual."""
    deep = '{"text": "x", "metadata": ' + "[" * 2000 + "]" * 2000 + "}"
    ok_deep = '{"text": "nested", "metadata": ' + "[" * 150 + "]" * 150 + "}"  # under the limit: a record
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([json.dumps({"text": "before"}), deep, ok_deep, json.dumps({"text": "after"})]) + "\n")
    records = list(read_source(files_source(path), 100_000))
    assert [r.text for r in records if r.problem is None] == ["before", "nested", "after"]
    [bad] = [r for r in records if r.problem is not None]
    assert (bad.locator, bad.url, bad.problem.rule, bad.problem.value) == ("d.jsonl:2", f"{path}:2", "too_deep", "2")
    assert f"{path}:2: line 2: JSON nested deeper than 200 levels" == bad.problem.reason


def test_a_json_array_nested_too_deep_is_one_quarantined_record(tmp_path):
    """A .json array is parsed whole: one record 2,000 levels deep quarantines the file as `too_deep`
    (no RecursionError); records 199 levels deep inside the array (200 with it) are read."""
    (tmp_path / "deep.json").write_text('[{"text": "a"}, {"text": "b", "m": ' + "[" * 2000 + "]" * 2000 + "}]")
    (tmp_path / "ok.json").write_text('[{"text": "a", "m": ' + "[" * 198 + "]" * 198 + "}]")
    records = {r.locator: r for r in read_source(files_source(tmp_path), 100_000)}
    assert records["deep.json"].problem.rule == "too_deep"
    assert "a record in it nests deeper than 200 levels" in records["deep.json"].problem.reason
    assert records["ok.json#0"].problem is None and records["ok.json#0"].text == "a"


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def test_jsonl_keeps_id_source_metadata(tmp_path):
    rows = [{"id": "doc-1", "text": "alpha", "url": "https://a.example/", "source": "wiki",
             "metadata": {"lang": "en", "n": 1}},
            {"text": "beta"}, {"id": 7, "text": "gamma"}]
    (tmp_path / "d.jsonl").write_bytes(_jsonl(rows))
    records = list(read_source(files_source(tmp_path / "d.jsonl"), 1000))
    assert [r.locator for r in records] == ["d.jsonl#id=doc-1", "d.jsonl:2", "d.jsonl#id=7"]
    assert json.loads(records[0].metadata) == {"id": "doc-1", "source": "wiki", "metadata": {"lang": "en", "n": 1}}
    assert records[1].metadata is None and json.loads(records[2].metadata) == {"id": 7}
    assert records[0].url == "https://a.example/"
    from tokenmill.data.document import Doc

    assert Doc.from_raw(records[0]).metadata == records[0].metadata


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_jsonl_and_its_truncation(tmp_path, codec):
    rows = [{"text": f"line {i} " + "w" * (i % 50)} for i in range(20_000)]  # zstd: several 128 KB blocks
    raw = _jsonl(rows)
    packed = gzip.compress(raw, mtime=0) if codec == "gzip" else zstandard.ZstdCompressor().compress(raw)
    ext = ".jsonl.gz" if codec == "gzip" else ".jsonl.zst"
    (tmp_path / f"a{ext}").write_bytes(packed)
    records = list(read_source(files_source(tmp_path / f"a{ext}"), 10_000))
    assert [r.text for r in records] == [r["text"] for r in rows]
    assert records[-1].locator == f"a{ext}:20000"

    (tmp_path / f"a{ext}").write_bytes(packed[: len(packed) // 2])
    records = list(read_source(files_source(tmp_path / f"a{ext}"), 10_000))
    good, bad = records[:-1], records[-1]
    assert all(r.problem is None for r in good) and 0 < len(good) < len(rows)
    assert [r.text for r in good] == [r["text"] for r in rows[: len(good)]]
    assert bad.problem.rule == "truncated" and bad.locator == f"a{ext}:{len(good) + 1}"
    assert f"line {len(good) + 1}" in bad.problem.reason and str(tmp_path / f"a{ext}") in bad.problem.reason


def test_multi_member_gzip_reads_whole(tmp_path):
    a, b = _jsonl([{"text": "one"}]), _jsonl([{"text": "two"}])
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress(a) + gzip.compress(b))
    assert [r.text for r in read_source(files_source(tmp_path / "m.jsonl.gz"), 100)] == ["one", "two"]


def test_corrupt_gzip_is_quarantined(tmp_path):
    packed = bytearray(gzip.compress(_jsonl([{"text": f"t{i}"} for i in range(2000)]), mtime=0))
    packed[len(packed) // 2: len(packed) // 2 + 64] = b"\xff" * 64
    (tmp_path / "x.jsonl.gz").write_bytes(bytes(packed))
    records = list(read_source(files_source(tmp_path / "x.jsonl.gz"), 100))
    assert all(r.problem is None for r in records[:-1])
    assert records[-1].problem.rule == "corrupt" and "invalid gzip data" in records[-1].problem.reason


def test_invalid_utf8_line_names_file_and_line(tmp_path):
    path = tmp_path / "u.jsonl"
    path.write_bytes(_jsonl([{"text": "ok"}]) + b'{"text": "caf\xe9"}\n' + _jsonl([{"text": "ok too"}]))
    records = list(read_source(files_source(path), 100))
    assert [r.text for r in records] == ["ok", None, "ok too"]
    assert records[1].problem.rule == "undecodable" and records[1].problem.value == "2"
    assert f"{path}:2" in records[1].problem.reason and "line 2" in records[1].problem.reason
