"""The curation stage: sources -> shards -> per-document steps -> corpus-wide dedup -> output.

    plan     inputs split into shards (data.shards), fixed by the inputs, not by the workers
    ids      sources whose records carry their own ids are read once: an id that more than one
             record carries is not used as a document id (data.doc_ids)
    prepare  steps that need a model or an index build it once (model_quality, decontaminate)
    map      per shard, chunk by chunk: read, extract, normalize, url, langid, quality,
             model_quality, safety, pii; each kept row also carries its exact-dedup key and
             MinHash signature
    dedup    exact duplicates (first in canonical order survives), then MinHash + LSH near
             duplicates over the survivors (band buckets grouped across shards), verified
    lines    units (lines / paragraphs) repeated across many documents, counted corpus-wide
    substr   (substring_dedup.enabled) units of the surviving text, per-shard suffix arrays,
             merged: the first occurrence of every repeated k-unit window (data.substring_dedup)
    final    per shard: apply the dedup decisions, remove boilerplate units, cut repeated spans
             (or drop mostly-repeated documents), decontaminate,
             assign buckets, write `OUT/<bucket>/part-<shard>-<chunk>.parquet`
    canary   optional memorization canaries (data.canaries) added to the output, after every
             step so dedup cannot remove their repetitions; counted in the funnel
    publish  `_funnel.json`, `_decontamination.json`, `_canaries.json`, then the work is renamed
             into place

Every phase writes under a work directory beside the output and marks each finished chunk,
shard and phase; a killed run started again redoes only unfinished chunks, so no document is
processed twice, duplicated or lost, even inside one huge input file. The output depends only
on the inputs and the config, never on the number of workers or the executor.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tokenmill.data.config import (CurateConfig, SourceConfig)
from tokenmill.data import sources as source_step
from tokenmill.data.canaries import canary_bucket, insert_canaries
from tokenmill.data.doc_ids import STEP as HASH_ID_STEP, IdRule, collect_shard, merge as merge_ids
from tokenmill.data.document import (DOC_SCHEMA, REJECTED_SCHEMA, Doc, RawRecord, Rejection, format_value,
                                     fsync_tree, text_bytes)
from tokenmill.data.readers import get_reader
from tokenmill.data.executor import make_executor
from tokenmill.data.funnel import Funnel, StepMark
from tokenmill.data.registry import CORPUS_STEPS, FINAL_STEPS, MAP_STEPS, build_doc_steps, selected_steps
from tokenmill.data.shards import ShardSpec, plan_shards, read_shard
from tokenmill.data.step import DocStep
from tokenmill.errors import UserError
from tokenmill.runs import EventLog, RunDir, atomic_write_text, sha256_json

STAGE = "curate"
REJECTED_DIR = "_rejected"
FUNNEL_FILE = "_funnel.json"
DECONTAMINATION_FILE = "_decontamination.json"
MAP_SCHEMA = pa.schema([*DOC_SCHEMA, pa.field("_format", pa.string()), pa.field("_exact", pa.binary()),
                        pa.field("_sig", pa.binary())])
# Settings that change how the work runs, never what it produces: a resumed run may change them.
EXECUTION_KNOBS = {"workers", "executor", "max_removal_share", "allow_empty_bucket"}
# MinHash permutations are fixed, not drawn from the run seed: signatures of the same text stay
# comparable across runs and corpora (dedup against an earlier crawl needs that).
MINHASH_SEED = 0


class CurationStopped(UserError):
    """A step removed more than allowed, or left a bucket empty: the run stops before publishing."""


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to process one shard (picklable, sent with every task)."""

    cfg: CurateConfig
    steps: tuple[str, ...]  # selected steps, canonical order
    work: str
    base_dir: str

    @property
    def funnel_steps(self) -> tuple[str, ...]:
        return ("read", *self.steps)

    @property
    def sources(self) -> list[SourceConfig]:
        return list(self.cfg.sources)


# --------------------------------------------------------------------------- small helpers
def _batched(items: Iterable[Any], n: int) -> Iterator[list[Any]]:
    it = iter(items)
    while batch := list(islice(it, n)):
        yield batch


