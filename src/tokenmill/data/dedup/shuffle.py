"""The shuffle every global dedup step is built on: map tasks write rows partitioned by a key,
one task per partition (or per target shard) reads only its own part.

A map task writes ONE Arrow IPC file whose record batch p holds the rows of partition p (sorted
by partition, like Spark's sort-based shuffle: one data file and its index instead of one file
per partition). A reducer opens every map file memory-mapped and reads batch p alone, so it
touches only its partition's pages. Files are written under a temporary name and renamed: a
killed task leaves no half file, and a task whose file exists is finished (the resume contract).

Partitions are chosen by hashing (`hash_partition`) when the reducer groups equal keys, or by
the shard a row belongs to (`shard_of`) when the reader is the task of that shard.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from tokenmill.runs import temporary_name

_MIX = np.uint64(0x9E3779B97F4A7C15)


def hash_partition(keys: np.ndarray, n_parts: int) -> np.ndarray:
    """Partition of each 64-bit key (already a hash, or not: it is mixed again so that keys
    that share low bits still spread)."""
    x = keys.astype(np.uint64, copy=True)
    x *= _MIX
    x ^= x >> np.uint64(29)
    return (x % np.uint64(n_parts)).astype(np.int64)


def shard_of(rows: np.ndarray, shard_bases: np.ndarray) -> np.ndarray:
    """The shard of every global row index, from each shard's first row index (ascending)."""
    return np.searchsorted(shard_bases, rows, side="right").astype(np.int64) - 1


def write_partitioned(path: Path, table: pa.Table, part: np.ndarray, n_parts: int) -> None:
    """`table`'s rows as `n_parts` record batches, batch p holding the rows with part == p (in
    their original order)."""
    order = np.argsort(part, kind="stable")
    bounds = np.zeros(n_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(part, minlength=n_parts), out=bounds[1:])
    batch = _one_batch(table.take(pa.array(order)) if len(table) else table)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        for p in range(n_parts):
            writer.write_batch(batch.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    table = table.combine_chunks()
    batches = table.to_batches()
    if batches:
        return batches[0]
    return pa.RecordBatch.from_pylist([], schema=table.schema)


def read_partition(paths: Iterable[Path], p: int, schema: pa.Schema) -> pa.Table:
    """Batch p of every file (memory-mapped: only that batch's pages are read)."""
    batches = list(iter_partition(paths, p))
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def iter_partition(paths: Iterable[Path], p: int) -> Iterator[pa.RecordBatch]:
    """Batch p of every file, one file at a time (for readers that stream)."""
    for path in paths:
        reader = ipc.open_file(pa.memory_map(str(path)))
        if p >= reader.num_record_batches:
            raise RuntimeError(f"{path}: partition {p} asked of a file with {reader.num_record_batches} (a bug)")
        batch = reader.get_batch(p)
        if batch.num_rows:
            yield batch


def files(directory: Path) -> list[Path]:
    """The finished shuffle files of a directory, in name order (temporary files excluded)."""
    return sorted(directory.glob("*.arrow")) if directory.is_dir() else []


def in_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each value is in a sorted array (memory-mapped or not)."""
    if len(sorted_set) == 0:
        return np.zeros(len(values), dtype=bool)
    pos = np.searchsorted(sorted_set, values)
    pos[pos == len(sorted_set)] = 0
    return sorted_set[pos] == values


class PartitionedSet:
    """A set of 64-bit hashes stored as one sorted array per hash partition (a reduce output).
    A set of up to `in_memory_bytes` is merged into one sorted array in memory (a lookup is one
    binary search: these sets are probed once per document); a larger one stays memory-mapped,
    a lookup reading a few pages of one partition, so no task ever holds more than the limit."""

    IN_MEMORY_BYTES = 64 << 20

    def __init__(self, parts: Sequence[np.ndarray], in_memory_bytes: int = IN_MEMORY_BYTES):
        self.parts = list(parts)
        self.size = sum(len(p) for p in self.parts)
        self.flat = np.sort(np.concatenate(self.parts)) if self.size * 8 <= in_memory_bytes and self.parts else None

    @classmethod
    def load(cls, directory: Path, n_parts: int, in_memory_bytes: int = IN_MEMORY_BYTES) -> "PartitionedSet":
        return cls(
            [np.load(directory / f"{p:05d}.npy", mmap_mode="r", allow_pickle=False) for p in range(n_parts)], in_memory_bytes
        )

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Whether each hash is in the set."""
        values = np.asarray(values, dtype=np.uint64)
        if self.flat is not None or len(self.parts) == 1:
            return in_sorted(values, self.flat if self.flat is not None else self.parts[0])
        out = np.zeros(len(values), dtype=bool)
        if len(values) == 0:
            return out
        part = hash_partition(values, len(self.parts))
        for p in np.unique(part):
            sel = part == p
            out[sel] = in_sorted(values[sel], self.parts[int(p)])
        return out

    def __len__(self) -> int:
        return self.size
