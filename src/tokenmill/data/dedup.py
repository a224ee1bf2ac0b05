"""Exact deduplication on normalized text (seed 002 §2.5, the first layer of the cascade).

Documents arrive in the run's deterministic order (sources in config order, records sorted);
the first document with a given text is kept and every later one is removed with
rule "duplicate_of" and the kept id as its value. Near-duplicates (MinHash) are a later layer.
Memory: one 16-byte digest and one id per kept document, so it runs in a single process.
"""

from __future__ import annotations

import xxhash

from tokenmill.data.document import Rejection

VERSION = "xxh3_128-1"


def text_digest(text: str) -> bytes:
    """128 bits: at 10^9 documents the chance of any collision is about 10^-21."""
    return xxhash.xxh3_128_digest(text.encode("utf-8"))


class ExactDedup:
    """Remembers the first id seen per text; counts the duplicates each kept document has."""

    def __init__(self) -> None:
        self._first: dict[bytes, str] = {}
        self.duplicates: dict[str, int] = {}  # kept id -> how many later copies were removed

    def check(self, doc_id: str, text: str) -> Rejection | None:
        """None (and remember it) for a first occurrence; else the rejection naming the kept id."""
        digest = text_digest(text)
        kept = self._first.get(digest)
        if kept is None:
            self._first[digest] = doc_id
            return None
        # kept == doc_id happens when one input is listed twice: still the second copy.
        self.duplicates[kept] = self.duplicates.get(kept, 0) + 1
        return Rejection("exact_dedup", "duplicate_of", kept,
                         f"same normalized text as the earlier document {kept}")

    def cluster_of(self, doc_id: str) -> str | None:
        """The dup_cluster of a kept document: its own id if copies of it were removed."""
        return doc_id if doc_id in self.duplicates else None

    @property
    def n_kept(self) -> int:
        return len(self._first)

    @property
    def n_removed(self) -> int:
        return sum(self.duplicates.values())
