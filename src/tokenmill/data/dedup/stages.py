"""Exact, near-duplicate and line dedup of a curation run as shuffle stages with bounded memory.

Each stage is a set of idempotent tasks (one per shard or per hash partition) that read and
write files under `<work>/dedup/` or `<work>/lines/`; the coordinator only maps them over the
executor and keeps O(shards + partitions) integers.

    exact    map: per shard, (exact key, g, id) of every kept row, hash-partitioned by key
             reduce: per partition, sort by (key, g): the first row of a key survives, every
             later one is `duplicate_of` it; decisions partitioned by the shard of the row
    near     map: per shard, the LSH band keys of every exact survivor, partitioned by key
             buckets: per partition, rows sharing a (band, key) paired with the next
             `bucket_window` members (as `minhash.candidate_pairs` does)
             verify: a pair join (dedup.join) brings each pair's first row to the second's
             shard; exact shingle Jaccard >= threshold (or the MinHash estimate) keeps the edge
             components: union-find over the edges only (dedup.components), or beyond one
             task's memory, partitioned star rounds (dedup.partitioned_components)
             reason: a removed member's Jaccard with its cluster's root, from their edge when
             they share one, else (a chain) from a second join that brings the root to it
    decide   per shard: exact and near decisions merged into `decisions/<shard>.parquet`
    lines    map: per shard, unit hashes of the surviving documents, hash-partitioned
             reduce: per partition, the units in >= min_docs documents (`lines/frequent/`)

The decisions are those of the single-process computation (first copy in canonical order
survives, same reasons, cluster ids and sizes) for any number of shards, partitions, workers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill import json_limits
from tokenmill.data.dedup import join
from tokenmill.data.dedup.components import components
from tokenmill.data.dedup.shuffle import files, hash_partition, read_partition, shard_of, write_partitioned
from tokenmill.data.dedup.workspace import DedupJob, chunk_bases, fixed_width, read_rows
from tokenmill.runs import atomic_write_text, temporary_name

EXACT_SCHEMA = pa.schema([("h0", pa.uint64()), ("h1", pa.uint64()), ("g", pa.int64()), ("id", pa.string())])
BAND_SCHEMA = pa.schema([("band", pa.int32()), ("key", pa.uint64()), ("g", pa.int64())])
DECISION_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("rule", pa.string()),
        ("value", pa.string()),
        ("reason", pa.string()),
        ("dup_cluster", pa.string()),
        ("dup_cluster_size", pa.int64()),
    ]
)
MEMBER_SCHEMA = pa.schema([("g", pa.int64()), ("root", pa.int64()), ("size", pa.int64())])
UNIT_SCHEMA = pa.schema([("h", pa.uint64())])
EDGE_SCHEMA = pa.schema(
    [("a", pa.int64()), ("b", pa.int64()), ("est", pa.float64()), ("ver", pa.float64()), ("a_id", pa.string())]
)
Map = Callable[..., list[Any]]


def _decisions_table(rows: dict[str, list[Any]]) -> pa.Table:
    return pa.table({name: pa.array(rows[name], DECISION_SCHEMA.field(name).type) for name in DECISION_SCHEMA.names})


# --------------------------------------------------------------------------- exact
def exact_map(job: DedupJob, shard: int) -> None:
    out = job.root / "exact" / "map" / f"{shard:05d}.arrow"
    if out.exists():
        return
    parts = []
    for _, path, base, n in chunk_bases(job.work, shard, job.shard_bases[shard]):
        t = pq.read_table(path, columns=["id", "_exact"])
        keys = fixed_width(t.column("_exact"), 16).view(np.uint64)  # (n, 2)
        parts.append(
            pa.table(
                {"h0": keys[:, 0], "h1": keys[:, 1], "g": np.arange(base, base + n, dtype=np.int64), "id": t.column("id")},
                schema=EXACT_SCHEMA,
            )
        )
    table = pa.concat_tables(parts) if parts else EXACT_SCHEMA.empty_table()
    write_partitioned(out, table, hash_partition(table.column("h0").to_numpy(), job.partitions), job.partitions)


def exact_reduce(job: DedupJob, part: int) -> None:
    """The first row of every key survives; later rows name it (their shard reads them)."""
    out = job.root / "exact" / "out" / f"{part:05d}.arrow"
    if out.exists():
        return
    t = read_partition(files(job.root / "exact" / "map"), part, EXACT_SCHEMA)
    h0, h1, g = (t.column(c).to_numpy() for c in ("h0", "h1", "g"))
    order = np.lexsort((g, h1, h0))
    h0, h1, g = h0[order], h1[order], g[order]
    ids = t.column("id").take(pa.array(order)).to_pylist() if len(order) else []
    start = np.ones(len(g), dtype=bool)
    start[1:] = (h0[1:] != h0[:-1]) | (h1[1:] != h1[:-1])
    group_start = np.flatnonzero(start)
    first = np.repeat(group_start, np.diff(np.append(group_start, len(g))))
    sizes = np.diff(np.append(group_start, len(g)))
    rows: dict[str, list[Any]] = {name: [] for name in DECISION_SCHEMA.names}
    for i in np.flatnonzero(~start).tolist():  # later copies
        kept = ids[first[i]]
        _add(rows, int(g[i]), "duplicate_of", kept, f"same normalized text as {kept}", kept, None)
    for s, size in zip(group_start[sizes > 1].tolist(), sizes[sizes > 1].tolist()):  # first copies
        _add(rows, int(g[s]), None, None, None, ids[s], int(size))
    table = _decisions_table(rows)
    write_partitioned(out, table, shard_of(table.column("index").to_numpy(), job.bases), job.n_shards)


def _add(
    rows: dict[str, list[Any]],
    index: int,
    rule: str | None,
    value: str | None,
    reason: str | None,
    cluster: str | None,
    size: int | None,
) -> None:
    for name, v in zip(DECISION_SCHEMA.names, (index, rule, value, reason, cluster, size)):
        rows[name].append(v)


def _exact_decisions(job: DedupJob, shard: int) -> pa.Table:
    if "exact_dedup" not in job.steps:
        return DECISION_SCHEMA.empty_table()
    return read_partition(files(job.root / "exact" / "out"), shard, DECISION_SCHEMA)


# --------------------------------------------------------------------------- near duplicates
def near_map(job: DedupJob, shard: int) -> None:
    from tokenmill.data.dedup.minhash import band_keys

    out = job.root / "near" / "map" / f"{shard:05d}.arrow"
    if out.exists():
        return
    cfg = job.cfg.minhash_dedup
    exact = _exact_decisions(job, shard)
    removed = np.sort(exact.filter(pc.is_valid(exact.column("rule"))).column("index").to_numpy())
    parts = []
    for _, path, base, n in chunk_bases(job.work, shard, job.shard_bases[shard]):
        g = np.arange(base, base + n, dtype=np.int64)
        alive = ~np.isin(g, removed)
        if not alive.any():
            continue
        sigs = fixed_width(pq.read_table(path, columns=["_sig"]).column("_sig"), 4 * cfg.bands * cfg.rows)
        keys = band_keys(sigs.view(np.uint32)[alive], cfg.bands, cfg.rows)  # (alive, bands)
        parts.append(
            pa.table(
                {
                    "band": np.tile(np.arange(cfg.bands, dtype=np.int32), len(keys)),
                    "key": keys.ravel(),
                    "g": np.repeat(g[alive], cfg.bands),
                },
                schema=BAND_SCHEMA,
            )
        )
    table = pa.concat_tables(parts) if parts else BAND_SCHEMA.empty_table()
    write_partitioned(out, table, hash_partition(table.column("key").to_numpy(), job.partitions), job.partitions)


def near_buckets(job: DedupJob, part: int) -> None:
    """Candidate pairs of one partition: the rows of each (band, key) bucket in index order, each
    paired with the next `bucket_window` members (every pair in a bucket of up to window+1)."""
    directory = job.root / "near" / "verify"
    name = f"{part:05d}"
    if join.pairs_written(directory, name):
        return
    t = read_partition(files(job.root / "near" / "map"), part, BAND_SCHEMA)
    band, key, g = (t.column(c).to_numpy() for c in ("band", "key", "g"))
    band, key, g = _shared_keys(band, key, g)
    same = (band[1:] == band[:-1]) & (key[1:] == key[:-1])
    firsts, seconds = [], []
    if same.any():
        member = np.zeros(len(g), dtype=bool)
        member[1:] |= same
        member[:-1] |= same
        idx = g[member]
        gid = np.cumsum(np.concatenate(([True], ~same)))[member]
        biggest = int(np.max(np.bincount(gid - gid.min())))
        for d in range(1, min(biggest - 1, job.cfg.minhash_dedup.bucket_window) + 1):
            ok = gid[:-d] == gid[d:]
            firsts.append(idx[:-d][ok])
            seconds.append(idx[d:][ok])
    a, b = _unique_pairs(
        np.concatenate(firsts) if firsts else np.zeros(0, np.int64), np.concatenate(seconds) if seconds else np.zeros(0, np.int64)
    )
    join.write_pairs(job, directory, name, a, b)


def _shared_keys(band: np.ndarray, key: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows whose key another row also has, sorted by (band, key, g). One unstable sort of
    the keys finds them (fast); only those few rows get the full three-key sort."""
    order = np.argsort(key)
    k = key[order]
    same = k[1:] == k[:-1]
    member = np.zeros(len(k), dtype=bool)
    member[1:] |= same
    member[:-1] |= same
    idx = order[member]
    sub = np.lexsort((g[idx], key[idx], band[idx]))
    idx = idx[sub]
    return band[idx], key[idx], g[idx]


