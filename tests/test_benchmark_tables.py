"""BENCHMARKS.md's generated sections equal what their results files render (benchmarks/tables.py):
a results file changed without its table, or a table edited by hand, fails here."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402


@pytest.fixture(scope="module")
def doc() -> str:
    return tables.BENCHMARKS.read_text()


def test_every_generated_section_is_what_its_results_render(doc):
    assert [s.name for s in tables.SECTIONS if tables.current(s, doc) is None] == []
    assert tables.drifted(doc) == [], "run `make bench-tables` and commit BENCHMARKS.md"


@pytest.mark.parametrize("section", tables.SECTIONS, ids=lambda s: s.name)
def test_a_hand_edited_table_is_caught(doc, section):
    doc = tables.rewrite(doc)
    text = tables.current(section, doc)
    row = next(line for line in text.splitlines() if line.startswith("| ") and any(c.isdigit() for c in line))
    digit = next(c for c in row if c.isdigit())
    edited = doc.replace(text, text.replace(row, row.replace(digit, str((int(digit) + 1) % 10), 1), 1))
    assert tables.drifted(edited) == [section.name]


@pytest.mark.parametrize("section", tables.SECTIONS, ids=lambda s: s.name)
def test_a_results_file_changed_without_its_table_is_caught(doc, section, tmp_path):
    for f in {f for s in tables.SECTIONS for f in s.files}:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tables.RESULTS / f, tmp_path / f)
    for f in section.files:
        path = tmp_path / f
        path.write_text(json.dumps(_changed(json.loads(path.read_text()))))
    drifted = tables.drifted(tables.rewrite(doc), tmp_path)
    assert section.name in drifted  # and only sections rendered from the same files
    assert all(set(s.files) & set(section.files) for s in tables.SECTIONS if s.name in drifted)


def _changed(data):
    """`data` with every float it holds, at any depth, changed (a table shows some of them), and
    every integer above 10^7 (byte counts: a table of measured memory holds no float), which
    stays an integer."""
    if isinstance(data, dict):
        return {k: _changed(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_changed(v) for v in data]
    if isinstance(data, int) and not isinstance(data, bool) and data > 10**7:
        return int(data * 1.37)
    return data * 1.37 if isinstance(data, float) else data
