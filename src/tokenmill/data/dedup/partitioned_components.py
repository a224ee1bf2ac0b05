"""Connected components of the verified near-duplicate edges, as one task or as shuffle rounds.

One task runs the union-find (`components.components`, ~56 bytes per edge) while the edges fit
`curate.memory_per_task`. Beyond that, each large-star and small-star step of
`components.large_star` / `small_star` is one task per hash partition of the edges (grouped by
one endpoint), and rounds repeat until a round leaves the edge set unchanged (compared by the
additive digest of `components.edge_set_digest`, summed over the partitions' inputs: the
coordinator holds three integers per round). Both ways end with the same files: the members of
every cluster (g, root = smallest node, size), partitioned by shard, and the (root, member)
pairs that are not themselves edges (chains), sent to the reason join.

Memory per task in the rounds: ~160 bytes per directed pair of its partition (the pairs, their
sorted copy, the output); P = max(dedup partitions, ceil(edges / edges per task)). A node's
neighbours all land in one partition, so one very large cluster (a hub) weighs on one task.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import json_limits
from tokenmill.data.dedup import join
from tokenmill.data.dedup.components import BYTES_PER_EDGE, edge_set_digest, large_star, small_star, unique_pairs
from tokenmill.data.dedup.shuffle import files, hash_partition, read_partition, shard_of, write_partitioned
from tokenmill.data.dedup.workspace import DedupJob
from tokenmill.runs import atomic_write_text

Map = Callable[..., list[Any]]
PAIR_SCHEMA = pa.schema([("u", pa.int64()), ("v", pa.int64())])
MEMBER_SCHEMA = pa.schema([("g", pa.int64()), ("root", pa.int64()), ("size", pa.int64())])
BYTES_PER_PAIR_ROUND = 160
MAX_ROUNDS = 64


def edges_per_task(job: DedupJob) -> tuple[int, int]:
    """(edges the single union-find may hold, edges per partition of a round)."""
    if job.cfg.component_edges_per_task is not None:
        return job.cfg.component_edges_per_task, job.cfg.component_edges_per_task
    budget = job.cfg.memory_per_task
    return budget // BYTES_PER_EDGE, budget // (2 * BYTES_PER_PAIR_ROUND)


def count_edges(job: DedupJob) -> int:
    """Rows of the verified-edge files, from their footers."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted((job.root / "near" / "edges").glob("*.parquet")))


def run_components(job: DedupJob, run: Map, single_task: Callable[[DedupJob], None]) -> dict[str, int]:
    """The clusters of the edges, by `single_task` when they fit one task, else in rounds."""
    marker = job.root / "near" / "components.json"
    if marker.exists():
        return json_limits.load_file(marker)
    n_edges = count_edges(job)
    single, per_part = edges_per_task(job)
    if n_edges <= single:
        run(single_task, [(job,)])
        stats = {"edges": n_edges, "partitions": 1, "rounds": 0}
    else:
        parts = max(job.partitions, math.ceil(n_edges / per_part))
        stats = {"edges": n_edges, "partitions": parts, "rounds": _rounds(job, run, parts)}
        shutil.rmtree(_cc(job), ignore_errors=True)  # the members and reason pairs are written
    atomic_write_text(marker, json.dumps(stats))
    return stats


def _rounds(job: DedupJob, run: Map, parts: int) -> int:
    run(seed, [(job, parts, s) for s in range(job.n_shards)])
    previous = None
    for r in range(MAX_ROUNDS):
        digests = run(large_step, [(job, parts, r, p) for p in range(parts)])
        total = (sum(d[0] for d in digests), sum(d[1] for d in digests) % 2**64, sum(d[2] for d in digests) % 2**64)
        if total == previous:  # the round before changed nothing: every component is a star
            run(members_step, [(job, parts, r, p) for p in range(parts)])
            run(chains_step, [(job, parts, p) for p in range(parts)])
            return r
        previous = total
        run(small_step, [(job, parts, r, p) for p in range(parts)])
    raise RuntimeError(f"{job.root}: connected components did not converge in {MAX_ROUNDS} rounds (a bug)")


def _cc(job: DedupJob):
    return job.root / "near" / "cc"


def _read(directory, p: int) -> tuple[np.ndarray, np.ndarray]:
    t = read_partition(files(directory), p, PAIR_SCHEMA)
    return t.column("u").to_numpy(), t.column("v").to_numpy()


