"""Plain text files: UTF-8 (BOM dropped), undecodable and too large files."""

from __future__ import annotations

from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source


def test_undecodable_and_too_large(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"ok \xff\xfe bytes")
    (tmp_path / "big.txt").write_text("x" * 200)
    records = {r.locator: r for r in read_source(files_source(tmp_path), 100)}
    assert records["bad.txt"].problem.rule == "undecodable" and "byte 3" in records["bad.txt"].problem.reason
    assert records["big.txt"].problem.rule == "too_large" and records["big.txt"].problem.value == "200"


def test_utf8_bom_is_dropped(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffhello".encode("utf-8"))
    assert [r.text for r in read_source(files_source(tmp_path), 100)] == ["hello"]
