"""Exact deduplication on normalized text (the first layer of the dedup cascade, docs/curation.md).

h_i = H(N(d_i)): the key of a document is the 128-bit xxh3 digest of its text after the
normalize step (NFC, line breaks, controls, whitespace), so documents that differ only in those
are equal here; casing and punctuation still count (near-duplicates are MinHash's job).

Decision: the first occurrence in canonical (shard, position) order survives and every later
copy is removed with rule "duplicate_of" and the kept id as its value. Two forms of the same rule:
- map-reduce: `exact_key` per document in the map phase; the keys hash-partitioned, each
  partition's first occurrences found by one task (dedup.stages.exact_reduce; `first_occurrence`
  is the same rule over one array of keys);
- streaming: `ExactDedup.check` in canonical order in one process.
Memory: about 160 bytes per document of one partition (the reducer) or 16 per kept document (streaming).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xxhash

from tokenmill.data.document import Rejection

VERSION = "xxh3_128-1"
STEP = "exact_dedup"
RULE = "duplicate_of"


def text_digest(text: str) -> bytes:
    """128 bits: at 10^9 documents the chance of any collision is about 10^-21."""
    return xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass"))


def exact_key(text: str) -> bytes:
    """The 16-byte exact-dedup key of a (normalized) text."""
    return text_digest(text)


def first_occurrence(keys: Sequence[bytes] | np.ndarray) -> np.ndarray:
    """For every document, the index of the first document with the same key (itself when it
    is the first): keys in canonical order, as bytes or an (n, 16) uint8 array."""
    arr = np.asarray(keys, dtype=np.uint8) if isinstance(keys, np.ndarray) else np.frombuffer(b"".join(keys), dtype=np.uint8)
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    pairs = arr.reshape(-1, 16).view(np.uint64)  # (n, 2): one row per key
    _, first, inverse = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int64)


def duplicate_rejection(kept_id: str) -> Rejection:
    """The rejection of a later copy of `kept_id`."""
    return Rejection(STEP, RULE, kept_id, f"same normalized text as the earlier document {kept_id}")


class ExactDedup:
    """Remembers the first id seen per text; counts the duplicates each kept document has."""

    def __init__(self) -> None:
        self._first: dict[bytes, str] = {}
        self.duplicates: dict[str, int] = {}  # kept id -> how many later copies were removed

    def check(self, doc_id: str, text: str) -> Rejection | None:
        """None (and remember it) for a first occurrence; else the rejection naming the kept id."""
        digest = exact_key(text)
        kept = self._first.get(digest)
        if kept is None:
            self._first[digest] = doc_id
            return None
        # kept == doc_id happens when one input is listed twice: still the second copy.
        self.duplicates[kept] = self.duplicates.get(kept, 0) + 1
        return duplicate_rejection(kept)

    def cluster_of(self, doc_id: str) -> str | None:
        """The dup_cluster of a kept document: its own id if copies of it were removed."""
        return doc_id if doc_id in self.duplicates else None

    @property
    def n_kept(self) -> int:
        return len(self._first)

    @property
    def n_removed(self) -> int:
        return sum(self.duplicates.values())
