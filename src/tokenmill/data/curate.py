"""The curation stage: sources -> shards -> per-document steps -> corpus-wide dedup -> output.

    plan     inputs split into shards (data.shards), fixed by the inputs, not by the workers
    ids      sources whose records carry their own ids are read once: an id that more than one
             record carries is not used as a document id (data.doc_ids)
    prepare  steps that need a model or an index build it once (model_quality, classify, decontaminate)
    map      per shard, chunk by chunk: read, extract, normalize, url, langid, quality,
             model_quality, classify, safety, pii; each kept row also carries its exact-dedup key and
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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tokenmill import json_limits
from tokenmill.data.config import CurateConfig, SourceConfig
from tokenmill.data import licenses, sources as source_step
from tokenmill.data.classifiers import classifier_cut
from tokenmill.data.steps import classify as classify_step
from tokenmill.data.canaries import CANARIES_FILE, canary_bucket, insert_canaries
from tokenmill.data.dedup.shuffle import PartitionedSet
from tokenmill.data.dedup.minhash import PERMUTATION_SEED
from tokenmill.data.dedup.stages import load_decisions, run_dedup, run_lines
from tokenmill.data.dedup.workspace import DedupJob, chunk_bases, dedup_partitions, final_dir, map_dir, shard_rows
from tokenmill.data.dedup.shuffle import files as shuffle_files, hash_partition, read_partition, write_partitioned
from tokenmill.data.doc_ids import PLAN_FILE, SHARED_DIR, STEP as HASH_ID_STEP, IdRule, collect_shard, merge_partition
from tokenmill.data.document import (
    DOC_SCHEMA,
    REJECTED_DIR,
    REJECTED_SCHEMA,
    Doc,
    RawRecord,
    Rejection,
    format_value,
    fsync_tree,
    text_bytes,
    write_table_atomic,
)
from tokenmill.data.readers import get_reader
from tokenmill.data.readers.base import file_size
from tokenmill.data.executor import make_executor
from tokenmill.data.funnel import Funnel, StepCounts, StepMark, files_read
from tokenmill.data.limits import TIMEOUT_RULE, DocClock, DocTimeout
from tokenmill.data.registry import CORPUS_STEPS, FINAL_STEPS, MAP_STEPS, build_doc_steps, selected_steps
from tokenmill.data.shards import ShardSpec, plan_shards, read_shard
from tokenmill.data.step import DocStep
from tokenmill.errors import UserError
from tokenmill.ownership import (
    OwnershipError,
    check_clashes,
    claim_dir,
    publish_into,
    read_marker,
    remove_own_temporaries,
    write_marker,
)
from tokenmill.runs import EventLog, RunDir, atomic_write_text, remove_temporaries, sha256_json, temporary_name

if TYPE_CHECKING:
    from tokenmill.data.steps.decontaminate import Decontaminate

STAGE = "curate"
FUNNEL_FILE = "_funnel.json"
DECONTAMINATION_FILE = "_decontamination.json"
MAP_SCHEMA = pa.schema(
    [
        *DOC_SCHEMA,
        pa.field("_format", pa.string()),
        pa.field("_exact", pa.binary()),
        pa.field("_sig", pa.binary()),
        pa.field("_funnel_bucket", pa.string()),  # the bucket the map phase counted it in (classify may route it)
    ]
)
# Settings that change how the work runs, never what it produces: a resumed run may change them.
EXECUTION_KNOBS = {
    "workers",
    "executor",
    "max_removal_share",
    "allow_empty_bucket",
    "memory_per_task",
    "dedup_partitions",
    "component_edges_per_task",
}
MINHASH_SEED = PERMUTATION_SEED


class CurationStopped(UserError):
    """A step removed more than allowed, or left a bucket empty: the run stops before publishing."""


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to process one shard (picklable, sent with every task)."""

    cfg: CurateConfig
    steps: tuple[str, ...]  # selected steps, canonical order
    work: str
    base_dir: str
    driver_pid: int | None = None  # the coordinating process: never killed by a per-document timer

    def clock(self, task_dir: Path) -> DocClock:
        """The per-document timers of one task (data.limits); the hard one only in a worker."""
        return DocClock(self.cfg.limits, task_dir, hard=self.driver_pid not in (None, os.getpid()))

    @property
    def funnel_steps(self) -> tuple[str, ...]:
        return classifier_cut.funnel_steps(self.steps, classifier_cut.cut_on(self.cfg, self.steps))

    @property
    def sources(self) -> list[SourceConfig]:
        return list(self.cfg.sources)


# --------------------------------------------------------------------------- small helpers
def _batched(items: Iterable[Any], n: int) -> Iterator[list[Any]]:
    it = iter(items)
    while batch := list(islice(it, n)):
        yield batch


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


def _kept_text(doc: Doc) -> str:
    """A kept document's text: a record without text is rejected when read, so None is a bug here."""
    if doc.text is None:
        raise RuntimeError(f"document {doc.id} was kept without text (a bug)")
    return doc.text


def run_doc_steps(
    doc: Doc, names: tuple[str, ...], steps: dict[str, DocStep], marks: list[StepMark], clock: DocClock | None = None
) -> Rejection | None:
    """Pass a document through the named steps; a disabled or out-of-scope step passes it.
    With a clock (started on this document), a step that runs out of time removes it."""
    if clock is None:
        return _run_steps(doc, names, steps, marks, None)
    try:
        return _run_steps(doc, names, steps, marks, clock)
    except DocTimeout:
        name = clock.step or names[-1]  # DocTimeout is raised only inside a step: never the fallback
        clock.stop()
        marks.append(StepMark(name, text_bytes(doc.text), 0, True, TIMEOUT_RULE))
        return clock.rejection(name)
    finally:
        clock.stop()


