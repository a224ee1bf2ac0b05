"""Spill files: fixed-width numpy records appended partitioned by key to P files on disk, for
tasks that write many batches before any reader (dedup/shuffle.py is the Arrow form for tasks on
the curation executor). Writers in other processes each take a `writer(tag)` view: their own
file per partition, so no two processes append to one file, and a reader concatenates a
partition's files in tag order (the order a single writer would have written them in).

The pattern of every global step at scale (docs/architecture.md): map tasks append their records to the
partition their key hashes (or ranges) to, then one task per partition reads that file alone
and decides. A task's memory is one partition, so the corpus size is bounded by disk: choose P
with `partitions_for` from the number of records and how many one task may hold.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np

from tokenmill.data.dedup.shuffle import hash_partition


def partitions_for(n_records: int, per_partition: int) -> int:
    """How many partitions keep each at about `per_partition` records (at least one)."""
    return max(1, -(-int(n_records) // max(1, int(per_partition))))


__all__ = ["Spill", "hash_partition", "partitions_for", "range_partition"]


def range_partition(keys: np.ndarray, n: int) -> np.ndarray:
    """Partition of each uint64 key by its range: partition order is key order (for a pass that
    must visit the keys from the lowest up, one partition at a time)."""
    return ((keys.astype(np.uint64) >> np.uint64(32)) * np.uint64(n) >> np.uint64(32)).astype(np.int64)


class Spill:
    """Records of one dtype in `n` partition files under `root` (created empty)."""

    def __init__(self, root: Path, dtype: np.dtype, n: int):
        self.root, self.dtype, self.n = root, np.dtype(dtype), n
        self.tag = ""
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)

    def writer(self, tag: int) -> "Spill":
        """This spill for one writer among several (a task in another process): it appends to
        files of its own, read after those of lower tags."""
        view = copy.copy(self)
        view.tag = f"-{tag:09d}"
        return view

    def _path(self, p: int) -> Path:
        return self.root / f"{p:05d}{self.tag}.bin"

    def _paths(self, p: int) -> list[Path]:
        own = self.root / f"{p:05d}.bin"
        return sorted(self.root.glob(f"{p:05d}-*.bin")) + ([own] if own.exists() else [])

    def write(self, records: np.ndarray, partition: np.ndarray) -> None:
        """Append each record to its partition's file (records keep their order within one)."""
        order = np.argsort(partition, kind="stable")
        ends = np.cumsum(np.bincount(partition, minlength=self.n))
        start = 0
        for p, end in enumerate(ends):
            if end > start:
                with open(self._path(p), "ab") as f:
                    f.write(records[order[start:end]].tobytes())
            start = int(end)

    def read(self, p: int) -> np.ndarray:
        """Every record of partition p: each writer's in the order written, writers by tag."""
        chunks = [np.fromfile(path, dtype=self.dtype) for path in self._paths(p)]
        return np.concatenate(chunks) if chunks else np.empty(0, dtype=self.dtype)
