"""Where the global dedup stages find the map phase's rows, and how they address them.

Every row the map phase kept has a global index g: its position in canonical (shard, chunk,
row) order. A task knows only its shard's first index (`DedupJob.shard_bases`, one integer per
shard); the chunk offsets inside a shard it reads from its own files' metadata. So the
coordinator holds O(shards) integers, never a list of documents or chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.data.config import CurateConfig

# Bytes a task may hold per row of a partition, per stage: sets how many partitions a budget
# needs (measured on the 1M-document benchmark; see docs/curation.md "Memory per task").
EXACT_BYTES_PER_ROW = 160
NEAR_BYTES_PER_ROW = 120  # per band key (95 measured at 200k documents, BENCHMARKS.md)
LINE_BYTES_PER_UNIT = 48


def dedup_partitions(cfg: CurateConfig, rows: int) -> int:
    """Hash partitions for `rows` kept rows: enough that the largest reducer (the LSH buckets,
    one record per band of every row) stays within `memory_per_task`, and one per worker."""
    if cfg.dedup_partitions is not None:
        return cfg.dedup_partitions
    per_row = max(EXACT_BYTES_PER_ROW, NEAR_BYTES_PER_ROW * cfg.minhash_dedup.bands)
    # at least one partition per worker: a lone reducer would leave the other cores idle
    return max(cfg.workers, -(-rows * per_row // cfg.memory_per_task))


@dataclass(frozen=True)
class DedupJob:
    """What every global dedup task needs (picklable, small: O(shards))."""

    work: str  # the curation work directory
    cfg: CurateConfig
    steps: tuple[str, ...]
    shard_bases: tuple[int, ...]  # first global row of each shard, then the total
    partitions: int  # hash partitions of every shuffle

    @property
    def n_shards(self) -> int:
        return len(self.shard_bases) - 1

    @property
    def bases(self) -> np.ndarray:
        """First global row of each shard (for `shuffle.shard_of`)."""
        return np.asarray(self.shard_bases[:-1], dtype=np.int64)

    @property
    def root(self) -> Path:
        return Path(self.work) / "dedup"


def final_dir(work: Path | str) -> Path:
    """Where the final phase writes the kept rows (one directory per bucket) and the rejected ones."""
    return Path(work) / "final"


def map_dir(work: Path | str, shard: int) -> Path:
    return Path(work) / "map" / f"{shard:05d}"


def shard_chunks(work: Path | str, shard: int) -> list[tuple[int, Path]]:
    """(chunk number, file) of the shard's map-phase chunks, in order."""
    return [(int(p.stem.split("-")[1]), p) for p in sorted(map_dir(work, shard).glob("chunk-*.parquet"))]


def shard_rows(work: Path | str, shard: int) -> int:
    """Rows the map phase kept in a shard (file metadata only)."""
    return sum(pq.ParquetFile(p).metadata.num_rows for _, p in shard_chunks(work, shard))


def chunk_bases(work: Path | str, shard: int, base: int) -> Iterator[tuple[int, Path, int, int]]:
    """(chunk, file, global index of its first row, rows) of a shard's chunks."""
    for k, path in shard_chunks(work, shard):
        n = pq.ParquetFile(path).metadata.num_rows
        yield k, path, base, n
        base += n


def fixed_width(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    """A binary column whose values are all `width` bytes, as one (n, width) uint8 array without
    a Python object per value."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(arr) == 0:
        return np.zeros((0, width), dtype=np.uint8)
    if arr.null_count:
        raise RuntimeError(f"dedup: a key column has {arr.null_count} empty values (a bug)")
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    if not np.all(np.diff(offsets) == width):
        raise RuntimeError(f"dedup: key column values are not all {width} bytes (a bug)")
    data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
    return data.reshape(-1, width)


def read_rows(job: DedupJob, shard: int, wanted: np.ndarray, columns: list[str]) -> pa.Table:
    """The rows of a shard whose global index is in `wanted` (sorted unique), with a `g` column;
    only the chunks that hold one are read."""
    parts = []
    for _, path, base, n in chunk_bases(job.work, shard, job.shard_bases[shard]):
        lo, hi = np.searchsorted(wanted, [base, base + n])
        if lo == hi:
            continue
        local = wanted[lo:hi] - base
        t = pq.read_table(path, columns=columns).take(pa.array(local))
        parts.append(t.append_column("g", pa.array(wanted[lo:hi], pa.int64())))
    if not parts:
        return pa.table({c: pa.array([], _column_type(c)) for c in columns} | {"g": pa.array([], pa.int64())})
    return pa.concat_tables(parts)


def _column_type(name: str) -> pa.DataType:
    return {"id": pa.string(), "text": pa.string(), "_sig": pa.binary(), "_exact": pa.binary(), "bucket": pa.string()}.get(
        name, pa.string()
    )