def _write_table(rows: list[dict[str, Any]], schema: pa.Schema, path: Path) -> None:
    """Write a whole Parquet file under a temporary name, fsync, rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp, compression="zstd")
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _mark(path: Path, data: dict[str, Any] | None = None) -> None:
    atomic_write_text(path, json.dumps(data or {}))


_STEP_CACHE: dict[tuple[str, tuple[str, ...]], list[DocStep]] = {}


def _worker_steps(job: Job, names: tuple[str, ...]) -> dict[str, DocStep]:
    """The enabled steps among `names`, set up once per worker process and reused."""
    key = (job.work, names)
    if key not in _STEP_CACHE:
        steps = build_doc_steps(names, job.cfg, Path(job.base_dir))
        for step in steps:
            step.setup(Path(job.work) / "prepared")
        _STEP_CACHE[key] = steps
    return {s.name: s for s in _STEP_CACHE[key]}


def run_doc_steps(doc: Doc, names: tuple[str, ...], steps: dict[str, DocStep], marks: list[StepMark]) -> Rejection | None:
    """Pass a document through the named steps; a disabled or out-of-scope step passes it."""
    for name in names:
        n = text_bytes(doc.text)
        step = steps.get(name)
        if step is None or not step.applies(doc):
            marks.append(StepMark(name, n, n, False))
            continue
        rejection = step.process(doc)
        if rejection is not None:
            marks.append(StepMark(name, n, 0, True, rejection.rule))
            return rejection
        doc.lineage.append((name, step.version))
        marks.append(StepMark(name, n, text_bytes(doc.text), True))
    return None


def _record(funnel: Funnel, bucket: str, marks: list[StepMark]) -> None:
    for mark in marks:
        funnel.record(bucket, mark)


# --------------------------------------------------------------------------- ids phase
def _ids_dir(job: Job) -> Path:
    return Path(job.work) / "ids"


def _carries_ids(job: Job, spec: ShardSpec) -> bool:
    src = job.sources[spec.source]
    return src.kind == "files" and any(get_reader(source_step.file_format(src, Path(f))).carries_ids
                                       for f in spec.files)


def collect_ids_shard(job: Job, spec: ShardSpec) -> None:
    """The hashes of one shard's record ids (and how many were unusable), saved for the merge."""
    out = _ids_dir(job) / f"{spec.index:05d}.npz"
    if out.exists():
        return
    hashes, unusable = collect_shard(read_shard(spec, job.sources, job.cfg.max_doc_bytes))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez(tmp, hashes=hashes, unusable=np.array(unusable, dtype=np.int64))
    os.replace(tmp, out)


def ids_phase(job: Job, specs: list[ShardSpec], executor: Any) -> dict[str, int] | None:
    """Which record ids more than one record carries, over the shards whose formats carry ids;
    None when no source can carry ids (nothing is read)."""
    idir = _ids_dir(job)
    if (idir / "DONE").exists():
        return json.loads((idir / "DONE").read_text()) or None
    with_ids = [s for s in specs if _carries_ids(job, s)]
    executor.map(collect_ids_shard, [(job, s) for s in with_ids])
    per_source: dict[int, list[np.ndarray]] = {}
    unusable = 0
    for spec in with_ids:
        saved = np.load(idir / f"{spec.index:05d}.npz")
        per_source.setdefault(spec.source, []).append(saved["hashes"])
        unusable += int(saved["unusable"])
    shared, stats = merge_ids(per_source)
    idir.mkdir(parents=True, exist_ok=True)
    np.save(idir / "shared.npy", shared, allow_pickle=False)
    stats = {**stats, "shared": int(shared.size), "unusable": unusable} if with_ids else {}
    _mark(idir / "DONE", stats)
    return stats or None


# --------------------------------------------------------------------------- map phase
def _map_dir(job: Job, shard: int) -> Path:
    return Path(job.work) / "map" / f"{shard:05d}"


def map_shard(job: Job, spec: ShardSpec) -> dict[str, int]:
    """Per-document steps over one shard, chunk by chunk; finished chunks are never redone."""
    sdir = _map_dir(job, spec.index)
    if (sdir / "DONE").exists():
        return json.loads((sdir / "DONE").read_text())
    names = tuple(s for s in job.steps if s in MAP_STEPS)
    steps = _worker_steps(job, names)
    hasher = _minhasher(job) if "minhash_dedup" in job.steps else None
    id_rule = IdRule.load(_ids_dir(job))
    docs = 0
    records = read_shard(spec, job.sources, job.cfg.max_doc_bytes)
    for k, chunk in enumerate(_batched(records, job.cfg.chunk_docs)):
        docs += len(chunk)
        if (sdir / f"chunk-{k:05d}.done").exists():
            continue  # reading past it is cheap; processing it again is what resume avoids
        _map_chunk(job, spec.index, k, chunk, names, steps, hasher, id_rule)
    summary = {"docs": docs}
    _mark(sdir / "DONE", summary)
    return summary


def _map_chunk(job: Job, shard: int, k: int, chunk: list[RawRecord], names: tuple[str, ...],
               steps: dict[str, DocStep], hasher: Any, id_rule: IdRule) -> None:
    from tokenmill.data.dedup import exact_key

    funnel = Funnel(job.funnel_steps)
    kept: list[Doc] = []
    rejected: list[dict[str, Any]] = []
    for raw in chunk:
        doc_id, not_taken = id_rule.decide(raw)
        doc = Doc.from_raw(raw, doc_id)
        if doc_id != raw.id:  # the user's id: the hash stays in the lineage
            doc.lineage.append((HASH_ID_STEP, raw.id))
        bucket = doc.bucket
        id_kind = None if raw.record_id is None else (not_taken or "user")
        funnel.source_in(doc.source, bucket, raw.n_bytes, raw.encoding.name if raw.encoding else None, id_kind)
        if raw.problem is not None:
            funnel.record(bucket, StepMark("read", raw.n_bytes, 0, True, raw.problem.rule))
            rejected.append(doc.rejected_row(raw.problem))
            continue
        marks = [StepMark("read", raw.n_bytes, text_bytes(doc.text), True)]
        doc.lineage.append(("read", source_step.VERSION))
        if raw.encoding is not None:  # the decode step, named with the encoding it used
            doc.lineage.append(("decode", raw.encoding.name))
        rejection = run_doc_steps(doc, names, steps, marks)
        _record(funnel, bucket, marks)
        if rejection is not None:
            rejected.append(doc.rejected_row(rejection))
        else:
            kept.append(doc)
    sigs = hasher.signatures([d.text for d in kept]) if hasher is not None and kept else None
    rows = []
    for i, doc in enumerate(kept):
        rows.append({**doc.row(), "_format": doc.format,
                     "_exact": exact_key(doc.text) if "exact_dedup" in job.steps else None,
                     "_sig": sigs[i].tobytes() if sigs is not None else None})
    sdir = _map_dir(job, shard)
    _write_table(rows, MAP_SCHEMA, sdir / f"chunk-{k:05d}.parquet")
    _write_table(rejected, REJECTED_SCHEMA, _final_dir(job) / REJECTED_DIR / f"part-{shard:05d}-{k:05d}-a.parquet")
    atomic_write_text(sdir / f"chunk-{k:05d}.funnel.json", json.dumps(funnel.to_dict()))
    _mark(sdir / f"chunk-{k:05d}.done")


