"""BENCHMARKS.md cites a results file without full provenance (commit, clean tree, command, load:
what benchmarks/record.py writes) only under its "Historical results" heading, so a reader can tell a
figure measured on a known commit and a quiet clean tree from an older observation."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from provenance_check import HISTORICAL_HEADING, cited_files, full_provenance, missing  # noqa: E402


def _current_part() -> str:
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert text.count(HISTORICAL_HEADING) == 1, f"BENCHMARKS.md needs exactly one {HISTORICAL_HEADING!r}"
    return text.split(HISTORICAL_HEADING)[0]


def test_sections_above_the_historical_heading_cite_only_files_with_full_provenance() -> None:
    current = _current_part()
    for section in re.split(r"(?m)^(?=## )", current)[1:]:
        title = section.splitlines()[0]
        gaps = {f: missing(f) for f in cited_files(section) if not full_provenance(f)}
        assert not gaps, f"{title}: cites results without full provenance, move it under the historical heading: {gaps}"


def test_a_record_py_file_has_full_provenance_and_a_dirty_one_does_not() -> None:
    assert full_provenance("first_hour.json")  # written by record.py on a clean tree
    assert "a clean tree (it records a dirty one)" in missing("gate_costs.json")
    assert missing("substring_dedup.json") == ["commit", "dirty", "command", "load"]


def test_the_current_part_cites_files_at_all() -> None:
    """The check above is not vacuous: the current part names dozens of results files."""
    assert len(cited_files(_current_part())) >= 30
