"""Exact-substring deduplication with suffix arrays (Lee et al. 2022, "Deduplicating Training
Data Makes Language Models Better").

A k-window is k consecutive units of one document. A window is *repeated* when the same k
units occur at least twice anywhere in the corpus (inside one document or across documents).
Every repeated window has a *first occurrence*: the lowest position in canonical (document,
offset) order. The step removes the union of the later occurrences and keeps the first:
- mode "spans": those units are cut out of the text (each cut span goes to `_rejected` with its
  character offsets, length in units and where the window first occurs);
- mode "documents": a document is dropped when more than `max_dup_share` of its characters are
  later occurrences; otherwise it is kept unchanged.

Keep-first vs the reference tool: the reference pipeline (google-research/deduplicate-text-
datasets: `self-similar` marks every suffix whose neighbour in the suffix array shares ≥ k
bytes, `collect` merges them into byte ranges, `finish_single_file` cuts every range) removes
*all* copies, the first included, so text repeated twice then exists nowhere. We keep the
first occurrence, as exact_dedup and MinHash keep the first document; `all_copies_mask` gives
the reference's set, which the benchmark compares. Caveat: a first occurrence that overlaps the
later occurrence of a *different* repeated window loses the overlapping units.

Units. Before the tokenizer exists a "token" is one of:
- "word" (default): `\\w+` or one non-space symbol — deterministic, close to one BPE token per
  unit, whitespace ignored (so re-indented or re-wrapped copies still match); a unit's value
  is its 63-bit xxh3 hash (collision chance over 10^7 distinct words ≈ 10^-5, and a false
  match needs k colliding units in a row).
- "byte": one UTF-8 byte, the unit of the reference tool (k=100 bytes ≈ its 50 GPT-2 tokens).
Every unit keeps its character offsets, so a span of units maps back to a span of text (a byte
span is widened to whole characters).

Sharding (map-reduce, memory bounded):
  map      `tokenize` every document; units of all documents go to one memmapped store
  shards   whole documents packed into shards of about `shard_tokens` units; per shard a suffix
           array (pydivsufsort, libdivsufsort) and its LCP array (Kasai); adjacent suffixes with
           LCP ≥ k form the groups of equal windows; written to disk (`build_shard`)
  merge    a k-way heap merge of the shards' group streams, ordered by their first k unit
           values (memmapped, never loaded whole), joins equal windows of different shards
           (`merge_shards`)
  resolve  per shard, the first occurrence of every repeated window into one memmapped array
           `first` (global position of the window's first copy, -1: not repeated)
  apply    per document, `removal_runs` over its slice of `first`
Each document is followed by a unique separator unit, so no window and no LCP crosses a
document boundary. The result is identical for any shard size (tested).

Memory bound: building one shard holds about 80 bytes per unit of that shard (values, global
positions, the rank sort, the suffix array over the 4-byte ranks, LCP; measured: 993 MB peak RSS
for one 12.4 M-unit shard, BENCHMARKS.md), so peak ≈ 80 × max(shard_tokens, longest document)
bytes (curation caps the shard at curate.memory_per_task / UNIT_BYTES units); the merge holds a block of 4096 k-unit keys per shard (1.6 MB at
k=50) plus 16 bytes per cross-shard repeated window; everything else is memmapped from disk
(8 bytes per unit for the store and for `first`, ≈ 30 bytes per unit of shard files).
"""

from __future__ import annotations

import heapq
import itertools
import re
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import xxhash

from tokenmill.data.config import SubstringDedupConfig
from tokenmill.data.document import Rejection, format_value

UNIT_BYTES = 80  # what building one suffix-array shard holds per unit (the memory bound above)

VERSION = "divsufsort-1"
STEP = "substring_dedup"
RULE_SPAN = "repeated_span"
RULE_SHARE = "duplicated_share"
RULE_TOO_SHORT = "too_short_after_substring_dedup"

