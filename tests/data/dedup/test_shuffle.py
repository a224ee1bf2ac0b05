"""The shuffle files: every row in its partition's batch, in its original order; the partitioned
set answers like np.isin."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tokenmill.data.dedup.shuffle import (PartitionedSet, files, hash_partition, iter_partition, read_partition, shard_of,
                                          write_partitioned)


def test_each_partition_reads_back_its_rows_in_order(tmp_path):
    rng = np.random.default_rng(0)
    schema = pa.schema([("k", pa.uint64()), ("i", pa.int64()), ("s", pa.string())])
    tables = []
    for m in range(3):  # three map tasks, one of them empty
        n = 0 if m == 1 else 500
        t = pa.table({"k": rng.integers(0, 2**63, n).astype(np.uint64), "i": np.arange(n) + 1000 * m,
                      "s": [f"row{m}-{j}" for j in range(n)]}, schema=schema)
        write_partitioned(tmp_path / f"{m:05d}.arrow", t, hash_partition(t.column("k").to_numpy(), 7), 7)
        tables.append(t)
    assert [p.name for p in files(tmp_path)] == ["00000.arrow", "00001.arrow", "00002.arrow"]
    seen = 0
    for p in range(7):
        got = read_partition(files(tmp_path), p, schema)
        want = pa.concat_tables([t.filter(pa.array(hash_partition(t.column("k").to_numpy(), 7) == p)) for t in tables])
        assert got.equals(want)  # same rows, same order: map files in name order, rows as written
        seen += len(got)
    assert seen == 1000
    assert sum(b.num_rows for b in iter_partition(files(tmp_path), 3)) == len(read_partition(files(tmp_path), 3, schema))


def test_partitions_spread_evenly_and_shard_of_finds_the_shard():
    keys = np.arange(100_000, dtype=np.uint64)  # consecutive keys: a weak hash would clump them
    counts = np.bincount(hash_partition(keys, 16), minlength=16)
    assert counts.min() > 0.9 * counts.mean() and counts.max() < 1.1 * counts.mean()
    bases = np.array([0, 10, 10, 25])  # shard 1 is empty
    assert shard_of(np.array([0, 9, 10, 24, 25, 99]), bases).tolist() == [0, 0, 2, 2, 3, 3]


def _saved_set(directory, n_parts: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random hashes saved as a reduce writes them (one sorted array per hash partition), and
    probes: a third of them plus random non-members."""
    rng = np.random.default_rng(seed)
    members = np.unique(rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64))
    part = hash_partition(members, n_parts)
    for p in range(n_parts):
        np.save(directory / f"{p:05d}.npy", np.sort(members[part == p]))
    return members, np.concatenate([members[::3], rng.integers(0, 2**64 - 1, 3000, dtype=np.uint64)])


def test_partitioned_set_membership_equals_isin_merged_in_memory_or_memory_mapped(tmp_path):
    members, probe = _saved_set(tmp_path, 5, seed=1)
    merged, mapped = PartitionedSet.load(tmp_path, 5), PartitionedSet.load(tmp_path, 5, in_memory_bytes=1024)
    assert merged.flat is not None and mapped.flat is None  # under the limit: one array; over it: partitions
    for s in (merged, mapped):
        assert np.array_equal(s.contains(probe), np.isin(probe, members))
        assert len(s) == len(members) and not s.contains(np.zeros(0, np.uint64)).size
