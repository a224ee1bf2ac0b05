"""Line (or paragraph) deduplication across documents: menus, footers, cookie notices, disclaimers.

Much repetition is not whole documents but the same segments copied into
many of them. Like CCNet's paragraph deduplication (Wenzek et al. 2019 §3.1: hash every
normalized paragraph, drop the repeated ones), but with a document-frequency threshold so that
a sentence quoted twice survives: a unit (a line, or a paragraph between blank lines) that
occurs in at least `min_docs` documents of the corpus is boilerplate and is deleted from every
document that contains it. Units shorter than `min_chars` are never touched (blank
lines, "}", "---", bullets), and buckets in `skip_buckets` (code) keep every line: a repeated
`import numpy as np` is code, not boilerplate.

A unit is compared after stripping surrounding whitespace; its key is its 64-bit xxh3 hash.
Counting is document frequency (a footer twice in one page counts once). Map-reduce:
  map     `unit_hashes(text, cfg)` per document (sorted unique uint64)
  reduce  `count_units` per shard, `merge_counts` across shards, `frequent_units(counts, min_docs)`
  map     `remove_units(text, frequent, cfg)` -> (new text, units removed)
A document left shorter than CurateConfig.min_chars is then removed by the executor with
`too_short_rejection` (rule "too_short_after_line_dedup").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import xxhash

from tokenmill.data.config import LineDedupConfig
from tokenmill.data.dedup.shuffle import PartitionedSet, in_sorted as _in_sorted
from tokenmill.data.document import Rejection, format_value

VERSION = "xxh3_64-1"
STEP = "line_dedup"
RULE_TOO_SHORT = "too_short_after_line_dedup"

# A paragraph ends at a blank line (whitespace-only lines count as blank).
_PARA_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
# What removal may leave behind: three or more line breaks with only spaces between them.
_BLANK_RUN = re.compile(r"\n(?:[^\S\n]*\n){2,}")


class UnitCounts(NamedTuple):
    """Document frequency of every unit hash: `hashes` sorted unique, `counts` aligned."""

    hashes: np.ndarray  # uint64
    counts: np.ndarray  # int64


def applies(bucket: str, cfg: LineDedupConfig) -> bool:
    """Whether documents of this bucket take part (count and removal)."""
    return bucket not in cfg.skip_buckets


def _split(text: str, cfg: LineDedupConfig) -> tuple[list[str], list[str]]:
    """The units of a text and the separator after each (the last one's is "")."""
    if cfg.unit == "line":
        units = text.split("\n")
        return units, ["\n"] * (len(units) - 1) + [""]
    parts = _PARA_BREAK.split(text)
    seps = _PARA_BREAK.findall(text) + [""]
    return parts, seps


def _hashes(units: Iterable[str]) -> np.ndarray:
    return np.fromiter((xxhash.xxh3_64_intdigest(u.encode("utf-8", "surrogatepass")) for u in units), dtype=np.uint64)


def unit_hashes(text: str, cfg: LineDedupConfig) -> np.ndarray:
    """Sorted unique hashes of the units of a text that are at least `min_chars` long."""
    units, _ = _split(text, cfg)
    stripped = [s for s in (u.strip() for u in units) if len(s) >= cfg.min_chars]
    return np.unique(_hashes(stripped))


def count_units(per_doc: Sequence[np.ndarray]) -> UnitCounts:
    """Document frequency of every unit over documents (each array unique per document)."""
    if not per_doc:
        return UnitCounts(np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64))
    hashes, counts = np.unique(np.concatenate(per_doc).astype(np.uint64), return_counts=True)
    return UnitCounts(hashes, counts.astype(np.int64))


def merge_counts(parts: Sequence[UnitCounts]) -> UnitCounts:
    """Counts of several shards added up (any order gives the same result)."""
    if not parts:
        return count_units([])
    hashes, inverse = np.unique(np.concatenate([p.hashes for p in parts]), return_inverse=True)
    counts = np.bincount(inverse.reshape(-1), weights=np.concatenate([p.counts for p in parts]), minlength=len(hashes))
    return UnitCounts(hashes, counts.astype(np.int64))


def frequent_units(counts: UnitCounts, min_docs: int) -> np.ndarray:
    """Sorted hashes of the units found in at least `min_docs` documents."""
    return counts.hashes[counts.counts >= min_docs]


def _member(values: np.ndarray, frequent: "np.ndarray | PartitionedSet") -> np.ndarray:
    if isinstance(frequent, PartitionedSet):
        return frequent.contains(values)
    return _in_sorted(values, frequent)


def remove_units(text: str, frequent: "np.ndarray | PartitionedSet", cfg: LineDedupConfig) -> tuple[str, int]:
    """The text without its frequent units (every occurrence), and how many were removed.

    The rest of the text is kept byte for byte, except that blank-line runs a removal leaves
    behind collapse to one blank line and blank ends are trimmed, as the normalize step does
    (only when something was removed).
    """
    units, seps = _split(text, cfg)
    stripped = [u.strip() for u in units]
    long_enough = np.fromiter((len(s) >= cfg.min_chars for s in stripped), dtype=bool, count=len(units))
    drop = np.zeros(len(units), dtype=bool)
    if long_enough.any():
        idx = np.flatnonzero(long_enough)
        drop[idx] = _member(_hashes(stripped[i] for i in idx), frequent)
    n_removed = int(drop.sum())
    if n_removed == 0:
        return text, 0
    kept = [(u, s) for u, s, d in zip(units, seps, drop) if not d]
    if not kept:
        return "", n_removed
    out = "".join(u + s for u, s in kept[:-1]) + kept[-1][0]
    return _BLANK_RUN.sub("\n\n", out).lstrip("\n").rstrip(), n_removed


def too_short_rejection(n_chars: int, min_chars: int, n_removed: int) -> Rejection:
    """The rejection of a document that line dedup left under CurateConfig.min_chars."""
    return Rejection(
        STEP,
        RULE_TOO_SHORT,
        format_value(n_chars),
        f"{n_chars} characters left after removing {n_removed} repeated line(s)/paragraph(s); the minimum is {min_chars}",
    )