def _minhasher(job: Job) -> Any:
    from tokenmill.data.minhash import MinHasher

    return MinHasher(job.cfg.minhash_dedup, seed=MINHASH_SEED)


def map_chunks(job: Job, specs: list[ShardSpec]) -> list[tuple[int, int, Path]]:
    """(shard, chunk, path) of every map-phase chunk, in canonical order."""
    out = []
    for spec in specs:
        for path in sorted(_map_dir(job, spec.index).glob("chunk-*.parquet")):
            out.append((spec.index, int(path.stem.split("-")[1]), path))
    return out


# --------------------------------------------------------------------------- dedup phase
def dedup_phase(job: Job, specs: list[ShardSpec], executor: Any) -> None:
    """Exact then near-duplicate decisions over every kept row, in canonical order."""
    ddir = Path(job.work) / "dedup"
    if (ddir / "DONE").exists():
        return
    chunks = map_chunks(job, specs)
    cols = ["id"] + (["_exact"] if "exact_dedup" in job.steps else []) + (["_sig"] if "minhash_dedup" in job.steps else [])
    tables = [pq.read_table(path, columns=cols) for _, _, path in chunks]
    ids = [i for t in tables for i in t.column("id").to_pylist()]
    n = len(ids)
    rule = np.full(n, "", dtype=object)
    value = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)
    cluster = np.full(n, None, dtype=object)
    size = np.zeros(n, dtype=np.int64)

    if "exact_dedup" in job.steps:
        first: dict[bytes, int] = {}
        for i, key in enumerate(k for t in tables for k in t.column("_exact").to_pylist()):
            j = first.setdefault(key, i)
            if j != i:
                rule[i], value[i], reason[i] = "duplicate_of", ids[j], f"same normalized text as {ids[j]}"
                size[j] = max(size[j], 1) + 1
                cluster[i] = cluster[j] = ids[j]

    if "minhash_dedup" in job.steps:
        from tokenmill.data.minhash import estimated_jaccard, jaccard, near_duplicate_rejection

        alive = np.flatnonzero(rule == "")
        if alive.size > 1:
            sigs_all = [np.frombuffer(b, dtype=np.uint32) for t in tables for b in t.column("_sig").to_pylist()]
            sigs = np.stack([sigs_all[i] for i in alive])
            roots, shingles = _near_duplicate_roots(job, chunks, alive, sigs, executor)
            counts = np.bincount(roots, minlength=alive.size)
            for local, root in enumerate(roots):
                i, r = int(alive[local]), int(alive[root])
                if root != local:
                    est = float(estimated_jaccard(sigs, np.array([[root, local]]))[0])
                    ver = (jaccard(shingles[int(root)], shingles[local])
                           if int(root) in shingles and local in shingles else None)
                    rej = near_duplicate_rejection(ids[r], est, ver, job.cfg.minhash_dedup)
                    rule[i], value[i], reason[i] = rej.rule, rej.value, rej.reason
                    cluster[i] = ids[r]
                elif counts[root] > 1:
                    cluster[i] = ids[i]
                    size[i] = max(size[i], 1) + int(counts[root]) - 1

    decided = [i for i in range(n) if rule[i] or cluster[i] is not None]
    table = pa.table({"index": pa.array(decided, pa.int64()), "rule": [rule[i] or None for i in decided],
                      "value": [value[i] for i in decided], "reason": [reason[i] for i in decided],
                      "dup_cluster": [cluster[i] for i in decided],
                      "dup_cluster_size": pa.array([int(size[i]) or None for i in decided], pa.int64())})
    ddir.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, ddir / "decisions.parquet")
    _mark(ddir / "DONE", {"rows": n})


def _band_pairs(band_keys: np.ndarray, window: int | None) -> np.ndarray:
    from tokenmill.data.minhash import candidate_pairs

    return candidate_pairs(band_keys, window=window)