def _write_both_ways(path, x: np.ndarray, m: np.ndarray, parts: int) -> None:
    """Edges (x, m) as directed pairs both ways, each in the partition of its first node."""
    u, v = np.concatenate([x, m]), np.concatenate([m, x])
    write_partitioned(path, pa.table({"u": u, "v": v}, schema=PAIR_SCHEMA), hash_partition(u, parts), parts)


def seed(job: DedupJob, parts: int, shard: int) -> None:
    """This shard's edges, both ways, as round 0's input; and keyed by their later node (the
    member side) for the chain check."""
    out = _cc(job) / "large-000" / f"{shard:05d}.arrow"
    if out.exists():
        return
    t = pq.read_table(job.root / "near" / "edges" / f"{shard:05d}.parquet", columns=["a", "b"])
    a, b = t.column("a").to_numpy(), t.column("b").to_numpy()
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    write_partitioned(
        _cc(job) / "orig" / f"{shard:05d}.arrow",
        pa.table({"u": hi, "v": lo}, schema=PAIR_SCHEMA),
        hash_partition(hi, parts),
        parts,
    )
    _write_both_ways(out, hi, lo, parts)


def large_step(job: DedupJob, parts: int, r: int, p: int) -> tuple[int, int, int]:
    """Large-star of partition p of round r; returns the digest of its (distinct) input."""
    out = _cc(job) / f"small-{r:03d}" / f"{p:05d}.arrow"
    digest_file = out.with_suffix(".json")
    if out.exists():
        return tuple(json_limits.load_file(digest_file))
    u, v = unique_pairs(*_read(_cc(job) / f"large-{r:03d}", p))
    digest = edge_set_digest(u, v)
    x, m = large_star(u, v)
    atomic_write_text(digest_file, json.dumps(digest))
    write_partitioned(out, pa.table({"u": x, "v": m}, schema=PAIR_SCHEMA), hash_partition(x, parts), parts)
    return digest


def small_step(job: DedupJob, parts: int, r: int, p: int) -> None:
    """Small-star of partition p; its edges, both ways, are round r + 1's input."""
    out = _cc(job) / f"large-{r + 1:03d}" / f"{p:05d}.arrow"
    if out.exists():
        return
    x, m = small_star(*_read(_cc(job) / f"small-{r:03d}", p))
    _write_both_ways(out, x, m, parts)


def members_step(job: DedupJob, parts: int, r: int, p: int) -> None:
    """The stars whose centre (root) falls in partition p: every member with its root and the
    cluster's size, partitioned by member."""
    out = _cc(job) / "members" / f"{p:05d}.arrow"
    if out.exists():
        return
    u, v = unique_pairs(*_read(_cc(job) / f"large-{r:03d}", p))
    centre = u < v  # (root, member) rows; the (member, root) rows are the other way of the same edges
    root, member = u[centre], v[centre]
    roots, counts = np.unique(root, return_counts=True)
    size = counts + 1
    table = pa.table(
        {
            "g": np.concatenate([roots, member]),
            "root": np.concatenate([roots, root]),
            "size": np.concatenate([size, size[np.searchsorted(roots, root)]]),
        },
        schema=MEMBER_SCHEMA,
    )
    write_partitioned(out, table, hash_partition(table.column("g").to_numpy(), parts), parts)


def chains_step(job: DedupJob, parts: int, p: int) -> None:
    """The members of partition p by shard, and their (root, member) pairs that are no edge."""
    out = job.root / "near" / "members" / f"{p:05d}.arrow"
    if out.exists():
        return
    t = read_partition(files(_cc(job) / "members"), p, MEMBER_SCHEMA)
    g, root = t.column("g").to_numpy(), t.column("root").to_numpy()
    if len(np.unique(g)) != len(g):
        raise RuntimeError(f"{job.root}: a node in two clusters after the component rounds (a bug)")
    hi, lo = _read(_cc(job) / "orig", p)
    moved = g != root
    chained = ~_pair_in(root[moved], g[moved], lo, hi)
    join.write_pairs(job, job.root / "near" / "reason", f"{p:05d}", root[moved][chained], g[moved][chained])
    write_partitioned(out, t, shard_of(g, job.bases), job.n_shards)


def _pair_in(a: np.ndarray, b: np.ndarray, pa_: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """Whether each (a[i], b[i]) is one of the pairs (pa_[j], pb[j])."""
    x = np.empty(len(a), dtype=[("a", "<i8"), ("b", "<i8")])
    x["a"], x["b"] = a, b
    y = np.empty(len(pa_), dtype=x.dtype)
    y["a"], y["b"] = pa_, pb
    return np.isin(x, y)
