"""Spill files: records partitioned by key, one file per writer, read back in writer order."""

from __future__ import annotations

import numpy as np

from tokenmill.data.dedup.spill import Spill, hash_partition, partitions_for

REC = np.dtype([("key", "<u8"), ("val", "<i8")])


def _records(rng: np.random.Generator, n: int, start: int) -> np.ndarray:
    out = np.empty(n, dtype=REC)
    out["key"], out["val"] = rng.integers(0, 1 << 62, n, dtype=np.uint64), np.arange(start, start + n)
    return out


def test_writer_views_read_back_as_one_writer_in_tag_order(tmp_path):
    rng = np.random.default_rng(0)
    batches = [_records(rng, int(rng.integers(0, 50)), 1000 * k) for k in range(12)]
    one = Spill(tmp_path / "one", REC, 5)
    for b in batches:
        one.write(b, hash_partition(b["key"], 5))
    many = Spill(tmp_path / "many", REC, 5)
    # writers finish in any order (as processes do); each batch its own writer, tagged by its index
    for k in rng.permutation(len(batches)):
        many.writer(int(k)).write(batches[k], hash_partition(batches[k]["key"], 5))
    for p in range(5):
        assert np.array_equal(many.read(p), one.read(p))
    # every record lands in the partition of its key, once
    got = np.concatenate([many.read(p) for p in range(5)])
    assert sorted(got["val"].tolist()) == sorted(np.concatenate(batches)["val"].tolist())
    for p in range(5):
        assert (hash_partition(many.read(p)["key"], 5) == p).all()


def test_tag_order_is_numeric_and_the_untagged_file_comes_last(tmp_path):
    s = Spill(tmp_path / "s", REC, 1)
    for tag in (10, 2, 1):
        s.writer(tag).write(np.array([(0, tag)], dtype=REC), np.zeros(1, dtype=np.int64))
    s.write(np.array([(0, -1)], dtype=REC), np.zeros(1, dtype=np.int64))
    assert s.read(0)["val"].tolist() == [1, 2, 10, -1]
    assert Spill(tmp_path / "s", REC, 1).read(0).size == 0  # a new spill starts empty


def test_partitions_for_bounds_records_per_partition():
    assert partitions_for(0, 10) == 1
    assert partitions_for(10, 10) == 1 and partitions_for(11, 10) == 2
    assert partitions_for(10**9, 1_000_000) == 1000