def _run_steps(
    doc: Doc, names: tuple[str, ...], steps: dict[str, DocStep], marks: list[StepMark], clock: DocClock | None
) -> Rejection | None:
    for name in names:
        n = text_bytes(doc.text)
        step = steps.get(name)
        if step is None or not step.applies(doc):
            marks.append(StepMark(name, n, n, False))
            continue
        if clock is not None:
            if (killed := clock.killed_in(name)) is not None:
                marks.append(StepMark(name, n, 0, True, TIMEOUT_RULE))
                return killed
            clock.enter(name)
        rejection = step.process(doc)
        if clock is not None:
            clock.leave()  # before the mark: a timer firing now must not count the step twice
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
    return src.kind == "files" and any(get_reader(source_step.file_format(src, Path(f))).carries_ids for f in spec.files)


IDS_SCHEMA = pa.schema([("h", pa.uint64()), ("source", pa.int32())])


def collect_ids_shard(job: Job, spec: ShardSpec, partitions: int) -> int:
    """The hashes of one shard's record ids, partitioned by hash for the merge; returns how
    many ids were unusable."""
    out = _ids_dir(job) / "map" / f"{spec.index:05d}.arrow"
    count = out.with_suffix(".json")
    if count.exists():
        return int(json_limits.load_file(count)["unusable"])
    hashes, unusable = collect_shard(read_shard(spec, job.sources, job.cfg.max_doc_bytes, source_step.read_limits(job.cfg)))
    table = pa.table({"h": hashes, "source": np.full(len(hashes), spec.source, dtype=np.int32)}, schema=IDS_SCHEMA)
    write_partitioned(out, table, hash_partition(hashes, partitions), partitions)
    atomic_write_text(count, json.dumps({"unusable": unusable}))
    return unusable


def merge_ids_partition(job: Job, part: int) -> dict[str, int]:
    """The ids of one hash partition that more than one record carries, saved sorted."""
    idir = _ids_dir(job)
    stats_file = idir / SHARED_DIR / f"{part:05d}.json"
    if stats_file.exists():
        return json_limits.load_file(stats_file)
    t = read_partition(shuffle_files(idir / "map"), part, IDS_SCHEMA)
    shared, stats = merge_partition(t.column("h").to_numpy(), t.column("source").to_numpy())
    out = idir / SHARED_DIR / f"{part:05d}.npy"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(out, ".npy")
    np.save(tmp, shared, allow_pickle=False)
    os.replace(tmp, out)
    stats = {**stats, "shared": int(shared.size)}
    atomic_write_text(stats_file, json.dumps(stats))
    return stats


