"""Which results files carry full provenance, and which files a piece of BENCHMARKS.md cites.

Full provenance is what benchmarks/record.py writes: the commit, a clean tree (`dirty` false), the
command and the other processes' load during the run. BENCHMARKS.md keeps every section that cites a
file without it under its "Historical results" heading (tests/test_benchmark_provenance_sections.py),
and benchmarks/tables.py lists those files and what each lacks.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
FIELDS = ("commit", "dirty", "command", "load")
HISTORICAL_HEADING = "# Historical results: recorded without full provenance"


@cache
def _load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def result_files() -> list[str]:
    """Every results file, as its path under benchmarks/results/."""
    return sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*.json"))


def missing(name: str) -> list[str]:
    """What a results file lacks of full provenance ("a dirty tree" when it records one)."""
    d = _load(name)
    if not isinstance(d, dict):
        return list(FIELDS)
    lacks = [k for k in FIELDS if d.get(k) in (None, "")]
    if d.get("dirty") is True:
        lacks.append("a clean tree (it records a dirty one)")
    return lacks


def full_provenance(name: str) -> bool:
    return not missing(name)


def cited_files(text: str) -> set[str]:
    """The results files a piece of BENCHMARKS.md names: by path under results/ or by file name,
    and the sources of every generated table whose begin marker it holds."""
    import tables  # benchmarks/tables.py: its sections name their sources

    cited = set()
    for name in result_files():
        base = Path(name).name
        if name in text or re.search(r"(?<![\w/.-])" + re.escape(base) + r"(?![\w])", text):
            cited.add(name)
    for section in tables.SECTIONS:
        if section.begin in text:
            cited.update(section.files)
    return cited
