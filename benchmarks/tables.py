"""BENCHMARKS.md's generated sections, each rendered from its results files under
benchmarks/results/, so a table cannot say what its JSON does not.

    .venv/bin/python benchmarks/tables.py            # rewrite every generated section (make bench-tables)
    .venv/bin/python benchmarks/tables.py --check    # exit 1 naming each section that differs

A section lives between its begin and end markers (HTML comments, invisible when rendered);
the text outside the markers (the hand-written reading of the figures) is left alone.
tests/test_benchmark_tables.py runs the check, so a results file changed without its table, or
a table edited by hand, fails the suite.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dedup_scale_report  # noqa: E402
import train_cuda_report  # noqa: E402

RESULTS = HERE / "results"
BENCHMARKS = HERE.parent / "BENCHMARKS.md"


@dataclass(frozen=True)
class Section:
    """One generated section: its markers, its results files and how they render."""

    name: str
    begin: str
    end: str
    files: tuple[str, ...]
    render: Callable[[list[dict[str, Any]]], str]  # the loaded files -> the text, markers included


SECTIONS = (
    Section("dedup_scale", dedup_scale_report.BEGIN, dedup_scale_report.END,
            ("dedup_scale_200k.json", "dedup_scale.json", "dedup_scale_5m.json", "tokenize_ab_1m.json",
             "tokenize_ab_1m_grouped.json"),
            dedup_scale_report.section),
    Section("train_cuda", train_cuda_report.BEGIN, train_cuda_report.END,
            ("train_cuda_h200.json", "train_cuda_h200_plain_ce.json", "train_cuda_h200_run3.json",
             "train_cuda_h200_profile.json"),
            lambda r: train_cuda_report.section(*r)),
)


def rendered(section: Section, results: Path = RESULTS) -> str:
    return section.render([json.loads((results / f).read_text()) for f in section.files])


def current(section: Section, doc: str) -> str | None:
    """The section's text in the document, markers included (None: not there)."""
    if section.begin not in doc or section.end not in doc:
        return None
    start = doc.index(section.begin)
    return doc[start:doc.index(section.end, start) + len(section.end)]


def drifted(doc: str, results: Path = RESULTS) -> list[str]:
    """Names of the sections whose text differs from what their results render."""
    return [s.name for s in SECTIONS if current(s, doc) != rendered(s, results)]


def rewrite(doc: str, results: Path = RESULTS) -> str:
    for s in SECTIONS:
        old, new = current(s, doc), rendered(s, results)
        doc = doc.replace(old, new) if old is not None else doc.rstrip("\n") + "\n\n" + new + "\n"
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when a section differs")
    ap.add_argument("--benchmarks", type=Path, default=BENCHMARKS)
    args = ap.parse_args()
    doc = args.benchmarks.read_text()
    if args.check:
        bad = drifted(doc)
        for name in bad:
            print(f"{args.benchmarks}: section {name!r} differs from its results; run `make bench-tables`")
        raise SystemExit(1 if bad else 0)
    args.benchmarks.write_text(rewrite(doc))


if __name__ == "__main__":
    main()