_WORD = re.compile(r"\w+|[^\w\s]")
_HASH_MASK = np.uint64((1 << 63) - 1)
# Separators have the top bit set (word hashes and bytes never do): unique per document.
_SEPARATOR = np.uint64(1 << 63)
# Keys of this many groups are built per numpy call in the merge.
_MERGE_BLOCK = 4096


class Units(NamedTuple):
    """A text's units: `values` (uint64) and, per unit, the character span it occupies:
    [starts[i], cut_ends[i]); cutting units i..j removes text[starts[i]:cut_ends[j-1]]."""

    values: np.ndarray
    starts: np.ndarray
    cut_ends: np.ndarray


class Span(NamedTuple):
    """A run of removed units [i, j) = characters [char_start, char_end) of the document;
    `first` is the global position where the run's first window first occurs."""

    i: int
    j: int
    char_start: int
    char_end: int
    first: int


# --------------------------------------------------------------------------- units
def tokenize(text: str, unit: str) -> Units:
    """The units of a text with their character spans (see the module docstring)."""
    if unit == "word":
        matches = list(_WORD.finditer(text))
        values = (
            np.fromiter(
                (xxhash.xxh3_64_intdigest(m.group().encode("utf-8", "surrogatepass")) for m in matches),
                dtype=np.uint64,
                count=len(matches),
            )
            & _HASH_MASK
        )
        starts = np.fromiter((m.start() for m in matches), dtype=np.int64, count=len(matches))
        # A cut runs to the next unit, so the whitespace after a removed span goes with it.
        cut_ends = np.append(starts[1:], len(text)).astype(np.int64)
        return Units(values, starts, cut_ends)
    if unit == "byte":
        raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
        char_of = np.cumsum((raw & 0xC0) != 0x80, dtype=np.int64) - 1  # continuation bytes: 10xxxxxx
        return Units(raw.astype(np.uint64), char_of, char_of + 1)
    raise ValueError(f"substring_dedup.unit must be 'word' or 'byte', got {unit!r}")


# --------------------------------------------------------------------------- unit store
def write_store(work: Path, docs: Sequence[np.ndarray]) -> None:
    """All documents' unit values in one memmapped `units.npy` and their bounds in `bases.npy`."""
    write_store_parts(work, np.array([len(d) for d in docs], dtype=np.int64), iter(docs))


def write_store_parts(work: Path, lens: np.ndarray, parts: Iterator[np.ndarray]) -> None:
    """The unit store from consecutive arrays of unit values (documents or chunks of them)
    whose documents have the lengths `lens`; only one part is in memory at a time."""
    work.mkdir(parents=True, exist_ok=True)
    bases = np.zeros(len(lens) + 1, dtype=np.int64)
    bases[1:] = np.cumsum(lens)
    units = np.lib.format.open_memmap(work / "units.npy", mode="w+", dtype=np.uint64, shape=(int(bases[-1]),))
    at = 0
    for part in parts:
        units[at : at + len(part)] = part
        at += len(part)
    if at != bases[-1]:
        raise RuntimeError(f"substring_dedup store: {at} units written, the lengths add up to {bases[-1]} (a bug)")
    units.flush()
    np.save(work / "bases.npy", bases, allow_pickle=False)


def plan_shards(bases: np.ndarray, shard_tokens: int) -> list[tuple[int, int]]:
    """Document ranges [lo, hi) of about `shard_tokens` units each; documents are never split
    (a longer document is a shard of its own)."""
    shards, lo = [], 0
    n_docs = len(bases) - 1
    while lo < n_docs:
        hi = int(np.searchsorted(bases, bases[lo] + shard_tokens, side="right")) - 1
        hi = min(max(hi, lo + 1), n_docs)
        shards.append((lo, hi))
        lo = hi
    return shards


def _shard_dir(work: Path, s: int) -> Path:
    return work / "shards" / f"{s:05d}"