def ids_phase(job: Job, specs: list[ShardSpec], executor: Any) -> dict[str, int] | None:
    """Which record ids more than one record carries, over the shards whose formats carry ids;
    None when no source can carry ids (nothing is read). A shuffle: the partition count comes
    from the input bytes and `curate.memory_per_task` (an id costs far less than its record)."""
    idir = _ids_dir(job)
    if (idir / "DONE").exists():
        return json_limits.load_file((idir / "DONE")) or None
    with_ids = [s for s in specs if _carries_ids(job, s)]
    if not with_ids:
        _mark(idir / "DONE", {})
        return None
    plan = idir / PLAN_FILE
    if plan.exists():
        partitions = int(json_limits.load_file(plan)["partitions"])
    else:
        size = sum(file_size(Path(f)) for s in with_ids for f in s.files)
        partitions = job.cfg.dedup_partitions or max(job.cfg.workers, -(-size // job.cfg.memory_per_task))
        atomic_write_text(plan, json.dumps({"partitions": partitions}))
    unusable = sum(executor.map(collect_ids_shard, [(job, s, partitions) for s in with_ids]))
    per_part = executor.map(merge_ids_partition, [(job, p) for p in range(partitions)])
    stats = {k: sum(r[k] for r in per_part) for k in ("ids", "within", "across", "shared")}
    stats = {**stats, "unusable": unusable, "partitions": partitions}
    _mark(idir / "DONE", stats)
    return stats


# --------------------------------------------------------------------------- map phase
def _map_dir(job: Job, shard: int) -> Path:
    return map_dir(job.work, shard)


def map_shard(job: Job, spec: ShardSpec) -> dict[str, int]:
    """Per-document steps over one shard, chunk by chunk; finished chunks are never redone."""
    sdir = _map_dir(job, spec.index)
    if (sdir / "DONE").exists():
        return json_limits.load_file((sdir / "DONE"))
    names = tuple(s for s in job.steps if s in MAP_STEPS)
    steps = _worker_steps(job, names)
    hasher = _minhasher(job) if "minhash_dedup" in job.steps else None
    id_rule = IdRule.load(_ids_dir(job))
    docs = 0
    records = read_shard(spec, job.sources, job.cfg.max_doc_bytes, source_step.read_limits(job.cfg))
    with job.clock(sdir) as clock:
        for k, chunk in enumerate(_batched(records, job.cfg.chunk_docs)):
            docs += len(chunk)
            if (sdir / f"chunk-{k:05d}.done").exists():
                continue  # reading past it is cheap; processing it again is what resume avoids
            _map_chunk(job, spec.index, k, chunk, names, steps, hasher, id_rule, clock)
    summary = {"docs": docs}
    _mark(sdir / "DONE", summary)
    return summary


def _map_chunk(
    job: Job,
    shard: int,
    k: int,
    chunk: list[RawRecord],
    names: tuple[str, ...],
    steps: dict[str, DocStep],
    hasher: Any,
    id_rule: IdRule,
    clock: DocClock,
) -> None:
    from tokenmill.data.dedup.exact import exact_key

    funnel = Funnel(job.funnel_steps)
    kept: list[Doc] = []
    funnel_bucket: list[str] = []  # per kept doc: its bucket when read (the funnel counts it there)
    rejected: list[dict[str, Any]] = []
    for i, raw in enumerate(chunk):
        doc_id, not_taken = id_rule.decide(raw)
        doc = Doc.from_raw(raw, doc_id)
        if doc_id != raw.id:  # the user's id: the hash stays in the lineage
            doc.lineage.append((HASH_ID_STEP, raw.id))
        bucket = doc.bucket
        id_kind = None if raw.record_id is None else (not_taken or "user")
        funnel.source_in(doc.source, bucket, raw.n_bytes, raw.encoding.name if raw.encoding else None, id_kind)
        funnel.license_bytes(doc.license, bytes_in=raw.n_bytes)
        if raw.problem is not None:
            funnel.record(bucket, mark := StepMark("read", raw.n_bytes, 0, True, raw.problem.rule))
            funnel.outcome(doc.language, mark, doc.kind, doc.license)
            rejected.append(doc.rejected_row(raw.problem))
            continue
        marks = [StepMark("read", raw.n_bytes, text_bytes(doc.text), True)]
        doc.lineage.append(("read", source_step.VERSION))
        if raw.encoding is not None:  # the decode step, named with the encoding it used
            doc.lineage.append(("decode", raw.encoding.name))
        clock.start(k, i)
        rejection = run_doc_steps(doc, names, steps, marks, clock)
        _record(funnel, bucket, marks)
        if rejection is not None:
            funnel.outcome(doc.language, marks[-1], doc.kind, doc.license)  # kept ones are decided in the final phase
            rejected.append(doc.rejected_row(rejection))
        else:
            kept.append(doc)
            funnel_bucket.append(bucket)
    sigs = hasher.signatures([d.text for d in kept]) if hasher is not None and kept else None
    rows = []
    for i, doc in enumerate(kept):
        rows.append(
            {
                **doc.row(),
                "_format": doc.format,
                "_exact": exact_key(_kept_text(doc)) if "exact_dedup" in job.steps else None,
                "_sig": sigs[i].tobytes() if sigs is not None else None,
                "_funnel_bucket": funnel_bucket[i],
            }
        )
    sdir = _map_dir(job, shard)
    write_table_atomic(rows, MAP_SCHEMA, sdir / f"chunk-{k:05d}.parquet")
    write_table_atomic(rejected, REJECTED_SCHEMA, final_dir(job.work) / REJECTED_DIR / f"part-{shard:05d}-{k:05d}-a.parquet")
    atomic_write_text(sdir / f"chunk-{k:05d}.funnel.json", json.dumps(funnel.to_dict()))
    _mark(sdir / f"chunk-{k:05d}.done")


def _minhasher(job: Job) -> Any:
    from tokenmill.data.dedup.minhash import MinHasher

    return MinHasher(job.cfg.minhash_dedup, seed=MINHASH_SEED)


# --------------------------------------------------------------------------- global dedup
def _dedup_job(job: Job, specs: list[ShardSpec]) -> DedupJob:
    """The global stages' view of the run: each shard's first row and the partition count.
    The count is fixed the first time (a resume with another budget keeps it: the shuffle
    files on disk were written for it)."""
    bases = [0]
    for spec in specs:
        bases.append(bases[-1] + shard_rows(job.work, spec.index))
    plan = Path(job.work) / "dedup_plan.json"
    if plan.exists():
        partitions = int(json_limits.load_file(plan)["partitions"])
    else:
        partitions = dedup_partitions(job.cfg, bases[-1])
        atomic_write_text(plan, json.dumps({"partitions": partitions, "rows": bases[-1]}))
    return DedupJob(job.work, job.cfg, job.steps, tuple(bases), partitions)


def _decisions(job: Job, shard: int) -> dict[int, dict[str, Any]]:
    return load_decisions(job.work, shard)


def _frequent(job: Job) -> PartitionedSet | None:
    if "line_dedup" not in job.steps:
        return None
    plan = json_limits.load_file((Path(job.work) / "dedup_plan.json"))
    return PartitionedSet.load(Path(job.work) / "lines" / "frequent", int(plan["partitions"]))


def _pending_chunks(job: Job, spec: ShardSpec, base: int, out_dir: Path, ext: str) -> Iterator[tuple[int, Path, int, Path]]:
    """(chunk, map-phase file, its first global row, output file) of the shard's chunks whose
    output is not written yet."""
    for k, path, first, _ in chunk_bases(job.work, spec.index, base):
        out = out_dir / f"chunk-{k:05d}.{ext}"
        if not out.exists():
            yield k, path, first, out


# --------------------------------------------------------------------------- substring phase
def _substr_on(job: Job) -> bool:
    return "substring_dedup" in job.steps and job.cfg.substring_dedup.enabled


def _substr_dir(job: Job) -> Path:
    return Path(job.work) / "substr"


def substr_units_shard(job: Job, spec: ShardSpec, base: int) -> None:
    """Units of every document that reaches substring_dedup (after exact / near dedup and line
    removal, exactly as the final phase will see its text), saved per chunk."""
    from tokenmill.data.dedup import exact as dedup_mod
    from tokenmill.data.dedup.substring import tokenize

    cfg = job.cfg.substring_dedup
    decisions = _decisions(job, spec.index)
    frequent = _frequent(job)
    sdir = _substr_dir(job) / "map" / f"{spec.index:05d}"
    for k, path, first, out in _pending_chunks(job, spec, base, sdir, "npz"):
        units, rows, ids = [], [], []
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            fmt = row.pop("_format")
            row.pop("_exact"), row.pop("_sig"), row.pop("_funnel_bucket", None)
            doc = Doc.from_row(row, fmt)
            if _apply_corpus_steps(job, doc, decisions.get(first + i) or {}, frequent, [], dedup_mod.VERSION) is not None:
                continue
            if doc.bucket in cfg.skip_buckets:
                continue
            units.append(tokenize(_kept_text(doc), cfg.unit).values)
            rows.append(first + i)
            ids.append(doc.id)
        sdir.mkdir(parents=True, exist_ok=True)
        tmp = temporary_name(out, ".npz")
        np.savez(
            tmp,
            units=np.concatenate(units) if units else np.zeros(0, np.uint64),
            lens=np.array([len(u) for u in units], dtype=np.int64),
            rows=np.array(rows, dtype=np.int64),
            ids=np.array(ids, dtype=str),
        )
        os.replace(tmp, out)


def substr_store(job: Job) -> None:
    """One unit store from every chunk's units, in canonical order, streamed part by part (a
    task, so the coordinator never holds per-document arrays); each part's first indexed
    document in `part_docs.npy`, its ids stay in the part's own file."""
    from tokenmill.data.dedup.substring import write_store_parts

    sdir = _substr_dir(job)
    index = sdir / "index"
    if (index / "rows.npy").exists():
        return
    parts = sorted((sdir / "map").glob("*/chunk-*.npz"))  # canonical (shard, chunk) order
    counts = np.array([len(np.load(p)["lens"]) for p in parts], dtype=np.int64)
    lens = np.lib.format.open_memmap(sdir / "lens.npy", mode="w+", dtype=np.int64, shape=(int(counts.sum()),))
    rows_tmp = temporary_name(index / "rows.npy", ".npy")
    rows_tmp.parent.mkdir(parents=True, exist_ok=True)
    rows = np.lib.format.open_memmap(rows_tmp, mode="w+", dtype=np.int64, shape=(int(counts.sum()),))
    at = 0
    for p, n in zip(parts, counts.tolist()):
        saved = np.load(p)
        lens[at : at + n], rows[at : at + n] = saved["lens"], saved["rows"]
        at += n
    write_store_parts(index, lens, (np.load(p)["units"] for p in parts))
    atomic_write_text(index / "parts.json", json.dumps([str(p.relative_to(sdir)) for p in parts]))
    np.save(index / "part_docs.npy", np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), allow_pickle=False)
    rows.flush()
    del rows, lens
    os.replace(rows_tmp, index / "rows.npy")


def substr_phase(job: Job, specs: list[ShardSpec], executor: Any, dj: DedupJob) -> dict[str, int]:
    """Units per shard (parallel), one unit store (a task), per-shard suffix arrays (parallel),
    their merge, and the first occurrence of every repeated window (data.dedup.substring)."""
    from tokenmill.data.dedup.substring import UNIT_BYTES, build_index

    sdir = _substr_dir(job)
    if (sdir / "DONE").exists():
        return json_limits.load_file((sdir / "DONE"))
    executor.map(substr_units_shard, [(job, s, dj.shard_bases[s.index]) for s in specs])
    executor.map(substr_store, [(job,)])
    cfg = job.cfg.substring_dedup
    # A shard's suffix array holds UNIT_BYTES per unit: no shard larger than one task's budget
    # (the result does not depend on the shard size).
    shard = max(1, min(cfg.shard_tokens, job.cfg.memory_per_task // UNIT_BYTES))
    stats = build_index(sdir / "index", cfg.k, shard, run=executor.map)
    _mark(sdir / "DONE", stats)
    return stats


@dataclass
class SubstrState:
    """What the final phase needs: where each document's windows first occur. Every array is
    memory-mapped; ids are read from the part that holds them when a span names one."""

    first: np.ndarray  # one int64 per unit (data.dedup.substring.build_index)
    bases: np.ndarray  # unit offset of every indexed document (+ the end)
    rows: np.ndarray  # global row index of every indexed document (sorted)
    part_docs: np.ndarray  # first indexed document of every part (+ the end)
    parts: list[Path]
    _ids: dict[int, np.ndarray]

    @classmethod
    def load(cls, job: Job) -> "SubstrState":
        sdir = _substr_dir(job)
        index = sdir / "index"
        parts = [sdir / p for p in json_limits.load_file((index / "parts.json"))]
        return cls(
            np.load(index / "first.npy", mmap_mode="r"),
            np.load(index / "bases.npy", mmap_mode="r"),
            np.load(index / "rows.npy", mmap_mode="r"),
            np.load(index / "part_docs.npy"),
            parts,
            {},
        )

    def doc_of(self, row: int) -> int | None:
        """Index of a global row among the indexed documents (None: it did not take part)."""
        d = int(np.searchsorted(self.rows, row))
        return d if d < len(self.rows) and self.rows[d] == row else None

    def id_of(self, d: int) -> str:
        """The id of indexed document d (its part's ids are loaded once, a few parts kept)."""
        p = int(np.searchsorted(self.part_docs, d, side="right")) - 1
        if p not in self._ids:
            if len(self._ids) >= 8:
                self._ids.pop(next(iter(self._ids)))
            self._ids[p] = np.load(self.parts[p])["ids"]
        return str(self._ids[p][d - int(self.part_docs[p])])


def _apply_substring(
    job: Job, doc: Doc, row: int, substr: SubstrState | None, marks: list[StepMark], rejected: list[dict[str, Any]]
) -> Rejection | None:
    """substring_dedup for one document: cut its later copies of repeated spans (each one a
    `_rejected` row) or drop it when mostly repeated; disabled or skipped: passed through."""
    from tokenmill.data.dedup import substring as sd

    cfg = job.cfg.substring_dedup
    n = text_bytes(doc.text)
    d = substr.doc_of(row) if substr is not None else None
    if substr is None or d is None:
        marks.append(StepMark(sd.STEP, n, n, False))
        return None
    body = _kept_text(doc)
    units = sd.tokenize(body, cfg.unit)
    b0, b1 = int(substr.bases[d]), int(substr.bases[d + 1])
    if len(units.values) != b1 - b0:
        raise RuntimeError(f"substring_dedup: document {doc.id} has {len(units.values)} units, {b1 - b0} were indexed (a bug)")
    spans = sd.removal_runs(np.asarray(substr.first[b0:b1]), b0, cfg.k, units)

    def other(sp: sd.Span) -> tuple[str, int]:
        od, offset = sd.locate(sp.first, substr.bases)
        return substr.id_of(od), offset

    if cfg.mode == "documents":
        share = sd.removed_share(body, spans)
        if share > cfg.max_dup_share:
            marks.append(StepMark(sd.STEP, n, 0, True, sd.RULE_SHARE))
            return sd.share_rejection(share, spans, other(spans[0])[0], cfg)
    elif spans:
        text = sd.cut(body, spans)
        if len(text.strip()) < job.cfg.min_chars:
            marks.append(StepMark(sd.STEP, n, 0, True, sd.RULE_TOO_SHORT))
            return sd.too_short_rejection(len(text.strip()), job.cfg.min_chars, len(spans))
        for sp in spans:
            row_out = doc.rejected_row(sd.span_rejection(sp, *other(sp), cfg))
            rejected.append({**row_out, "text": body[sp.char_start : sp.char_end]})
        doc.text = text
    marks.append(StepMark(sd.STEP, n, text_bytes(doc.text), True))
    doc.lineage.append((sd.STEP, sd.VERSION))
    return None


# --------------------------------------------------------------------------- final phase
def final_shard(job: Job, spec: ShardSpec, base: int) -> None:
    """Apply dedup decisions and line removal, then decontaminate and bucket; write the output."""
    names = tuple(s for s in job.steps if s in FINAL_STEPS)
    steps = _worker_steps(job, names)
    decisions = _decisions(job, spec.index)
    frequent = _frequent(job)
    substr = SubstrState.load(job) if _substr_on(job) else None
    fdir = Path(job.work) / "finalized" / f"{spec.index:05d}"
    with job.clock(fdir) as clock:
        for k, path, first, _ in chunk_bases(job.work, spec.index, base):
            if (fdir / f"chunk-{k:05d}.done").exists():
                continue
            _final_chunk(job, spec.index, k, path, first, decisions, frequent, substr, names, steps, clock)


def _final_chunk(
    job: Job,
    shard: int,
    k: int,
    path: Path,
    base: int,
    decisions: dict[int, dict[str, Any]],
    frequent: PartitionedSet | None,
    substr: "SubstrState | None",
    names: tuple[str, ...],
    steps: dict[str, DocStep],
    clock: DocClock,
) -> None:
    from tokenmill.data.dedup import exact as dedup_mod

    funnel = Funnel(job.funnel_steps)
    by_bucket: dict[str, list[dict[str, Any]]] = {}
    rejected: list[dict[str, Any]] = []
    for i, row in enumerate(pq.read_table(path).to_pylist()):
        fmt = row.pop("_format")
        row.pop("_exact"), row.pop("_sig")
        funnel_bucket = row.pop("_funnel_bucket", None)  # None: a chunk mapped before the column existed
        doc = Doc.from_row(row, fmt)
        bucket0 = funnel_bucket or doc.bucket
        decision = decisions.get(base + i) or {}
        marks: list[StepMark] = []
        rejection = _apply_corpus_steps(job, doc, decision, frequent, marks, dedup_mod.VERSION)
        if rejection is None and "substring_dedup" in job.steps:
            rejection = _apply_substring(job, doc, base + i, substr, marks, rejected)
        if rejection is None:
            clock.start(k, i)
            rejection = run_doc_steps(doc, names, steps, marks, clock)
        _record(funnel, bucket0, marks)
        funnel.outcome(doc.language, marks[-1] if rejection is not None else None, doc.kind, doc.license)
        if rejection is not None:
            rejected.append(doc.rejected_row(rejection))
            continue
        funnel.source_out(doc.source, text_bytes(doc.text), bucket0)
        funnel.license_bytes(doc.license, bytes_kept=text_bytes(doc.text))
        funnel.pii_replaced(bucket0, doc.pii, doc.text or "")
        by_bucket.setdefault(doc.bucket, []).append(doc.row())
    out = final_dir(job.work)
    for bucket, rows in by_bucket.items():
        write_table_atomic(rows, DOC_SCHEMA, out / bucket / f"part-{shard:05d}-{k:05d}.parquet")
    write_table_atomic(rejected, REJECTED_SCHEMA, out / REJECTED_DIR / f"part-{shard:05d}-{k:05d}-b.parquet")
    fdir = Path(job.work) / "finalized" / f"{shard:05d}"
    if "decontaminate" in steps:  # this chunk's tallies, saved with it so a resume keeps them
        # the registry builds the step named "decontaminate" as steps/decontaminate.py's Decontaminate;
        # the dict only knows the base class
        decontaminate = cast("Decontaminate", steps["decontaminate"])
        atomic_write_text(fdir / f"chunk-{k:05d}.decontamination.json", json.dumps(decontaminate.take_stats()))
    atomic_write_text(fdir / f"chunk-{k:05d}.funnel.json", json.dumps(funnel.to_dict()))
    _mark(fdir / f"chunk-{k:05d}.done")


def _apply_corpus_steps(
    job: Job, doc: Doc, decision: dict[str, Any], frequent: PartitionedSet | None, marks: list[StepMark], version: str
) -> Rejection | None:
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
        from tokenmill.data.dedup.lines import VERSION as LINE_VERSION, applies, remove_units

        n = text_bytes(doc.text)
        if frequent is None or not applies(doc.bucket, job.cfg.line_dedup):
            marks.append(StepMark("line_dedup", n, n, False))
            return None
        text, removed = remove_units(_kept_text(doc), frequent, job.cfg.line_dedup)
        if removed and len(text.strip()) < job.cfg.min_chars:
            marks.append(StepMark("line_dedup", n, 0, True, "too_short_after_line_dedup"))
            return Rejection(
                "line_dedup",
                "too_short_after_line_dedup",
                format_value(len(text.strip())),
                f"{removed} boilerplate units removed, {len(text.strip())} characters left < min_chars {job.cfg.min_chars}",
            )
        doc.text = text
        marks.append(StepMark("line_dedup", n, text_bytes(text), True))
        doc.lineage.append(("line_dedup", LINE_VERSION))
    return None


# --------------------------------------------------------------------------- orchestration
def _plan(job: Job, fingerprint: str) -> list[ShardSpec]:
    """The shard plan, stored with the fingerprint of the inputs and config it was made for;
    a different fingerprint means the old work is for other inputs: start over."""
    work = Path(job.work)
    plan_file = work / "plan.json"
    if plan_file.exists() and json_limits.load_file(plan_file).get("fingerprint") != fingerprint:
        shutil.rmtree(work)
    if plan_file.exists():
        return [ShardSpec(**{**s, "files": tuple(s["files"])}) for s in json_limits.load_file(plan_file)["shards"]]
    specs = plan_shards(job.sources)
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        plan_file, json.dumps({"fingerprint": fingerprint, "shards": [vars(s) | {"files": list(s.files)} for s in specs]})
    )
    return specs


def _files_read(job: Job, specs: list[ShardSpec]) -> dict[str, dict[str, Any]]:
    """Per files source (by its path as given): the files its shards read, as the plan lists them,
    so a name taken for a pattern, or a file that was not meant, shows in the funnel."""
    return {
        source_step.source_name(src): files_read(f for spec in specs if spec.source == i for f in spec.files)
        for i, src in enumerate(job.sources)
        if src.kind == "files"
    }


def _merged_funnel(job: Job, phase_dir: str) -> Funnel:
    funnel = Funnel(job.funnel_steps)
    for path in sorted((Path(job.work) / phase_dir).glob("*/chunk-*.funnel.json")):
        funnel.merge(Funnel.from_dict(json_limits.load_file(path)))
    return funnel


def emptied_by(per_step: dict[str, StepCounts], steps: list[str], top: int = 3) -> str:
    """Where a bucket's documents went: the step that removed its last ones (not the last step of
    the funnel, which only found nothing left) and the rules that removed the most, with counts."""
    emptying = next((s for s in steps if per_step[s].docs_in and per_step[s].docs_out == 0), steps[-1])
    rules = sorted(((v["docs"], f"{s}/{r}") for s in steps for r, v in per_step[s].rejected.items()), reverse=True)
    named = ", ".join(f"{name}: {n}" for n, name in rules[:top])
    return f"step '{emptying}' removed its last {per_step[emptying].docs_in} documents; most removed by {named}"


def check_removal(funnel: Funnel, cfg: CurateConfig, steps: Iterable[str]) -> None:
    """Stop when a step removed more than the allowed share, or a bucket lost every document."""
    steps = list(steps)
    total = funnel.total()
    for step in steps:
        c = total[step]
        # keep_top_percent, an id list and a license policy state what they keep
        if step in (classifier_cut.STEP, "select", "license"):
            continue
        if c.docs_in and c.docs_rejected / c.docs_in > cfg.max_removal_share:
            rules = ", ".join(f"{r}: {v['docs']}" for r, v in sorted(c.rejected.items()))
            raise CurationStopped(
                f"curation stopped: step '{step}' removed {c.docs_rejected} of {c.docs_in} documents "
                f"({c.docs_rejected / c.docs_in:.1%}; {rules}), more than curate.max_removal_share="
                f"{cfg.max_removal_share}. Check the step's config, or raise the limit to accept it."
            )
    if not cfg.allow_empty_bucket:
        last = steps[-1] if steps else None
        for bucket, per_step in funnel.buckets.items():
            if last and per_step["read"].docs_in and per_step[last].docs_out == 0:
                raise CurationStopped(
                    f"curation stopped: bucket '{bucket}' has no documents left of {per_step['read'].docs_in} read: "
                    f"{emptied_by(per_step, steps)}. Set curate.allow_empty_bucket=true to accept it, or "
                    f"loosen those rules for this bucket."
                )


def check_config(cfg: CurateConfig) -> None:
    """What makes the config unusable, found before any work: no sources, a bad bucket name, a
    license id the policy cannot judge, a missing source path."""
    if not cfg.sources:
        raise ValueError("curate.sources is empty: there is nothing to curate")
    _check_buckets(cfg)
    licenses.check_sources(cfg)  # with a policy, every source's license must be one the table knows
    if cfg.canaries.counts:
        canary_bucket(cfg)  # an unknown bucket fails now, not after the work
    for src in cfg.sources:
        source_step.check_source(src)  # a missing path fails now, not after minutes of work


def curate(
    cfg: CurateConfig,
    out: Path,
    *,
    steps: list[str] | None = None,
    base_dir: Path | None = None,
    events: EventLog | None = None,
    progress: bool = True,
    inputs_fingerprint: Any = None,
    seed: int = 0,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Curate `cfg.sources` into `out`; resumable: a killed call, called again, continues.
    `seed` (the run seed) fixes the canaries' secrets, if any are configured. `out` must be new,
    empty or tokenmill's curate output, which only `overwrite` replaces (just what tokenmill wrote
    there: other files are kept). A folder of files tokenmill did not write is refused either way."""
    check_config(cfg)
    selected = selected_steps(cfg, steps)
    out = Path(os.path.abspath(out))  # `-o .` has no name to put the work directory beside
    work = out.with_name(f".{out.name}.work")
    owned = _claim_output(cfg, out, work, overwrite)
    job = Job(
        cfg=cfg,
        steps=selected,
        work=str(work.resolve()),
        base_dir=str((base_dir or Path.cwd()).resolve()),
        driver_pid=os.getpid(),
    )
    fingerprint = sha256_json(
        {
            "cfg": cfg.model_dump(mode="json", exclude=EXECUTION_KNOBS),
            "steps": selected,
            "inputs": inputs_fingerprint if inputs_fingerprint is not None else curate_inputs_fingerprint(cfg),
            **({"labelled": classify_step.labelled_digests(cfg, Path(job.base_dir))} if "classify" in selected else {}),
        }
    )
    emit = (lambda kind, **f: events.write(STAGE, kind, **f)) if events else (lambda kind, **f: None)
    started = time.time()
    specs = _plan(job, fingerprint)
    emit("start", shards=len(specs), steps=list(selected), workers=cfg.workers, executor=cfg.executor)

    if "classify" in selected:
        classify_step.seed_cache(cfg, out, work / "prepared")  # a finished run's models: no retraining
    prepared = build_doc_steps(tuple(s for s in selected if s not in CORPUS_STEPS), cfg, Path(job.base_dir))
    for step in prepared:
        step.prepare(work / "prepared")

    _run_phases(job, specs, emit, started, progress)
    funnel = _checked_funnel(job)
    final = final_dir(job.work)
    canaries = insert_canaries(cfg, seed, final, funnel)  # after the removal check: canaries never hide an empty bucket
    funnel.license_permissions = {lic: licenses.permissions_row(licenses.table(cfg), lic) for lic in funnel.licenses}
    funnel.files_read = _files_read(job, specs)
    funnel_data = funnel.write(final / FUNNEL_FILE)
    _write_decontamination(job, final)
    for step in prepared:
        if isinstance(step, classify_step.Classify):
            classify_step.publish(cfg, work / "prepared", final, step.trained)
    if not (final / REJECTED_DIR).exists():
        write_table_atomic([], REJECTED_SCHEMA, final / REJECTED_DIR / "part-00000-00000-a.parquet")
    summary = _summary(funnel_data, final, time.time() - started)
    _publish(final, out, owned)
    shutil.rmtree(work, ignore_errors=True)  # the work directory is tokenmill's: _claim_output checked it
    for name in job.funnel_steps:
        emit("step", step=name, **funnel_data["total"][name])
    if canaries:
        emit(
            "canaries_inserted",
            bucket=canaries[0].bucket,
            canaries=len(canaries),
            docs=sum(c.count for c in canaries),
            counts=sorted({c.count for c in canaries}),
        )
    emit("funnel", steps=list(job.funnel_steps), d_eff=funnel_data["d_eff"])
    emit("done", **summary)
    return summary


def _run_phases(job: Job, specs: list[ShardSpec], emit: Callable[..., Any], started: float, progress: bool) -> None:
    """The parallel phases in order (ids, map, classifier cut, dedup, lines, substrings, final), on one
    executor and progress bar, each emitting its time since `started`."""
    cfg, selected = job.cfg, job.steps
    with make_executor(cfg.executor, cfg.workers) as executor, _progress(progress) as bar:
        id_stats = ids_phase(job, specs, executor)
        if id_stats is not None:
            emit("ids", seconds=round(time.time() - started, 3), **id_stats)
        task = bar.add_task("map", total=len(specs))
        executor.map(map_shard, [(job, s) for s in specs], on_done=lambda i, r: bar.advance(task))
        check_removal(_merged_funnel(job, "map"), cfg, [s for s in job.funnel_steps if s in ("read", *MAP_STEPS)])
        emit("phase", phase="map", seconds=round(time.time() - started, 3))
        if classifier_cut.cut_on(cfg, selected):
            stats = classifier_cut.cut_phase(job, specs, executor)
            emit("phase", phase="classifier_cut", seconds=round(time.time() - started, 3), **stats)
            mapped = _merged_funnel(job, "map")
            mapped.merge(_merged_funnel(job, classifier_cut.CUT_DIR))
            check_removal(mapped, cfg, [classifier_cut.STEP])
        dj = _dedup_job(job, specs)
        if {"exact_dedup", "minhash_dedup"} & set(selected):
            stats = run_dedup(dj, executor.map)
            emit("phase", phase="dedup", seconds=round(time.time() - started, 3), **stats)
        if "line_dedup" in selected:
            stats = run_lines(dj, executor.map)
            emit("phase", phase="lines", seconds=round(time.time() - started, 3), **stats)
        if _substr_on(job):
            stats = substr_phase(job, specs, executor, dj)
            emit("phase", phase="substring", seconds=round(time.time() - started, 3), **stats)
        task = bar.add_task("final", total=len(specs))
        executor.map(final_shard, [(job, s, dj.shard_bases[s.index]) for s in specs], on_done=lambda i, r: bar.advance(task))


def _checked_funnel(job: Job) -> Funnel:
    """All phases' funnels merged, refused if its counts do not add up or a step removed too much."""
    funnel = _merged_funnel(job, "map")
    funnel.merge(_merged_funnel(job, classifier_cut.CUT_DIR))
    funnel.merge(_merged_funnel(job, "finalized"))
    problems = funnel.violations()
    if problems:
        raise RuntimeError("curate funnel does not add up (a bug):\n" + "\n".join(problems[:20]))
    check_removal(funnel, job.cfg, job.funnel_steps)
    return funnel


def _write_decontamination(job: Job, final: Path) -> None:
    """Per eval set: items found in the corpus, documents overlapping and removed."""
    if "decontaminate" not in job.steps or not job.cfg.decontaminate.eval_sets:
        report: dict[str, Any] = {"eval_sets": {}, "note": "no eval sets configured"}
    else:
        from tokenmill.data.steps.decontaminate import overlap_report

        parts = [json_limits.load_file(p) for p in sorted((Path(job.work) / "finalized").glob("*/chunk-*.decontamination.json"))]
        report = overlap_report(
            parts,
            Path(job.work) / "prepared",
            job.cfg.decontaminate.max_overlap,
            set_max_overlap=job.cfg.decontaminate.set_max_overlap,
        )
    atomic_write_text(final / DECONTAMINATION_FILE, json.dumps(report, indent=1))


def _summary(funnel_data: dict[str, Any], final: Path, seconds: float) -> dict[str, Any]:
    steps = funnel_data["steps"]
    total = funnel_data["total"]
    buckets = {}
    for bucket_dir in sorted(p for p in final.iterdir() if p.is_dir() and not p.name.startswith("_")):
        parts = sorted(bucket_dir.glob("part-*.parquet"))
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        buckets[bucket_dir.name] = {"docs_out": rows, "parts": len(parts)}
    return {
        "docs_in": total["read"]["docs_in"],
        "bytes_in": total["read"]["bytes_in"],
        "docs_out": total[steps[-1]]["docs_out"],
        "bytes_out": total[steps[-1]]["bytes_out"],
        "docs_rejected": sum(total[s]["docs_rejected"] for s in steps),
        # of those, the records that could not be read (malformed, too large, a bomb): set apart at step read
        "docs_quarantined": total["read"]["docs_rejected"] if "read" in total else 0,
        "seconds": round(seconds, 3),
        "buckets": buckets,
        **({"pii_replaced": _pii_totals(funnel_data["pii"])} if "pii" in steps and "pii" in funnel_data else {}),
    }


def _pii_totals(per_bucket: dict[str, Any]) -> dict[str, int]:
    """Placeholders of each kind over all buckets, most first: the rewrite said in the run's summary line."""
    totals: dict[str, int] = {}
    for c in per_bucket.values():
        for kind, n in c["kinds"].items():
            totals[kind] = totals.get(kind, 0) + n
    return dict(sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])))


