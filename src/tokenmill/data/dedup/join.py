"""Pair join: for pairs (a, b) of global rows that may sit in different shards, bring a's row to
the task of b's shard, so something can be computed on both (an exact Jaccard, a reason).

    pairs     written twice, partitioned by the shard of a (`by_a/`) and of b (`by_b/`)
    send      per shard s: the rows a in s that some pair needs, read once, written partitioned
              by the receiving shard (one copy per receiving shard, not per pair)
    receive   per shard s: its pairs, its own rows b and the rows a sent to it

Memory of a receiving task: its pairs (16 bytes each) plus the rows of both ends that it takes
part in (their text and signature); nothing else of the corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from tokenmill.data.dedup.shuffle import files, read_partition, shard_of, write_partitioned
from tokenmill.data.dedup.workspace import DedupJob, read_rows

PAIR_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64())])
ROW_SCHEMA = pa.schema([("g", pa.int64()), ("id", pa.string()), ("_sig", pa.binary()), ("text", pa.string())])


def write_pairs(job: DedupJob, directory: Path, name: str, a: np.ndarray, b: np.ndarray) -> None:
    """Pairs (a[i], b[i]) under `directory`, by the sender's and by the receiver's shard."""
    table = pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(b, pa.int64())})
    write_partitioned(directory / "by_b" / f"{name}.arrow", table, shard_of(b, job.bases), job.n_shards)
    # by_a last: the receiver side exists whenever the sender side does (a resume sees both or
    # redoes the task, which checks by_a)
    write_partitioned(directory / "by_a" / f"{name}.arrow", table, shard_of(a, job.bases), job.n_shards)


def pairs_written(directory: Path, name: str) -> bool:
    return (directory / "by_a" / f"{name}.arrow").exists()


def send(job: DedupJob, directory: Path, shard: int, with_text: bool) -> None:
    """The rows of shard `shard` that pairs ask for, partitioned by the shard that needs them."""
    out = directory / "send" / f"{shard:05d}.arrow"
    if out.exists():
        return
    pairs = read_partition(files(directory / "by_a"), shard, PAIR_SCHEMA)
    a = pairs.column("a").to_numpy()
    target = shard_of(pairs.column("b").to_numpy(), job.bases)
    code = np.unique(a * job.n_shards + target)  # one copy of a row per receiving shard
    a_u, t_u = code // job.n_shards, code % job.n_shards
    wanted = np.unique(a_u)
    rows = read_rows(job, shard, wanted, ["id", "_sig"] + (["text"] if with_text else []))
    rows = rows.take(pa.array(np.searchsorted(rows.column("g").to_numpy(), a_u)))
    text = rows.column("text") if with_text else pa.nulls(len(rows), pa.string())
    table = pa.table([rows.column("g"), rows.column("id"), rows.column("_sig"), text], schema=ROW_SCHEMA)
    write_partitioned(out, table, t_u, job.n_shards)


@dataclass
class Received:
    """What a receiving shard's task holds: its pairs and the rows of both ends."""

    a: np.ndarray
    b: np.ndarray
    rows: pa.Table  # every row taking part (both ends), sorted by g, unique

    def index(self, g: np.ndarray) -> np.ndarray:
        """Positions in `rows` of global indices."""
        return np.searchsorted(self.rows.column("g").to_numpy(), g)


def receive(job: DedupJob, directory: Path, shard: int, with_text: bool) -> Received:
    """Shard `shard`'s pairs (b in the shard) with the rows of both ends."""
    pairs = read_partition(files(directory / "by_b"), shard, PAIR_SCHEMA)
    a, b = pairs.column("a").to_numpy(), pairs.column("b").to_numpy()
    incoming = read_partition(files(directory / "send"), shard, ROW_SCHEMA)
    own = read_rows(job, shard, np.unique(b), ["id", "_sig"] + (["text"] if with_text else []))
    if not with_text:
        own = own.append_column("text", pa.nulls(len(own), pa.string()))
    own = own.select(ROW_SCHEMA.names).cast(ROW_SCHEMA)
    rows = pa.concat_tables([incoming.cast(ROW_SCHEMA), own])
    g = rows.column("g").to_numpy()
    _, first = np.unique(g, return_index=True)  # a row of this shard may come both ways
    rows = rows.take(pa.array(first))
    missing = np.setdiff1d(np.union1d(a, b), rows.column("g").to_numpy())
    if len(missing):
        raise RuntimeError(
            f"dedup join {directory.name}: rows {missing[:5].tolist()} of shard {shard}'s pairs "
            "were not sent (a bug, or a work directory changed under the run)"
        )
    return Received(a, b, rows)