def _near_duplicate_roots(job: Job, chunks: list[tuple[int, int, Path]], alive: np.ndarray,
                          sigs: np.ndarray, executor: Any) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Cluster roots over the exact-dedup survivors: LSH band buckets grouped across all shards
    (one task per band), candidate pairs verified by exact shingle Jaccard, union-find.
    Returns the roots and the shingle sets it loaded (for the rejection reasons)."""
    from tokenmill.data.minhash import MinHasher, band_keys, clusters, exact_verifier, signature_verifier

    cfg = job.cfg.minhash_dedup
    keys = band_keys(sigs, cfg.bands, cfg.rows)
    per_band = executor.map(_band_pairs, [(np.ascontiguousarray(keys[:, [b]]), cfg.bucket_window)
                                          for b in range(keys.shape[1])])
    pairs = [p.reshape(-1, 2) for p in per_band if len(p)]
    pairs_all = np.unique(np.concatenate(pairs), axis=0) if pairs else np.zeros((0, 2), np.int64)
    if len(pairs_all) == 0:
        return np.arange(len(alive)), {}
    if not cfg.verify:
        return clusters(len(alive), pairs_all, signature_verifier(sigs, cfg.threshold)), {}
    hasher = MinHasher(cfg, seed=MINHASH_SEED)
    wanted = np.unique(pairs_all)
    texts = _texts_for(chunks, alive, wanted)
    shingles = {int(w): hasher.shingles(texts[int(w)]) for w in wanted}
    dense: list[np.ndarray] = [np.zeros(0, np.uint64)] * len(alive)
    for w, sh in shingles.items():
        dense[w] = sh
    return clusters(len(alive), pairs_all, exact_verifier(dense, cfg.threshold)), shingles


def _texts_for(chunks: list[tuple[int, int, Path]], alive: np.ndarray, wanted: np.ndarray) -> dict[int, str]:
    """Texts of the wanted survivors (local indices into `alive`), read chunk by chunk."""
    global_wanted = {int(alive[w]): int(w) for w in wanted}
    out: dict[int, str] = {}
    offset = 0
    for _, _, path in chunks:
        n = pq.ParquetFile(path).metadata.num_rows
        hits = [g for g in range(offset, offset + n) if g in global_wanted]
        if hits:
            texts = pq.read_table(path, columns=["text"]).column("text").to_pylist()
            for g in hits:
                out[global_wanted[g]] = texts[g - offset]
        offset += n
    return out


def chunk_offsets(chunks: list[tuple[int, int, Path]]) -> dict[tuple[int, int], int]:
    """Global row index of each chunk's first row, in canonical order."""
    offsets, total = {}, 0
    for shard, k, path in chunks:
        offsets[(shard, k)] = total
        total += pq.ParquetFile(path).metadata.num_rows
    return offsets


def _decisions(job: Job) -> dict[int, dict[str, Any]]:
    path = Path(job.work) / "dedup" / "decisions.parquet"
    if not path.exists():
        return {}
    return {r["index"]: r for r in pq.read_table(path).to_pylist()}


def _frequent(job: Job) -> np.ndarray | None:
    if "line_dedup" not in job.steps:
        return None
    return np.load(Path(job.work) / "lines" / "frequent.npy", allow_pickle=False)


def _pending_chunks(job: Job, spec: ShardSpec, out_dir: Path, ext: str) -> Iterator[tuple[int, Path, Path]]:
    """(chunk, map-phase file, output file) of the shard's chunks whose output is not written yet."""
    for path in sorted(_map_dir(job, spec.index).glob("chunk-*.parquet")):
        k = int(path.stem.split("-")[1])
        out = out_dir / f"chunk-{k:05d}.{ext}"
        if not out.exists():
            yield k, path, out


# --------------------------------------------------------------------------- line phase
def line_count_shard(job: Job, spec: ShardSpec, offsets: dict[tuple[int, int], int]) -> None:
    """Unit hashes of every document still alive after dedup, saved per chunk."""
    from tokenmill.data.linededup import applies as line_applies, unit_hashes

    decisions = _decisions(job)
    ldir = Path(job.work) / "lines" / f"{spec.index:05d}"
    for k, path, out in _pending_chunks(job, spec, ldir, "npy"):
        base = offsets[(spec.index, k)]
        texts = pq.read_table(path, columns=["text", "bucket"]).to_pylist()
        hashes = [unit_hashes(r["text"], job.cfg.line_dedup) for i, r in enumerate(texts)
                  if not (decisions.get(base + i) or {}).get("rule") and line_applies(r["bucket"], job.cfg.line_dedup)]
        arr = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
        ldir.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp.npy")
        np.save(tmp, arr, allow_pickle=False)
        os.replace(tmp, out)


def lines_phase(job: Job, specs: list[ShardSpec], executor: Any, offsets: dict[tuple[int, int], int]) -> None:
    ldir = Path(job.work) / "lines"
    if (ldir / "DONE").exists():
        return
    executor.map(line_count_shard, [(job, s, offsets) for s in specs])
    arrays = [np.load(p, allow_pickle=False) for p in sorted(ldir.glob("*/chunk-*.npy"))]
    values, counts = np.unique(np.concatenate(arrays) if arrays else np.zeros(0, np.uint64), return_counts=True)
    frequent = values[counts >= job.cfg.line_dedup.min_docs]
    np.save(ldir / "frequent.npy", frequent, allow_pickle=False)
    _mark(ldir / "DONE", {"units": int(values.size), "frequent": int(frequent.size)})


# --------------------------------------------------------------------------- substring phase
def _substr_on(job: Job) -> bool:
    return "substring_dedup" in job.steps and job.cfg.substring_dedup.enabled


def _substr_dir(job: Job) -> Path:
    return Path(job.work) / "substr"


