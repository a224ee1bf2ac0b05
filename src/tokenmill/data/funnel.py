"""The curation funnel: documents and bytes into and out of every step, per bucket and in total.

Every document passes every step in order: a step that does not apply to it (extract on plain
text, quality on a skipped bucket) passes it through unchanged and counts it as skipped. So for
every step docs_in = docs_out + rejected, and docs_out of a step = docs_in of the next. Bytes
are UTF-8 bytes of the text entering and leaving a step (raw bytes entering "read").
The `d_eff` block holds the inputs of seed 002 §2.3's D_eff = D (1 - r_dup)(1 - r_pad) ρ_parse ρ_quality.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

VERSION = "1"
STEPS: tuple[str, ...] = ("read", "extract", "normalize", "length", "quality", "exact_dedup")


class StepMark(NamedTuple):
    """What one step did to one document; rule is set when the step removed it."""

    step: str
    bytes_in: int
    bytes_out: int
    applied: bool = True
    rule: str | None = None


@dataclass
class StepCounts:
    docs_in: int = 0
    bytes_in: int = 0
    docs_out: int = 0
    bytes_out: int = 0
    docs_skipped: int = 0  # passed through without the step applying
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)  # rule -> docs, bytes

    def add(self, mark: StepMark) -> None:
        self.docs_in += 1
        self.bytes_in += mark.bytes_in
        if mark.rule is not None:
            slot = self.rejected.setdefault(mark.rule, {"docs": 0, "bytes": 0})
            slot["docs"] += 1
            slot["bytes"] += mark.bytes_in
            return
        self.docs_out += 1
        self.bytes_out += mark.bytes_out
        self.docs_skipped += not mark.applied

    @property
    def docs_rejected(self) -> int:
        return sum(r["docs"] for r in self.rejected.values())

    def to_dict(self) -> dict[str, Any]:
        return {"docs_in": self.docs_in, "bytes_in": self.bytes_in, "docs_out": self.docs_out,
                "bytes_out": self.bytes_out, "docs_skipped": self.docs_skipped,
                "docs_rejected": self.docs_rejected,
                "rejected": {rule: dict(v) for rule, v in sorted(self.rejected.items())}}


@dataclass
class SourceCounts:
    bucket: str
    docs_in: int = 0
    bytes_in: int = 0
    docs_out: int = 0
    bytes_out: int = 0


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def d_eff_inputs(steps: dict[str, StepCounts]) -> dict[str, float | None]:
    """ρ_parse (documents read and extracted), ρ_quality and r_dup (by bytes, a token proxy)."""
    read, extract = steps["read"], steps["extract"]
    length, quality, dedup = steps["length"], steps["quality"], steps["exact_dedup"]
    dup_bytes = sum(r["bytes"] for r in dedup.rejected.values())
    return {
        "rho_parse": _ratio(extract.docs_out, read.docs_in),
        "rho_quality": _ratio(quality.bytes_out, length.bytes_in),
        "r_dup": _ratio(dup_bytes, dedup.bytes_in),
    }


class Funnel:
    """Accumulates StepMarks per bucket; `to_dict` is the content of curated/_funnel.json."""

    def __init__(self, steps: tuple[str, ...] = STEPS):
        self.steps = steps
        self.buckets: dict[str, dict[str, StepCounts]] = {}
        self.sources: dict[str, SourceCounts] = {}

    def _bucket(self, bucket: str) -> dict[str, StepCounts]:
        if bucket not in self.buckets:
            self.buckets[bucket] = {s: StepCounts() for s in self.steps}
        return self.buckets[bucket]

    def record(self, bucket: str, mark: StepMark) -> None:
        if mark.step not in self.steps:
            raise KeyError(f"unknown step {mark.step!r}; the funnel's steps are {self.steps}")
        self._bucket(bucket)[mark.step].add(mark)

    def source_in(self, source: str, bucket: str, n_bytes: int) -> None:
        counts = self.sources.setdefault(source, SourceCounts(bucket))
        counts.docs_in += 1
        counts.bytes_in += n_bytes

    def source_out(self, source: str, n_bytes: int) -> None:
        counts = self.sources[source]
        counts.docs_out += 1
        counts.bytes_out += n_bytes

    def total(self) -> dict[str, StepCounts]:
        total = {s: StepCounts() for s in self.steps}
        for per_step in self.buckets.values():
            for step, c in per_step.items():
                t = total[step]
                t.docs_in += c.docs_in
                t.bytes_in += c.bytes_in
                t.docs_out += c.docs_out
                t.bytes_out += c.bytes_out
                t.docs_skipped += c.docs_skipped
                for rule, r in c.rejected.items():
                    slot = t.rejected.setdefault(rule, {"docs": 0, "bytes": 0})
                    slot["docs"] += r["docs"]
                    slot["bytes"] += r["bytes"]
        return total

    def violations(self) -> list[str]:
        """Broken invariants (should be none): in = out + rejected; out of a step = in of the next."""
        problems = []
        for bucket, per_step in {**self.buckets, "<total>": self.total()}.items():
            for i, step in enumerate(self.steps):
                c = per_step[step]
                if c.docs_in != c.docs_out + c.docs_rejected:
                    problems.append(f"{bucket}/{step}: docs_in {c.docs_in} != out + rejected")
                if i and per_step[self.steps[i - 1]].docs_out != c.docs_in:
                    problems.append(f"{bucket}/{step}: docs_in {c.docs_in} != previous docs_out")
        return problems

    def to_dict(self) -> dict[str, Any]:
        total = self.total()
        return {
            "version": VERSION,
            "steps": list(self.steps),
            "total": {s: c.to_dict() for s, c in total.items()},
            "buckets": {b: {s: c.to_dict() for s, c in per.items()} for b, per in sorted(self.buckets.items())},
            "sources": {name: vars(c).copy() for name, c in self.sources.items()},
            "d_eff": {"total": d_eff_inputs(total),
                      "buckets": {b: d_eff_inputs(per) for b, per in sorted(self.buckets.items())}},
        }

    def write(self, path: Path) -> dict[str, Any]:
        data = self.to_dict()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        return data
