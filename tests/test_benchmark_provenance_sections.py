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


def test_what_a_results_file_lacks(tmp_path, monkeypatch) -> None:
    import json

    import provenance_check

    files = {
        "full.json": {"commit": "abc", "dirty": False, "command": "python b.py", "load": {"others_cpu_share": {}}, "result": {}},
        "dirty.json": {"commit": "abc", "dirty": True, "command": "python b.py", "load": {"x": 1}},
        "bare.json": {"rows": [1, 2]},
        "listed.json": [1, 2],
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    monkeypatch.setattr(provenance_check, "RESULTS", tmp_path)
    provenance_check._load.cache_clear()
    try:
        assert full_provenance("full.json")
        assert missing("dirty.json") == ["a clean tree (it records a dirty one)"]
        assert missing("bare.json") == ["commit", "dirty", "command", "load"]
        assert missing("listed.json") == ["commit", "dirty", "command", "load"]
    finally:
        provenance_check._load.cache_clear()


def test_the_current_part_cites_files_at_all() -> None:
    """The check above is not vacuous: the current part names dozens of results files."""
    assert len(cited_files(_current_part())) >= 30