def substr_units_shard(job: Job, spec: ShardSpec, offsets: dict[tuple[int, int], int]) -> None:
    """Units of every document that reaches substring_dedup (after exact / near dedup and line
    removal, exactly as the final phase will see its text), saved per chunk."""
    from tokenmill.data import dedup as dedup_mod
    from tokenmill.data.substring_dedup import tokenize

    cfg = job.cfg.substring_dedup
    decisions = _decisions(job)
    frequent = _frequent(job)
    sdir = _substr_dir(job) / "map" / f"{spec.index:05d}"
    for k, path, out in _pending_chunks(job, spec, sdir, "npz"):
        base = offsets[(spec.index, k)]
        units, rows, ids = [], [], []
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            fmt = row.pop("_format")
            row.pop("_exact"), row.pop("_sig")
            doc = _doc_from_row(row, fmt)
            if _apply_corpus_steps(job, doc, decisions.get(base + i) or {}, frequent, [], dedup_mod.VERSION) is not None:
                continue
            if doc.bucket in cfg.skip_buckets:
                continue
            units.append(tokenize(doc.text, cfg.unit).values)
            rows.append(base + i)
            ids.append(doc.id)
        sdir.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp.npz")
        np.savez(tmp, units=np.concatenate(units) if units else np.zeros(0, np.uint64),
                 lens=np.array([len(u) for u in units], dtype=np.int64), rows=np.array(rows, dtype=np.int64),
                 ids=np.array(ids, dtype=str))
        os.replace(tmp, out)


def substr_phase(job: Job, specs: list[ShardSpec], executor: Any, offsets: dict[tuple[int, int], int]) -> dict[str, int]:
    """Units per shard (parallel), one unit store, per-shard suffix arrays (parallel), their
    merge, and the first occurrence of every repeated window (data.substring_dedup)."""
    from tokenmill.data.substring_dedup import build_index, write_store_parts

    sdir = _substr_dir(job)
    if (sdir / "DONE").exists():
        return json.loads((sdir / "DONE").read_text())
    executor.map(substr_units_shard, [(job, s, offsets) for s in specs])
    parts = sorted((sdir / "map").glob("*/chunk-*.npz"))  # canonical (shard, chunk) order
    lens = [np.load(p)["lens"] for p in parts]
    index = sdir / "index"
    write_store_parts(index, np.concatenate(lens) if lens else np.zeros(0, np.int64), (np.load(p)["units"] for p in parts))
    np.save(index / "rows.npy", np.concatenate([np.load(p)["rows"] for p in parts]) if parts else np.zeros(0, np.int64))
    np.save(index / "ids.npy", np.concatenate([np.load(p)["ids"] for p in parts]) if parts else np.zeros(0, str))
    cfg = job.cfg.substring_dedup
    stats = build_index(index, cfg.k, cfg.shard_tokens, run=executor.map)
    _mark(sdir / "DONE", stats)
    return stats


@dataclass
class SubstrState:
    """What the final phase needs: where each document's windows first occur."""

    first: np.ndarray  # memmap, one int64 per unit (data.substring_dedup.build_index)
    bases: np.ndarray  # unit offset of every indexed document (+ the end)
    rows: np.ndarray  # global row index of every indexed document (sorted)
    ids: np.ndarray  # document id of every indexed document

    @classmethod
    def load(cls, job: Job) -> "SubstrState":
        index = _substr_dir(job) / "index"
        return cls(np.load(index / "first.npy", mmap_mode="r"), np.load(index / "bases.npy"),
                   np.load(index / "rows.npy"), np.load(index / "ids.npy"))

    def doc_of(self, row: int) -> int | None:
        """Index of a global row among the indexed documents (None: it did not take part)."""
        d = int(np.searchsorted(self.rows, row))
        return d if d < len(self.rows) and self.rows[d] == row else None


def _apply_substring(job: Job, doc: Doc, row: int, substr: SubstrState | None, marks: list[StepMark],
                     rejected: list[dict[str, Any]]) -> Rejection | None:
    """substring_dedup for one document: cut its later copies of repeated spans (each one a
    `_rejected` row) or drop it when mostly repeated; disabled or skipped: passed through."""
    from tokenmill.data import substring_dedup as sd

    cfg = job.cfg.substring_dedup
    n = text_bytes(doc.text)
    d = substr.doc_of(row) if substr is not None else None
    if d is None:
        marks.append(StepMark(sd.STEP, n, n, False))
        return None
    units = sd.tokenize(doc.text, cfg.unit)
    b0, b1 = int(substr.bases[d]), int(substr.bases[d + 1])
    if len(units.values) != b1 - b0:
        raise RuntimeError(f"substring_dedup: document {doc.id} has {len(units.values)} units, {b1 - b0} were indexed (a bug)")
    spans = sd.removal_runs(np.asarray(substr.first[b0:b1]), b0, cfg.k, units)

    def other(sp: sd.Span) -> tuple[str, int]:
        od, offset = sd.locate(sp.first, substr.bases)
        return str(substr.ids[od]), offset

    if cfg.mode == "documents":
        share = sd.removed_share(doc.text, spans)
        if share > cfg.max_dup_share:
            marks.append(StepMark(sd.STEP, n, 0, True, sd.RULE_SHARE))
            return sd.share_rejection(share, spans, other(spans[0])[0], cfg)
    elif spans:
        text = sd.cut(doc.text, spans)
        if len(text.strip()) < job.cfg.min_chars:
            marks.append(StepMark(sd.STEP, n, 0, True, sd.RULE_TOO_SHORT))
            return sd.too_short_rejection(len(text.strip()), job.cfg.min_chars, len(spans))
        for sp in spans:
            row_out = doc.rejected_row(sd.span_rejection(sp, *other(sp), cfg))
            rejected.append({**row_out, "text": doc.text[sp.char_start:sp.char_end]})
        doc.text = text
    marks.append(StepMark(sd.STEP, n, text_bytes(doc.text), True))
    doc.lineage.append((sd.STEP, sd.VERSION))
    return None