def build_shard(work: Path, s: int, lo: int, hi: int, k: int) -> int:
    """Suffix array + LCP of documents [lo, hi); saves the groups of equal full k-windows
    (in suffix-array order) and returns how many windows repeat inside the shard."""
    from pydivsufsort import divsufsort, kasai

    bases = np.load(work / "bases.npy", mmap_mode="r")
    u0, u1 = int(bases[lo]), int(bases[hi])
    seg = np.load(work / "units.npy", mmap_mode="r")[u0:u1]
    lens = np.diff(np.asarray(bases[lo : hi + 1]))
    total = (u1 - u0) + (hi - lo)
    sep_at = (bases[lo + 1 : hi + 1] - u0) + np.arange(1, hi - lo + 1) - 1  # separator after each doc
    is_sep = np.zeros(total, dtype=bool)
    is_sep[sep_at] = True
    cat = np.empty(total, dtype=np.uint64)
    cat[~is_sep] = seg
    cat[sep_at] = _SEPARATOR + np.arange(hi - lo, dtype=np.uint64)
    gpos = np.full(total, -1, dtype=np.int64)
    gpos[~is_sep] = np.arange(u0, u1, dtype=np.int64)
    # A window is full when it ends inside its document (at or before the separator).
    full = (np.arange(total) + k <= np.repeat(sep_at, lens + 1)) & ~is_sep
    del is_sep
    # Ranks keep the values' order, so this suffix array is sorted by the unit values themselves
    # (what the cross-shard merge compares); 4-byte ranks keep libdivsufsort's input small.
    _, ranks = np.unique(cat, return_inverse=True)
    ranks = ranks.reshape(-1).astype(np.uint32)
    sa = divsufsort(ranks).astype(np.int64)
    lcp = kasai(ranks, sa)
    del ranks
    same_prev = np.zeros(total, dtype=bool)
    same_prev[1:] = lcp[:-1] >= k  # adjacent suffixes share ≥ k units: one group
    del lcp
    keep = full[sa]
    sa_full, same = sa[keep], same_prev[keep]
    del sa, same_prev, keep
    starts = np.flatnonzero(~same)
    sizes = np.diff(np.append(starts, len(sa_full)))
    g_sorted = gpos[sa_full]
    out = _shard_dir(work, s)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "keys.npy", cat.astype(">u8"), allow_pickle=False)  # big-endian: bytes order = value order
    np.save(out / "gpos_sorted.npy", g_sorted, allow_pickle=False)
    np.save(out / "group_rep.npy", sa_full[starts] if len(starts) else np.zeros(0, np.int64), allow_pickle=False)
    np.save(out / "group_sizes.npy", sizes, allow_pickle=False)
    local_min = np.minimum.reduceat(g_sorted, starts) if len(starts) else np.zeros(0, np.int64)
    np.save(out / "group_min.npy", local_min, allow_pickle=False)
    return int((sizes >= 2).sum())


def _group_stream(work: Path, s: int, k: int) -> Iterator[tuple[bytes, int, int]]:
    """(first k unit values as big-endian bytes, shard, group) of every group, in sorted order."""
    d = _shard_dir(work, s)
    keys = np.load(d / "keys.npy", mmap_mode="r")
    reps = np.load(d / "group_rep.npy", mmap_mode="r")
    width = np.arange(k)
    for b0 in range(0, len(reps), _MERGE_BLOCK):
        block = np.ascontiguousarray(keys[np.asarray(reps[b0 : b0 + _MERGE_BLOCK])[:, None] + width])
        # Fixed-width bytes strip trailing NULs; that keeps both equality and order.
        yield from zip(block.view(f"S{8 * k}").ravel().tolist(), itertools.repeat(s), range(b0, b0 + len(block)))