def _unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (a, b) pairs sorted by a then b (a pair found in several bands counts once)."""
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    keep = np.ones(len(a), dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[keep], b[keep]


def near_verify(job: DedupJob, shard: int) -> None:
    """The candidate pairs of this shard's rows that are real duplicates: the edges, with what
    a reason needs (both Jaccards, the first row's id), so a cluster's root that is its member's
    own edge needs no second join."""
    from tokenmill.data.dedup.minhash import MinHasher, estimated_jaccard, jaccard

    out = job.root / "near" / "edges" / f"{shard:05d}.parquet"
    if out.exists():
        return
    cfg = job.cfg.minhash_dedup
    got = join.receive(job, job.root / "near" / "verify", shard, with_text=cfg.verify)
    ia, ib = got.index(got.a), got.index(got.b)
    est = estimated_jaccard(_sigs(got.rows, cfg), np.stack([ia, ib], axis=1))
    if cfg.verify:
        sets = MinHasher(cfg, seed=job_seed()).shingle_sets(got.rows.column("text").to_pylist())
        ver = np.fromiter((jaccard(sets[i], sets[j]) for i, j in zip(ia, ib)), dtype=np.float64, count=len(ia))
        keep = ver >= cfg.threshold
    else:
        ver, keep = None, est >= cfg.threshold
    ids = got.rows.column("id").take(pa.array(ia[keep]))
    _write_parquet(
        out,
        pa.table(
            {
                "a": got.a[keep],
                "b": got.b[keep],
                "est": est[keep],
                "ver": pa.array(ver[keep] if ver is not None else [None] * int(keep.sum()), pa.float64()),
                "a_id": ids,
            },
            schema=EDGE_SCHEMA,
        ),
    )


def near_components(job: DedupJob) -> None:
    """Clusters over every edge; members written by their shard. A (root, member) pair that is
    not itself an edge (a chain) goes to the reason join."""
    members_file = job.root / "near" / "members" / "00000.arrow"
    if members_file.exists():
        return
    edge_files = sorted((job.root / "near" / "edges").glob("*.parquet"))
    edges = [
        np.stack([t.column("a").to_numpy(), t.column("b").to_numpy()], axis=1)
        for t in (pq.read_table(p, columns=["a", "b"]) for p in edge_files)
    ]
    nodes, roots = components(edges)
    sizes = (
        np.bincount(np.searchsorted(nodes, roots), minlength=len(nodes))[np.searchsorted(nodes, roots)]
        if len(nodes)
        else np.zeros(0, np.int64)
    )
    moved = nodes != roots
    chained = ~_pairs_in(roots[moved], nodes[moved], np.concatenate(edges) if edges else np.zeros((0, 2), np.int64))
    join.write_pairs(job, job.root / "near" / "reason", "00000", roots[moved][chained], nodes[moved][chained])
    table = pa.table({"g": nodes, "root": roots, "size": sizes.astype(np.int64)}, schema=MEMBER_SCHEMA)
    write_partitioned(members_file, table, shard_of(nodes, job.bases), job.n_shards)


def _components(job: DedupJob, run: Map) -> dict[str, int]:
    from tokenmill.data.dedup.partitioned_components import run_components

    return run_components(job, run, near_components)


def _pairs_in(a: np.ndarray, b: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Whether each (a[i], b[i]) is a row of the (m, 2) `pairs`."""
    pair = np.dtype([("a", "<i8"), ("b", "<i8")])
    x = np.ascontiguousarray(np.stack([a, b], axis=1).astype(np.int64)).view(pair).ravel()
    y = np.ascontiguousarray(pairs.astype(np.int64)).view(pair).ravel()
    return np.isin(x, y)


def near_reasons(job: DedupJob, shard: int) -> None:
    """Each removed member of this shard with its root's id and their Jaccard (the reason):
    from the member's own edge to its root, else from the reason join."""
    from tokenmill.data.dedup.minhash import MinHasher, estimated_jaccard, jaccard, near_duplicate_rejection

    out = job.root / "near" / "reasons" / f"{shard:05d}.parquet"
    if out.exists():
        return
    cfg = job.cfg.minhash_dedup
    found: list[tuple[int, str, float, float | None]] = []  # member, root id, estimate, verified
    edges = pq.read_table(job.root / "near" / "edges" / f"{shard:05d}.parquet").to_pydict()
    members = _members(job, shard)
    root_of = dict(zip(members.column("g").to_pylist(), members.column("root").to_pylist()))
    for a, b, est, ver, a_id in zip(edges["a"], edges["b"], edges["est"], edges["ver"], edges["a_id"]):
        if root_of.get(b) == a:
            found.append((b, a_id, est, ver))
    got = join.receive(job, job.root / "near" / "reason", shard, with_text=cfg.verify)
    ia, ib = got.index(got.a), got.index(got.b)
    ids = got.rows.column("id").to_pylist()
    est = estimated_jaccard(_sigs(got.rows, cfg), np.stack([ia, ib], axis=1))
    sets = MinHasher(cfg, seed=job_seed()).shingle_sets(got.rows.column("text").to_pylist()) if cfg.verify and len(ia) else None
    for k, (i, j) in enumerate(zip(ia.tolist(), ib.tolist())):
        found.append((int(got.b[k]), ids[i], float(est[k]), jaccard(sets[i], sets[j]) if sets is not None else None))
    rows: dict[str, list[Any]] = {name: [] for name in DECISION_SCHEMA.names}
    for member, root_id, e, v in sorted(found):
        rej = near_duplicate_rejection(root_id, e, v, cfg)
        _add(rows, member, rej.rule, rej.value, rej.reason, root_id, None)
    _write_parquet(out, _decisions_table(rows))


def _members(job: DedupJob, shard: int) -> pa.Table:
    """The cluster members of a shard (g, root, size), sorted by g (one file per components task)."""
    t = read_partition(files(job.root / "near" / "members"), shard, MEMBER_SCHEMA)
    return t.take(pa.array(np.argsort(t.column("g").to_numpy(), kind="stable")))


def _sigs(rows: pa.Table, cfg: Any) -> np.ndarray:
    return fixed_width(rows.column("_sig"), 4 * cfg.bands * cfg.rows).view(np.uint32)


def job_seed() -> int:
    from tokenmill.data.dedup.minhash import PERMUTATION_SEED

    return PERMUTATION_SEED


# --------------------------------------------------------------------------- decide
def decide(job: DedupJob, shard: int) -> None:
    """Exact and near decisions of one shard merged, as the single-process computation makes
    them: a removed near-duplicate names the root of its cluster; a root's cluster size adds its
    exact copies and its near-duplicates."""
    out = job.root / "decisions" / f"{shard:05d}.parquet"
    if out.exists():
        return
    rows = {r["index"]: r for r in _exact_decisions(job, shard).to_pylist()}
    if "minhash_dedup" in job.steps:
        reasons = {r["index"]: r for r in pq.read_table(job.root / "near" / "reasons" / f"{shard:05d}.parquet").to_pylist()}
        members = _members(job, shard)
        g, root, size = (members.column(c).to_numpy() for c in ("g", "root", "size"))
        roots = g[(g == root) & (size > 1)]
        own_ids = dict(zip(roots.tolist(), read_rows(job, shard, roots, ["id"]).column("id").to_pylist()))
        for i, r, n in zip(g.tolist(), root.tolist(), size.tolist()):
            row = rows.setdefault(i, {"index": i, "dup_cluster_size": None})
            if i != r:
                reason = reasons[i]
                row.update(rule=reason["rule"], value=reason["value"], reason=reason["reason"], dup_cluster=reason["dup_cluster"])
            elif n > 1:
                row.update(dup_cluster=own_ids[i], dup_cluster_size=max(row.get("dup_cluster_size") or 0, 1) + n - 1)
    ordered = [rows[i] for i in sorted(rows)]
    _write_parquet(out, pa.Table.from_pylist(ordered, schema=DECISION_SCHEMA) if ordered else DECISION_SCHEMA.empty_table())


def load_decisions(work: Path | str, shard: int) -> dict[int, dict[str, Any]]:
    """A shard's dedup decisions by global row index (empty when no dedup step ran)."""
    path = Path(work) / "dedup" / "decisions" / f"{shard:05d}.parquet"
    return {r["index"]: r for r in pq.read_table(path).to_pylist()} if path.exists() else {}


# --------------------------------------------------------------------------- orchestration
def run_dedup(job: DedupJob, run: Map) -> dict[str, Any]:
    """Every task of exact and near dedup, in order; finished tasks are skipped (resume).
    Returns the rows, partitions and shards with the seconds each stage took."""
    done = job.root / "DONE"
    if done.exists():
        return json_limits.load_file(done)
    shards = [(job, s) for s in range(job.n_shards)]
    parts = [(job, p) for p in range(job.partitions)]
    stages: list[tuple[str, Callable[..., Any], list[tuple]]] = []
    if "exact_dedup" in job.steps:
        stages += [("exact_map", exact_map, shards), ("exact_reduce", exact_reduce, parts)]
    if "minhash_dedup" in job.steps:
        with_text = job.cfg.minhash_dedup.verify
        verify, reason = job.root / "near" / "verify", job.root / "near" / "reason"
        stages += [
            ("near_map", near_map, shards),
            ("near_buckets", near_buckets, parts),
            ("verify_send", join.send, [(job, verify, s, with_text) for s in range(job.n_shards)]),
            ("verify", near_verify, shards),
            ("components", _components, [(job, run)]),
            ("reason_send", join.send, [(job, reason, s, with_text) for s in range(job.n_shards)]),
            ("reasons", near_reasons, shards),
        ]
    stages.append(("decide", decide, shards))
    seconds: dict[str, float] = {}
    components: dict[str, int] = {}
    for name, fn, tasks in stages:
        t0 = time.perf_counter()
        if fn is _components:  # rounds of tasks, driven from here
            components = fn(*tasks[0])
        else:
            run(fn, tasks)
        seconds[name] = round(time.perf_counter() - t0, 3)
    stats = {
        "rows": int(job.shard_bases[-1]),
        "partitions": job.partitions,
        "shards": job.n_shards,
        "stage_seconds": seconds,
        **({"components": components} if components else {}),
    }
    atomic_write_text(done, json.dumps(stats))
    return stats


# --------------------------------------------------------------------------- lines
def lines_map(job: DedupJob, shard: int) -> None:
    """Unit hashes of every surviving document of the shard whose bucket takes part."""
    from tokenmill.data.dedup.lines import applies, unit_hashes

    out = Path(job.work) / "lines" / "map" / f"{shard:05d}.arrow"
    if out.exists():
        return
    decisions = load_decisions(job.work, shard)
    cfg = job.cfg.line_dedup
    hashes = []
    for _, path, base, _n in chunk_bases(job.work, shard, job.shard_bases[shard]):
        t = pq.read_table(path, columns=["text", "bucket"]).to_pylist()
        hashes += [
            unit_hashes(r["text"], cfg)
            for i, r in enumerate(t)
            if not (decisions.get(base + i) or {}).get("rule") and applies(r["bucket"], cfg)
        ]
    h = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    write_partitioned(out, pa.table({"h": h}, schema=UNIT_SCHEMA), hash_partition(h, job.partitions), job.partitions)


def lines_reduce(job: DedupJob, part: int) -> dict[str, int]:
    """The units of one partition found in at least `min_docs` documents (sorted)."""
    out = Path(job.work) / "lines" / "frequent" / f"{part:05d}.npy"
    stats = out.with_suffix(".json")
    if stats.exists():
        return json_limits.load_file(stats)
    h = read_partition(files(Path(job.work) / "lines" / "map"), part, UNIT_SCHEMA).column("h").to_numpy()
    values, counts = np.unique(h, return_counts=True)
    _save(out, values[counts >= job.cfg.line_dedup.min_docs])
    result = {"units": int(values.size), "frequent": int((counts >= job.cfg.line_dedup.min_docs).sum())}
    atomic_write_text(stats, json.dumps(result))
    return result


def run_lines(job: DedupJob, run: Map) -> dict[str, int]:
    done = Path(job.work) / "lines" / "DONE"
    if done.exists():
        return json_limits.load_file(done)
    run(lines_map, [(job, s) for s in range(job.n_shards)])
    per_part = run(lines_reduce, [(job, p) for p in range(job.partitions)])
    stats = {
        "units": sum(r["units"] for r in per_part),
        "frequent": sum(r["frequent"] for r in per_part),
        "partitions": job.partitions,
    }
    atomic_write_text(done, json.dumps(stats))
    return stats


# --------------------------------------------------------------------------- files
def _save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path, ".npy")
    np.save(tmp, array, allow_pickle=False)
    tmp.replace(path)


def _write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    pq.write_table(table, tmp)
    tmp.replace(path)