# --------------------------------------------------------------------------- final phase
def _final_dir(job: Job) -> Path:
    return Path(job.work) / "final"


def final_shard(job: Job, spec: ShardSpec, offsets: dict[tuple[int, int], int]) -> None:
    """Apply dedup decisions and line removal, then decontaminate and bucket; write the output."""
    names = tuple(s for s in job.steps if s in FINAL_STEPS)
    steps = _worker_steps(job, names)
    decisions = _decisions(job)
    frequent = _frequent(job)
    substr = SubstrState.load(job) if _substr_on(job) else None
    fdir = Path(job.work) / "finalized" / f"{spec.index:05d}"
    for path in sorted(_map_dir(job, spec.index).glob("chunk-*.parquet")):
        k = int(path.stem.split("-")[1])
        if (fdir / f"chunk-{k:05d}.done").exists():
            continue
        _final_chunk(job, spec.index, k, path, offsets[(spec.index, k)], decisions, frequent, substr, names, steps)


def _final_chunk(job: Job, shard: int, k: int, path: Path, base: int, decisions: dict[int, dict[str, Any]],
                 frequent: np.ndarray | None, substr: "SubstrState | None", names: tuple[str, ...],
                 steps: dict[str, DocStep]) -> None:
    from tokenmill.data import dedup as dedup_mod

    funnel = Funnel(job.funnel_steps)
    by_bucket: dict[str, list[dict[str, Any]]] = {}
    rejected: list[dict[str, Any]] = []
    for i, row in enumerate(pq.read_table(path).to_pylist()):
        fmt = row.pop("_format")
        row.pop("_exact"), row.pop("_sig")
        doc = _doc_from_row(row, fmt)
        bucket0 = doc.bucket
        decision = decisions.get(base + i) or {}
        marks: list[StepMark] = []
        rejection = _apply_corpus_steps(job, doc, decision, frequent, marks, dedup_mod.VERSION)
        if rejection is None and "substring_dedup" in job.steps:
            rejection = _apply_substring(job, doc, base + i, substr, marks, rejected)
        if rejection is None:
            rejection = run_doc_steps(doc, names, steps, marks)
        _record(funnel, bucket0, marks)
        if rejection is not None:
            rejected.append(doc.rejected_row(rejection))
            continue
        funnel.source_out(doc.source, text_bytes(doc.text), bucket0)
        by_bucket.setdefault(doc.bucket, []).append(doc.row())
    out = _final_dir(job)
    for bucket, rows in by_bucket.items():
        _write_table(rows, DOC_SCHEMA, out / bucket / f"part-{shard:05d}-{k:05d}.parquet")
    _write_table(rejected, REJECTED_SCHEMA, out / REJECTED_DIR / f"part-{shard:05d}-{k:05d}-b.parquet")
    fdir = Path(job.work) / "finalized" / f"{shard:05d}"
    if "decontaminate" in steps:  # this chunk's tallies, saved with it so a resume keeps them
        atomic_write_text(fdir / f"chunk-{k:05d}.decontamination.json", json.dumps(steps["decontaminate"].take_stats()))
    atomic_write_text(fdir / f"chunk-{k:05d}.funnel.json", json.dumps(funnel.to_dict()))
    _mark(fdir / f"chunk-{k:05d}.done")


def _apply_corpus_steps(job: Job, doc: Doc, decision: dict[str, Any], frequent: np.ndarray | None,
                        marks: list[StepMark], version: str) -> Rejection | None:
    """exact_dedup, minhash_dedup and line_dedup for one document, from the phase results."""
    doc.dup_cluster = decision.get("dup_cluster")
    doc.dup_cluster_size = decision.get("dup_cluster_size")
    for step, rule in (("exact_dedup", "duplicate_of"), ("minhash_dedup", "near_duplicate_of")):
        if step not in job.steps:
            continue
        n = text_bytes(doc.text)
        if decision.get("rule") == rule:
            marks.append(StepMark(step, n, 0, True, rule))
            return Rejection(step, rule, format_value(decision["value"]), decision["reason"])
        marks.append(StepMark(step, n, n, True))
        doc.lineage.append((step, version))
    if "line_dedup" in job.steps:
        from tokenmill.data.linededup import VERSION as LINE_VERSION, applies, remove_units

        n = text_bytes(doc.text)
        if frequent is None or not applies(doc.bucket, job.cfg.line_dedup):
            marks.append(StepMark("line_dedup", n, n, False))
            return None
        text, removed = remove_units(doc.text, frequent, job.cfg.line_dedup)
        if removed and len(text.strip()) < job.cfg.min_chars:
            marks.append(StepMark("line_dedup", n, 0, True, "too_short_after_line_dedup"))
            return Rejection("line_dedup", "too_short_after_line_dedup", format_value(len(text.strip())),
                             f"{removed} boilerplate units removed, {len(text.strip())} characters left "
                             f"< min_chars {job.cfg.min_chars}")
        doc.text = text
        marks.append(StepMark("line_dedup", n, text_bytes(text), True))
        doc.lineage.append(("line_dedup", LINE_VERSION))
    return None