def merge_shards(work: Path, n_shards: int, k: int) -> int:
    """Join equal windows of different shards: a k-way merge of the shards' sorted group streams.
    Saves per shard the (group, first occurrence) of its cross-shard repeats; returns how many
    windows were found in more than one shard."""
    cross: list[tuple[array, array]] = [(array("q"), array("q")) for _ in range(n_shards)]
    found = 0
    if n_shards > 1:
        mins = [np.load(_shard_dir(work, s) / "group_min.npy", mmap_mode="r") for s in range(n_shards)]
        merged = heapq.merge(*(_group_stream(work, s, k) for s in range(n_shards)))
        for _, members in itertools.groupby(merged, key=lambda t: t[0]):
            first = next(members)
            rest = list(members)
            if not rest:
                continue  # a window no other shard has (equal windows of one shard are one group)
            found += 1
            group = [first, *rest]
            gmin = min(int(mins[s][g]) for _, s, g in group)
            for _, s, g in group:
                cross[s][0].append(g)
                cross[s][1].append(gmin)
    for s, (groups, gmins) in enumerate(cross):
        np.save(
            _shard_dir(work, s) / "cross.npy",
            np.stack([np.frombuffer(groups, np.int64), np.frombuffer(gmins, np.int64)]) if groups else np.zeros((2, 0), np.int64),
            allow_pickle=False,
        )
    return found


def init_first(work: Path, units: int, chunk: int = 1 << 22) -> None:
    """`work/first.npy`: one int64 per unit, all -1 (no repeat yet), written a chunk at a time."""
    first = np.lib.format.open_memmap(work / "first.npy", mode="w+", dtype=np.int64, shape=(units,))
    for lo in range(0, units, chunk):
        first[lo : lo + chunk] = -1
        first.flush()  # written back: the dirty pages do not pile up in this task either
    del first


def resolve_shard(work: Path, s: int) -> None:
    """Write the first occurrence of every repeated window of shard `s` into `first.npy`."""
    d = _shard_dir(work, s)
    sizes = np.load(d / "group_sizes.npy")
    gmin = np.load(d / "group_min.npy")
    groups, cross_min = np.load(d / "cross.npy")
    repeated = sizes >= 2
    repeated[groups] = True
    gmin[groups] = np.minimum(gmin[groups], cross_min)
    first = np.load(work / "first.npy", mmap_mode="r+")
    first[np.load(d / "gpos_sorted.npy")] = np.repeat(np.where(repeated, gmin, -1), sizes)
    first.flush()


def build_index(work: Path, k: int, shard_tokens: int, run: Callable[..., Any] | None = None) -> dict[str, int]:
    """From the unit store in `work` to `work/first.npy`; `run(fn, args_list)` maps a function
    over argument tuples (an executor's map; default: in this process)."""
    run = run or (lambda fn, args: [fn(*a) for a in args])
    bases = np.load(work / "bases.npy", mmap_mode="r")  # 8 bytes per document: paged, not held
    shards = plan_shards(bases, shard_tokens)
    inside = run(build_shard, [(work, s, lo, hi, k) for s, (lo, hi) in enumerate(shards)])
    across = run(merge_shards, [(work, len(shards), k)])[0]  # a task: the caller holds nothing
    run(init_first, [(work, int(bases[-1]))])  # a task: filling it maps 8 bytes per unit
    run(resolve_shard, [(work, s) for s in range(len(shards))])
    return {
        "units": int(bases[-1]),
        "docs": len(bases) - 1,
        "shards": len(shards),
        "groups_inside_shards": int(sum(inside)),
        "groups_across_shards": across,
    }


def find_repeats(docs: Sequence[np.ndarray], k: int, shard_tokens: int, work: Path) -> tuple[np.ndarray, np.ndarray]:
    """`first` (global position of each window's first occurrence, -1: not repeated) and the
    document bases, for documents given as unit-value arrays; files go under `work`."""
    write_store(work, docs)
    build_index(work, k, shard_tokens)
    return np.load(work / "first.npy"), np.load(work / "bases.npy")


