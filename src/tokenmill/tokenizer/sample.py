"""The tokenizer's training sample, stratified by bucket: a byte budget per bucket, a seeded
random choice of whole documents inside each bucket.

A bucket's budget comes from `tokenizer.bucket_bytes` when set, else from `sample_bytes` in
proportion to the bucket's training bytes. The choice depends only on the seed, the bucket name
and the documents' ids and sizes (not on their order or on how the bucket is cut into parts),
so a rerun trains on the same text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xxhash

from tokenmill.data.dedup.spill import Spill, partitions_for, range_partition
from tokenmill.tokenizer.config import TokenizerConfig
from tokenmill.errors import UserError


class SampleConfigError(UserError, ValueError):
    """`tokenizer.bucket_bytes` names a bucket the curated data does not have."""


def bucket_budgets(train_bytes: dict[str, int], cfg: TokenizerConfig) -> dict[str, int]:
    """Bytes to sample from each bucket, never more than the bucket has."""
    if cfg.bucket_bytes is not None:
        unknown = sorted(set(cfg.bucket_bytes) - set(train_bytes))
        if unknown:
            raise SampleConfigError(
                f"tokenizer.bucket_bytes: unknown bucket(s) {unknown}; curated buckets are {sorted(train_bytes)}"
            )
        return {b: min(max(cfg.bucket_bytes.get(b, 0), 0), n) for b, n in train_bytes.items()}
    total = sum(train_bytes.values())
    if total <= cfg.sample_bytes:
        return dict(train_bytes)
    return {b: n * cfg.sample_bytes // total for b, n in train_bytes.items()}


def doc_priorities(ids: list[str], seed: int, bucket: str) -> np.ndarray:
    """A uniform 64-bit priority per document, fixed by (seed, bucket, id): the sample's random order."""
    salt = xxhash.xxh64_intdigest(f"{bucket}\0{seed}".encode("utf-8"), seed=0x70C)
    return np.fromiter((xxhash.xxh64_intdigest(i.encode("utf-8"), seed=salt) for i in ids), dtype=np.uint64, count=len(ids))


class Greedy:
    """Takes documents, offered in priority order, while they fit: `left` bytes of budget remain."""

    def __init__(self, budget: int, smallest: int):
        self.left, self.smallest = int(budget), int(smallest)

    @property
    def done(self) -> bool:
        """Nothing more can fit: the rest of the order need not be read."""
        return self.left < self.smallest

    def take(self, sizes: np.ndarray) -> np.ndarray:
        """Which of these (next in the order) are taken."""
        keep = np.zeros(sizes.size, dtype=bool)
        for i, size in enumerate(sizes.tolist()):
            if self.done:
                break
            if size <= self.left:
                keep[i] = True
                self.left -= size
        return keep


def select_documents(ids: list[str], sizes: np.ndarray, budget: int, seed: int, bucket: str) -> np.ndarray:
    """Boolean mask over a bucket's documents: a seeded random subset of at most `budget` bytes.

    Documents are visited in the order of their priority (`doc_priorities`, ties by size) and
    taken while they fit, so one large document early in the order does not end the sample far
    below its budget. Empty documents add nothing and are never taken. The rule on arrays in
    memory; `BucketSample` applies the same one to a bucket on disk."""
    sizes = np.asarray(sizes, dtype=np.int64)
    keep = np.zeros(sizes.size, dtype=bool)
    text = np.flatnonzero(sizes > 0)
    if text.size == 0:
        return keep
    priority = doc_priorities([ids[i] for i in text], seed, bucket)
    order = text[np.lexsort((sizes[text], priority))]
    keep[order] = Greedy(budget, int(sizes[text].min())).take(sizes[order])
    return keep


PRIORITY = np.dtype([("priority", "<u8"), ("size", "<i8")])


class BucketSample:
    """`select_documents` for a bucket of any size, in three passes with bounded memory.

    add     the training documents, batch by batch: their (priority, size) go to partition files
            by priority range (partition order is priority order); counts and sizes are summed
    choose  the budget known, the partitions are read in order, each sorted alone, and `Greedy`
            runs until nothing more fits; the chosen priorities, ascending, go to one file
    chosen  a batch's documents that are in the sample: a binary search of that file (memmapped)

    Memory: one batch, or one partition of ~`per_partition` documents (16 bytes each); never a
    list of the bucket's documents."""

    def __init__(self, work: Path, bucket: str, seed: int, n_docs: int, per_partition: int):
        self.work, self.bucket, self.seed = work, bucket, seed
        self.spill = Spill(work / "priority", PRIORITY, partitions_for(n_docs, per_partition))
        self.train_docs = self.train_bytes = self.docs = self.bytes = 0
        self.smallest: int | None = None  # of the non-empty training documents
        self._chosen: np.ndarray | None = None

    def add(self, ids: list[str], sizes: np.ndarray) -> None:
        self.train_docs += len(ids)
        self.train_bytes += int(sizes.sum())
        text = np.flatnonzero(sizes > 0)
        if text.size == 0:
            return
        smallest = int(sizes[text].min())
        self.smallest = smallest if self.smallest is None else min(self.smallest, smallest)
        rec = np.empty(text.size, dtype=PRIORITY)
        rec["priority"], rec["size"] = doc_priorities([ids[i] for i in text], self.seed, self.bucket), sizes[text]
        self.spill.write(rec, range_partition(rec["priority"], self.spill.n))

    def choose(self, budget: int) -> None:
        path = self.work / "chosen.u64"
        with open(path, "wb") as out:
            greedy = Greedy(budget, self.smallest if self.smallest is not None else budget + 1)
            for p in range(self.spill.n):
                if greedy.done:
                    break
                rec = np.sort(self.spill.read(p), order=["priority", "size"])
                take = greedy.take(rec["size"])
                out.write(rec["priority"][take].tobytes())
                self.docs += int(take.sum())
                self.bytes += int(rec["size"][take].sum())
        self._chosen = np.memmap(path, dtype=np.uint64, mode="r") if self.docs else np.empty(0, dtype=np.uint64)

    def chosen(self, ids: list[str], sizes: np.ndarray) -> np.ndarray:
        """Mask over a batch of training documents: those in the sample."""
        assert self._chosen is not None, "choose() first"
        keep = sizes > 0
        if self._chosen.size == 0 or not keep.any():
            return np.zeros(len(ids), dtype=bool)
        priority = doc_priorities(ids, self.seed, self.bucket)
        at = np.minimum(np.searchsorted(self._chosen, priority), self._chosen.size - 1)
        return keep & (np.asarray(self._chosen[at]) == priority)