FIXED_OUTPUTS = (
    REJECTED_DIR,
    FUNNEL_FILE,
    DECONTAMINATION_FILE,
    CANARIES_FILE,
    classify_step.REPORT_FILE,
    classify_step.MODELS_DIR,
)


def _looks_curated(entry: Path) -> bool:
    """An entry an earlier tokenmill curate wrote (before outputs were marked): one of its named
    files, or a folder holding only part-*.parquet files."""
    if entry.is_symlink():
        return False
    if entry.is_file():
        return entry.name in FIXED_OUTPUTS
    files = list(entry.iterdir())
    return bool(files) and all(f.is_file() and f.name.startswith("part-") and f.name.endswith(".parquet") for f in files)


FOREIGN_HINT = (
    ": choose a new or empty folder, or move your files out of this one "
    "(--overwrite replaces only tokenmill's own earlier curate output, never other files)"
)


def _in_a_run_dir(out: Path) -> bool:
    """`curated/` of a run directory tokenmill made (its marker says "run"): an earlier version
    wrote it without a marker of its own. A folder elsewhere is never taken for old output by its
    contents alone: a user's `_funnel.json` and `web/part-00000.parquet` look just like it."""
    mark = read_marker(out.parent)
    return out.name == "curated" and mark is not None and mark.get("stage") == "run"