def _doc_from_row(row: dict[str, Any], fmt: str) -> Doc:
    lineage = [(x["step"], x["version"]) for x in row.pop("lineage") or []]
    return Doc(**row, format=fmt, lineage=lineage)


# --------------------------------------------------------------------------- orchestration
def _plan(job: Job, fingerprint: str) -> list[ShardSpec]:
    """The shard plan, stored with the fingerprint of the inputs and config it was made for;
    a different fingerprint means the old work is for other inputs: start over."""
    work = Path(job.work)
    plan_file = work / "plan.json"
    if plan_file.exists() and json.loads(plan_file.read_text()).get("fingerprint") != fingerprint:
        shutil.rmtree(work)
    if plan_file.exists():
        return [ShardSpec(**{**s, "files": tuple(s["files"])}) for s in json.loads(plan_file.read_text())["shards"]]
    specs = plan_shards(job.sources)
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_text(plan_file, json.dumps({"fingerprint": fingerprint, "shards": [vars(s) | {"files": list(s.files)} for s in specs]}))
    return specs


def _merged_funnel(job: Job, phase_dir: str) -> Funnel:
    funnel = Funnel(job.funnel_steps)
    for path in sorted((Path(job.work) / phase_dir).glob("*/chunk-*.funnel.json")):
        funnel.merge(Funnel.from_dict(json.loads(path.read_text())))
    return funnel


def check_removal(funnel: Funnel, cfg: CurateConfig, steps: Iterable[str]) -> None:
    """Stop when a step removed more than the allowed share, or a bucket lost every document."""
    total = funnel.total()
    for step in steps:
        c = total[step]
        if c.docs_in and c.docs_rejected / c.docs_in > cfg.max_removal_share:
            rules = ", ".join(f"{r}: {v['docs']}" for r, v in sorted(c.rejected.items()))
            raise CurationStopped(
                f"curation stopped: step '{step}' removed {c.docs_rejected} of {c.docs_in} documents "
                f"({c.docs_rejected / c.docs_in:.1%}; {rules}), more than curate.max_removal_share="
                f"{cfg.max_removal_share}. Check the step's config, or raise the limit to accept it.")
    if not cfg.allow_empty_bucket:
        last = [s for s in steps][-1] if steps else None
        for bucket, per_step in funnel.buckets.items():
            if last and per_step["read"].docs_in and per_step[last].docs_out == 0:
                raise CurationStopped(
                    f"curation stopped: bucket '{bucket}' has no documents left after step '{last}' "
                    f"({per_step['read'].docs_in} read). Set curate.allow_empty_bucket=true to accept it.")