# --------------------------------------------------------------------------- per document
def _cover(starts: np.ndarray, n: int, k: int) -> np.ndarray:
    """Units covered by the windows starting at `starts` (each k long)."""
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, starts, 1)
    np.add.at(diff, np.minimum(starts + k, n), -1)
    return np.cumsum(diff[:-1]) > 0


def all_copies_mask(first: np.ndarray, k: int) -> np.ndarray:
    """Units inside any repeated window, every copy included (the reference tool's removal)."""
    return _cover(np.flatnonzero(first >= 0), len(first), k)


def later_copies_mask(first: np.ndarray, base: int, k: int) -> np.ndarray:
    """Units inside a repeated window that is not the window's first occurrence (what we remove);
    `first` is one document's slice, `base` its global position."""
    pos = base + np.arange(len(first))
    return _cover(np.flatnonzero((first >= 0) & (first != pos)), len(first), k)


def removal_runs(first: np.ndarray, base: int, k: int, units: Units) -> list[Span]:
    """The maximal runs of units to remove from one document, with their character spans."""
    mask = later_copies_mask(first, base, k)
    if not mask.any():
        return []
    edges = np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8))
    spans: list[Span] = []
    for i, j in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
        # A run's first unit is where its first removed window starts: name that window's first copy.
        sp = Span(int(i), int(j), int(units.starts[i]), int(units.cut_ends[j - 1]), int(first[i]))
        if spans and sp.char_start < spans[-1].char_end:  # bytes of one character in two runs
            sp = spans.pop()._replace(j=sp.j, char_end=sp.char_end)
        spans.append(sp)
    return spans


def cut(text: str, spans: Sequence[Span]) -> str:
    """The text without the spans (sorted, disjoint)."""
    parts, at = [], 0
    for sp in spans:
        parts.append(text[at : sp.char_start])
        at = sp.char_end
    parts.append(text[at:])
    return "".join(parts)


def removed_share(text: str, spans: Sequence[Span]) -> float:
    """Share of the text's characters inside the spans."""
    return sum(sp.char_end - sp.char_start for sp in spans) / len(text) if text else 0.0


def locate(position: int, bases: np.ndarray) -> tuple[int, int]:
    """(document index, unit offset) of a global position."""
    doc = int(np.searchsorted(bases, position, side="right")) - 1
    return doc, position - int(bases[doc])


# --------------------------------------------------------------------------- rejections
def span_rejection(sp: Span, other_id: str, other_offset: int, cfg: SubstringDedupConfig) -> Rejection:
    """The `_rejected` row of one cut span: value = its length in units."""
    return Rejection(
        STEP,
        RULE_SPAN,
        format_value(sp.j - sp.i),
        f"chars [{sp.char_start}, {sp.char_end}) (units [{sp.i}, {sp.j})) of the text entering "
        f"{STEP} repeat spans of >= {cfg.k} {cfg.unit} units; first copy of its first window: "
        f"document {other_id} at unit {other_offset}",
    )


def share_rejection(share: float, spans: Sequence[Span], other_id: str, cfg: SubstringDedupConfig) -> Rejection:
    """The rejection of a document whose repeated share exceeds max_dup_share."""
    return Rejection(
        STEP,
        RULE_SHARE,
        format_value(share),
        f"{share:.1%} of its characters ({len(spans)} span(s)) are later copies of spans of >= "
        f"{cfg.k} {cfg.unit} units (first: document {other_id}); max_dup_share {cfg.max_dup_share}",
    )


def too_short_rejection(n_chars: int, min_chars: int, n_spans: int) -> Rejection:
    """The rejection of a document that cutting its spans left under CurateConfig.min_chars."""
    return Rejection(
        STEP,
        RULE_TOO_SHORT,
        format_value(n_chars),
        f"{n_chars} characters left after cutting {n_spans} repeated span(s); the minimum is {min_chars}",
    )
