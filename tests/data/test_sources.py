"""Sources: files, directories and globs in sorted order, format override, limits, fingerprints, CLI inputs."""

from __future__ import annotations

import pytest

from tokenmill.config import SourceConfig
from tokenmill.data.sources import (SourceError, inputs_fingerprint, limit, list_source_files, read_source,
                                    sources_from_paths)
from tests.data.readers.helpers import files_source


def test_directory_is_recursive_sorted_and_skips_hidden(tmp_path):
    for rel in ["b/z.txt", "a.txt", "b/a.md", ".git/config", "c/.hidden.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    records = list(read_source(files_source(tmp_path), 1000))
    assert [r.locator for r in records] == ["a.txt", "b/a.md", "b/z.txt"]
    assert records[0].text == "a.txt" and records[0].source == str(tmp_path)
    assert records[0].url == str(tmp_path / "a.txt")


def test_glob_and_single_file(tmp_path):
    (tmp_path / "x.txt").write_text("x")
    (tmp_path / "y.md").write_text("y")
    assert [r.text for r in read_source(files_source(tmp_path / "*.txt"), 1000)] == ["x"]
    assert [r.locator for r in read_source(files_source(tmp_path / "y.md"), 1000)] == ["y.md"]


def test_a_file_name_with_glob_characters_is_that_file(tmp_path):
    """`dump[1].jsonl` that exists is read as itself, not as a pattern for `dump1.jsonl` beside it;
    the same for a folder named with `*`, `?` or `[`, alone or as the literal head of a pattern."""
    (tmp_path / "dump[1].jsonl").write_text("".join(f'{{"text": "three-{i}"}}\n' for i in range(3)))
    (tmp_path / "dump1.jsonl").write_text('{"text": "one"}\n')
    for name in ("star*", "what?", "set[ab]"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "in.txt").write_text(name)
    (tmp_path / "stara").mkdir()
    (tmp_path / "stara" / "in.txt").write_text("not me")
    records = list(read_source(files_source(tmp_path / "dump[1].jsonl"), 1000))
    assert [r.text for r in records] == ["three-0", "three-1", "three-2"]
    assert records[0].locator == "dump[1].jsonl:1"
    for name in ("star*", "what?", "set[ab]"):
        assert [r.text for r in read_source(files_source(tmp_path / name), 1000)] == [name]
        root, files = list_source_files(str(tmp_path / name / "*.txt"))  # existing head: literal
        assert (root, files) == (tmp_path / name, [tmp_path / name / "in.txt"])


def test_a_pattern_that_names_no_path_is_a_glob(tmp_path):
    """Globbing still applies to a path that names nothing: here `dump[12].jsonl` matches `dump1.jsonl`."""
    (tmp_path / "dump1.jsonl").write_text('{"text": "one"}\n')
    (tmp_path / "dump3.jsonl").write_text('{"text": "three"}\n')
    root, files = list_source_files(str(tmp_path / "dump[12].jsonl"))
    assert (root, files) == (tmp_path, [tmp_path / "dump1.jsonl"])
    assert [r.text for r in read_source(files_source(tmp_path / "dump?.jsonl"), 1000)] == ["one", "three"]
    with pytest.raises(SourceError, match=r"does not exist, and as a glob pattern it matches no file"):
        list_source_files(str(tmp_path / "dump[9].jsonl"))


def test_missing_path_names_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SourceError, match=str(missing)):
        list(read_source(files_source(missing), 1000))
    with pytest.raises(SourceError, match="matches no file"):
        list_source_files(str(tmp_path / "*.nothing"))


def test_format_override(tmp_path):
    (tmp_path / "page.txt").write_text("<html><body><p>x</p></body></html>")
    assert next(read_source(files_source(tmp_path, format="html"), 1000)).format == "html"
    assert next(read_source(files_source(tmp_path), 1000)).format == "text"


def test_limits_take_a_sorted_prefix(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text("x" * 10)
    assert [r.locator for r in read_source(files_source(tmp_path, max_docs=2), 1000)] == ["0.txt", "1.txt"]
    assert [r.locator for r in read_source(files_source(tmp_path, max_bytes=35), 1000)] == ["0.txt", "1.txt", "2.txt"]
    assert list(limit(iter([]), 1, 1)) == []


def test_fingerprint_tracks_size_and_mtime(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    src = files_source(tmp_path)
    fp = inputs_fingerprint(src)
    assert fp == inputs_fingerprint(src)
    (tmp_path / "a.txt").write_text("three")
    assert inputs_fingerprint(src) != fp
    assert "error" in inputs_fingerprint(files_source(tmp_path / "missing"))


def test_files_source_needs_path():
    with pytest.raises(SourceError, match="needs a path"):
        list(read_source(SourceConfig(kind="files", bucket="web"), 100))


def test_sources_from_paths(tmp_path):
    code, web = tmp_path / "repo", tmp_path / "site"
    for d, names in [(code, ["a.py", "b.py", "README.md"]), (web, ["a.html", "b.py", "c.txt"])]:
        d.mkdir()
        for n in names:
            (d / n).write_text("x")
    srcs = sources_from_paths([str(code), str(web)])
    assert [(s.kind, s.path, s.bucket) for s in srcs] == [("files", str(code), "code"), ("files", str(web), "web")]
    assert [s.bucket for s in sources_from_paths([str(code)], bucket="books")] == ["books"]
    with pytest.raises(SourceError, match="nope"):
        sources_from_paths([str(web), str(tmp_path / "nope")])
    with pytest.raises(SourceError):
        sources_from_paths([])