def _claim_output(cfg: CurateConfig, out: Path, work: Path, overwrite: bool) -> set[str]:
    """Refuse, before any work, an output or work directory tokenmill did not make, an earlier
    curate output unless `overwrite`, and an output name taken by a file tokenmill did not write;
    returns the names in `out` that are tokenmill's (the only ones a publish replaces)."""
    mark = claim_dir(out, STAGE, legacy=_in_a_run_dir, create=False, hint=FOREIGN_HINT)
    if mark.get("adopted"):  # no marker yet: only entries shaped like curate output are tokenmill's
        owned = {e.name for e in out.iterdir() if _looks_curated(e)}
        write_marker(out, STAGE, outputs=owned)
    else:
        owned = set(mark["outputs"])
    if not overwrite and any(os.path.lexists(out / name) for name in owned):
        raise OwnershipError(
            f"{out}: holds an earlier tokenmill curate output; pass --overwrite to replace it "
            "(only what tokenmill wrote there is replaced; other files are kept), or choose a new folder"
        )
    buckets = set(bucket_names(cfg))
    check_clashes(out, buckets | set(FIXED_OUTPUTS), owned)
    claim_dir(work, "curate-work", legacy=_earlier_work)
    return owned


def _earlier_work(work: Path) -> bool:
    """A work directory an earlier version left without a marker: its plan.json is the plan it wrote
    (a fingerprint and a list of shards), not merely a file of that name."""
    try:
        plan = json_limits.loads((work / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(plan, dict) and isinstance(plan.get("fingerprint"), str) and isinstance(plan.get("shards"), list)


def _publish(final: Path, out: Path, owned: set[str]) -> None:
    """Move the finished output into `out` entry by entry, replacing only what tokenmill wrote
    there before (the marker lists it) and keeping every other file. Temporary files of writers
    killed mid-write (a lost node's, a killed driver's last task) are not output: they are
    removed first."""
    remove_temporaries(final)
    fsync_tree(final)
    if not os.path.lexists(out):  # new: the whole output appears at once
        write_marker(final, STAGE, outputs=[e.name for e in final.iterdir()])
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(final, out)
        return
    remove_own_temporaries(out)
    publish_into(final, out, STAGE, owned)
    final.rmdir()


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]curate[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("shards"),
        TimeElapsedColumn(),
        disable=not enabled,
    )


def bucket_names(cfg: CurateConfig) -> list[str]:
    """Every bucket the config can send a document to: sources', bucket rules', license routes', classifiers'."""
    routes = list(cfg.license_policy.bucket_by_permission.values())
    classified = [b for c in cfg.classify for b in c.buckets.values()]
    return [src.bucket for src in cfg.sources] + [r.bucket for r in cfg.bucket_rules] + routes + classified


def _check_buckets(cfg: CurateConfig) -> None:
    for b in bucket_names(cfg):
        if not b or b.startswith(("_", ".")) or "/" in b or "\\" in b or b != b.strip():
            raise ValueError(f"curate: bucket {b!r} is not a valid directory name (no '/', must not start with '_' or '.')")


# --------------------------------------------------------------------------- the run stage
def curate_inputs_fingerprint(cfg: CurateConfig) -> list[dict[str, Any]]:
    """Cheap identity of the raw inputs (paths, sizes, mtimes; Python version for the stdlib)."""
    return [source_step.inputs_fingerprint(src) for src in cfg.sources]


def run_curate(run: RunDir, progress: bool = True) -> dict[str, Any]:
    """The pipeline's curate stage: `run.config.curate` into `<run>/curated/`."""
    # a stage rerun replaces the run's own curated/ (an earlier version's has no marker yet: _in_a_run_dir)
    return curate(
        run.config.curate,
        run.path / "curated",
        base_dir=Path.cwd(),
        events=run.events,
        progress=progress,
        seed=run.config.seed,
        overwrite=True,
    )
