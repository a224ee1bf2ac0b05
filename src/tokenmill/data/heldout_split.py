"""Held-out split: which curated documents are kept out of training, tokenizer sample included.

The choice depends only on the run seed and the document id (never on order or on how many
workers read the data), so every stage that asks gets the same answer. Memorization canaries
(data.canaries) are never held out: they exist to be trained on, and leaving them out of the
candidates keeps every other document's split what it is without them.

`heldout_ids` states the rule on a list of ids. At scale no process holds a bucket's ids: a
streaming pass (`CutCounter`) reduces the bucket to one `HeldoutCut`, a (score, id) bound that
every task then applies to its own documents, with the same answer as `heldout_ids`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import xxhash

from tokenmill.data.canaries import is_canary_id
from tokenmill.data.curated import ID_BATCH, bucket_parts, curated_buckets, part_id_batches


def split_score(doc_id: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, id)."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF) / 2.0**64


def heldout_ids(doc_ids: list[str], fraction: float, min_docs: int, seed: int) -> set[str]:
    """Documents whose score is below `fraction`; at least `min_docs` (the lowest scores),
    and never the whole bucket: one document always stays for training. Canaries are never chosen."""
    doc_ids = [d for d in doc_ids if not is_canary_id(d)]
    if len(doc_ids) < 2:
        return set()
    ranked = sorted(doc_ids, key=lambda d: (split_score(d, seed), d))
    n = sum(1 for d in ranked if split_score(d, seed) < fraction)
    n = min(max(n, min_docs), len(ranked) - 1)
    return set(ranked[:n])


@dataclass(frozen=True)
class HeldoutCut:
    """A bucket's held-out set as a bound: a document is held out when (score, id) < (score, id)
    of the cut. The held set of `heldout_ids` is always a prefix of the (score, id) order, so one
    bound per bucket replaces the set of ids (`heldout_ids` equals {d : cut.holds(d)})."""

    score: float
    doc_id: str
    seed: int

    @property
    def holds_none(self) -> bool:
        return (self.score, self.doc_id) <= (0.0, "")

    def holds(self, doc_id: str) -> bool:
        return not is_canary_id(doc_id) and (split_score(doc_id, self.seed), doc_id) < (self.score, self.doc_id)


class CutCounter:
    """The streaming pass behind a `HeldoutCut`: feed a bucket's ids in any order and batches.

    Holds counts, the `min_docs + 1` lowest (score, id) and the highest: O(min_docs) memory,
    whatever the bucket's size."""

    def __init__(self, fraction: float, min_docs: int, seed: int):
        self.fraction, self.min_docs, self.seed = fraction, min_docs, seed
        self.n = 0  # non-canary documents
        self.n_below = 0  # of which scored below `fraction`
        self.lowest: list[tuple[float, str]] = []  # sorted, at most min_docs + 1
        self.highest: tuple[float, str] | None = None

    def add(self, doc_ids: Iterable[str]) -> None:
        pairs = [(split_score(d, self.seed), d) for d in doc_ids if not is_canary_id(d)]
        if not pairs:
            return
        self.n += len(pairs)
        self.n_below += sum(1 for s, _ in pairs if s < self.fraction)
        self.lowest = heapq.nsmallest(self.min_docs + 1, [*self.lowest, *pairs])
        top = max(pairs)
        self.highest = top if self.highest is None else max(self.highest, top)

    def cut(self) -> HeldoutCut:
        """The bound whose prefix is what `heldout_ids` holds out for the ids fed so far."""
        if self.n < 2:
            return HeldoutCut(0.0, "", self.seed)  # nothing scores below (0.0, "")
        n = min(max(self.n_below, self.min_docs), self.n - 1)
        if n == self.n_below:  # the common case: exactly the scores under the fraction
            return HeldoutCut(self.fraction, "", self.seed)
        if n == self.n - 1:  # every document scored under it: all but the highest
            assert self.highest is not None
            return HeldoutCut(*self.highest, self.seed)
        return HeldoutCut(*self.lowest[n], self.seed)  # min_docs lifted n: below the (n+1)-th lowest


def bucket_cuts(
    curated_dir: Path, fraction: float, min_docs: int, seed: int, batch_rows: int | None = None
) -> dict[str, HeldoutCut]:
    """Every bucket's cut, from one pass over the id column of its parts, `batch_rows` ids
    (default ID_BATCH) at a time."""
    batch_rows = batch_rows or ID_BATCH
    cuts = {}
    for bucket in curated_buckets(curated_dir):
        counter = CutCounter(fraction, min_docs, seed)
        for part in bucket_parts(curated_dir, bucket):
            for ids in part_id_batches(part, batch_rows):
                counter.add(ids)
        cuts[bucket] = counter.cut()
    return cuts