def curate(cfg: CurateConfig, out: Path, *, steps: list[str] | None = None, base_dir: Path | None = None,
           events: EventLog | None = None, progress: bool = True, inputs_fingerprint: Any = None,
           seed: int = 0) -> dict[str, Any]:
    """Curate `cfg.sources` into `out`; resumable: a killed call, called again, continues.
    `seed` (the run seed) fixes the canaries' secrets, if any are configured."""
    if not cfg.sources:
        raise ValueError("curate.sources is empty: there is nothing to curate")
    _check_buckets(cfg)
    if cfg.canaries.counts:
        canary_bucket(cfg)  # an unknown bucket fails now, not after the work
    for src in cfg.sources:
        source_step.check_source(src)  # a missing path fails now, not after minutes of work
    selected = selected_steps(cfg, steps)
    out = Path(out)
    work = out.with_name(f".{out.name}.work")
    job = Job(cfg=cfg, steps=selected, work=str(work.resolve()), base_dir=str((base_dir or Path.cwd()).resolve()))
    fingerprint = sha256_json({"cfg": cfg.model_dump(mode="json", exclude=EXECUTION_KNOBS), "steps": selected,
                               "inputs": inputs_fingerprint if inputs_fingerprint is not None else curate_inputs_fingerprint(cfg)})
    emit = (lambda kind, **f: events.write(STAGE, kind, **f)) if events else (lambda kind, **f: None)
    started = time.time()
    specs = _plan(job, fingerprint)
    emit("start", shards=len(specs), steps=list(selected), workers=cfg.workers, executor=cfg.executor)

    for step in build_doc_steps(tuple(s for s in selected if s not in CORPUS_STEPS), cfg, Path(job.base_dir)):
        step.prepare(work / "prepared")

    with make_executor(cfg.executor, cfg.workers) as executor, _progress(progress) as bar:
        id_stats = ids_phase(job, specs, executor)
        if id_stats is not None:
            emit("ids", seconds=round(time.time() - started, 3), **id_stats)
        task = bar.add_task("map", total=len(specs))
        executor.map(map_shard, [(job, s) for s in specs], on_done=lambda i, r: bar.advance(task))
        check_removal(_merged_funnel(job, "map"), cfg, [s for s in job.funnel_steps if s in ("read", *MAP_STEPS)])
        emit("phase", phase="map", seconds=round(time.time() - started, 3))
        if {"exact_dedup", "minhash_dedup"} & set(selected):
            dedup_phase(job, specs, executor)
            emit("phase", phase="dedup", seconds=round(time.time() - started, 3))
        offsets = chunk_offsets(map_chunks(job, specs))
        if "line_dedup" in selected:
            lines_phase(job, specs, executor, offsets)
            emit("phase", phase="lines", seconds=round(time.time() - started, 3))
        if _substr_on(job):
            stats = substr_phase(job, specs, executor, offsets)
            emit("phase", phase="substring", seconds=round(time.time() - started, 3), **stats)
        task = bar.add_task("final", total=len(specs))
        executor.map(final_shard, [(job, s, offsets) for s in specs], on_done=lambda i, r: bar.advance(task))

    funnel = _merged_funnel(job, "map")
    funnel.merge(_merged_funnel(job, "finalized"))
    problems = funnel.violations()
    if problems:
        raise RuntimeError("curate funnel does not add up (a bug):\n" + "\n".join(problems[:20]))
    check_removal(funnel, cfg, job.funnel_steps)
    final = _final_dir(job)
    canaries = insert_canaries(cfg, seed, final, funnel)  # after the removal check: canaries never hide an empty bucket
    funnel_data = funnel.write(final / FUNNEL_FILE)
    _write_decontamination(job, final)
    if not (final / REJECTED_DIR).exists():
        _write_table([], REJECTED_SCHEMA, final / REJECTED_DIR / "part-00000-00000-a.parquet")
    summary = _summary(funnel_data, final, time.time() - started)
    _publish(final, out)
    shutil.rmtree(work, ignore_errors=True)
    for step in job.funnel_steps:
        emit("step", step=step, **funnel_data["total"][step])
    if canaries:
        emit("canaries_inserted", bucket=canaries[0].bucket, canaries=len(canaries),
             docs=sum(c.count for c in canaries), counts=sorted({c.count for c in canaries}))
    emit("funnel", steps=list(job.funnel_steps), d_eff=funnel_data["d_eff"])
    emit("done", **summary)
    return summary


def _write_decontamination(job: Job, final: Path) -> None:
    """Per eval set: items found in the corpus, documents overlapping and removed."""
    if "decontaminate" not in job.steps or not job.cfg.decontaminate.eval_sets:
        report: dict[str, Any] = {"eval_sets": {}, "note": "no eval sets configured"}
    else:
        from tokenmill.data.decontaminate import overlap_report

        parts = [json.loads(p.read_text()) for p in sorted((Path(job.work) / "finalized").glob("*/chunk-*.decontamination.json"))]
        report = overlap_report(parts, Path(job.work) / "prepared", job.cfg.decontaminate.max_overlap)
    atomic_write_text(final / DECONTAMINATION_FILE, json.dumps(report, indent=1))


def _summary(funnel_data: dict[str, Any], final: Path, seconds: float) -> dict[str, Any]:
    steps = funnel_data["steps"]
    total = funnel_data["total"]
    buckets = {}
    for bucket_dir in sorted(p for p in final.iterdir() if p.is_dir() and not p.name.startswith("_")):
        parts = sorted(bucket_dir.glob("part-*.parquet"))
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        buckets[bucket_dir.name] = {"docs_out": rows, "parts": len(parts)}
    return {"docs_in": total["read"]["docs_in"], "bytes_in": total["read"]["bytes_in"],
            "docs_out": total[steps[-1]]["docs_out"], "bytes_out": total[steps[-1]]["bytes_out"],
            "docs_rejected": sum(total[s]["docs_rejected"] for s in steps),
            "seconds": round(seconds, 3), "buckets": buckets}


def _publish(final: Path, out: Path) -> None:
    """Swap the finished output in with renames; the old output is deleted only afterwards."""
    fsync_tree(final)
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(final, out)
    shutil.rmtree(old, ignore_errors=True)


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("[bold]curate[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("shards"), TimeElapsedColumn(), disable=not enabled)


def _check_buckets(cfg: CurateConfig) -> None:
    names = [src.bucket for src in cfg.sources] + [r.bucket for r in cfg.bucket_rules]
    for b in names:
        if not b or b.startswith(("_", ".")) or "/" in b or "\\" in b or b != b.strip():
            raise ValueError(f"curate: bucket {b!r} is not a valid directory name "
                             "(no '/', must not start with '_' or '.')")


# --------------------------------------------------------------------------- the run stage
def curate_inputs_fingerprint(cfg: CurateConfig) -> list[dict[str, Any]]:
    """Cheap identity of the raw inputs (paths, sizes, mtimes; Python version for the stdlib)."""
    return [source_step.inputs_fingerprint(src) for src in cfg.sources]


def run_curate(run: RunDir, progress: bool = True) -> dict[str, Any]:
    """The pipeline's curate stage: `run.config.curate` into `<run>/curated/`."""
    return curate(run.config.curate, run.path / "curated", base_dir=Path.cwd(), events=run.events,
                  progress=progress, seed=run.config.seed)
