"""The curation stage: sources -> read -> extract -> normalize -> length -> quality -> exact dedup.

Outputs (DESIGN §2), all under `<run>/curated/`:
  <bucket>/part-NNNNN.parquet     kept documents (DOC_SCHEMA), at most `shard_docs` per part
  _rejected/part-NNNNN.parquet    every removed document with step, rule, value, reason
  _funnel.json                    docs / bytes in and out of every step, per bucket and total

Extract, normalize and the filters are per document and run in a process pool; results come
back in input order, so the output is the same for any number of workers. Dedup keeps a
global "first seen" table and runs in this process. Everything is written under a temporary
directory that replaces `curated/` by a rename only when complete: a killed run never leaves a
half-written `curated/` that looks finished.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tokenmill.config import CurateConfig, QualityConfig
from tokenmill.data import dedup as dedup_step
from tokenmill.data import extract as extract_step
from tokenmill.data import normalize as normalize_step
from tokenmill.data import quality as quality_step
from tokenmill.data import sources as source_step
from tokenmill.data.document import (DOC_SCHEMA, REJECTED_SCHEMA, Doc, PartWriter, RawRecord, Rejection,
                                     fsync_tree, text_bytes)
from tokenmill.data.funnel import STEPS, Funnel, StepMark
from tokenmill.runs import RunDir

STAGE = "curate"
REJECTED_DIR = "_rejected"
FUNNEL_FILE = "_funnel.json"
_CHUNK = 8  # records per pool task: big enough to amortize pickling, small enough to balance

T = TypeVar("T")
R = TypeVar("R")


# --------------------------------------------------------------------------- per document
@dataclass(frozen=True)
class Settings:
    """What a worker needs to process one record (picklable, sent with every task)."""

    quality: QualityConfig
    min_chars: int


@dataclass
class Outcome:
    """One record after the per-document steps: its marks for the funnel, and its fate."""

    doc: Doc
    marks: list[StepMark] = field(default_factory=list)
    rejection: Rejection | None = None

    def reject(self, rejection: Rejection, bytes_in: int) -> "Outcome":
        self.marks.append(StepMark(rejection.step, bytes_in, 0, True, rejection.rule))
        self.rejection = rejection
        return self

    def passed(self, step: str, version: str | None, bytes_in: int, bytes_out: int) -> None:
        """version None: the step does not apply to this document and passes it through."""
        self.marks.append(StepMark(step, bytes_in, bytes_out, version is not None))
        if version is not None:
            self.doc.lineage.append((step, version))


def process_record(raw: RawRecord, settings: Settings) -> Outcome:
    """read -> extract (HTML only) -> normalize -> length -> quality for one record."""
    out = Outcome(Doc.from_raw(raw))
    doc = out.doc
    if raw.problem is not None:
        return out.reject(raw.problem, raw.n_bytes)
    assert doc.text is not None
    n = text_bytes(doc.text)
    out.passed("read", source_step.VERSION, raw.n_bytes, n)

    if doc.format == "html":
        text, rejection = extract_step.extract(doc.text)
        if rejection is not None:
            return out.reject(rejection, n)
        doc.text = text
        out.passed("extract", extract_step.VERSION, n, text_bytes(text))
        n = text_bytes(text)
    else:
        out.passed("extract", None, n, n)

    doc.text = normalize_step.normalize_text(doc.text, code=doc.format == "code")
    out.passed("normalize", normalize_step.VERSION, n, text_bytes(doc.text))
    n = text_bytes(doc.text)

    # Signals are measured for every document (and kept on rejected rows) before any filter.
    doc.quality = quality_step.quality_signals(doc.text)
    rejection = quality_step.check_length(len(doc.text), settings.min_chars)
    if rejection is not None:
        return out.reject(rejection, n)
    out.passed("length", quality_step.LENGTH_VERSION, n, n)

    if quality_step.applies_to(doc.bucket, settings.quality):
        rejection = quality_step.check_gopher(doc.quality, settings.quality)
        if rejection is not None:
            return out.reject(rejection, n)
        out.passed("quality", quality_step.VERSION, n, n)
    else:
        out.passed("quality", None, n, n)
    return out


# --------------------------------------------------------------------------- ordered pool
def _apply_batch(fn: Callable[[T], R], batch: list[T]) -> list[R]:
    return [fn(item) for item in batch]


class OrderedMapper:
    """map() over a process pool that yields results in input order with bounded memory.

    At most `4 × workers` chunks are in flight, so a huge source is never read ahead whole.
    'spawn' workers: forking a process that runs rich's refresh thread is not safe.
    """

    def __init__(self, workers: int, chunk: int = _CHUNK):
        self.workers = max(1, workers)
        self.chunk = chunk
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "OrderedMapper":
        if self.workers > 1:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        if self._pool is None:
            yield from map(fn, items)
            return
        it = iter(items)
        pending: deque[Future[list[R]]] = deque()

        def submit() -> bool:
            batch = list(islice(it, self.chunk))
            if batch:
                pending.append(self._pool.submit(_apply_batch, fn, batch))  # type: ignore[union-attr]
            return bool(batch)

        while len(pending) < 4 * self.workers and submit():
            pass
        while pending:
            results = pending.popleft().result()
            submit()
            yield from results


# --------------------------------------------------------------------------- the stage
def curate_inputs_fingerprint(cfg: CurateConfig) -> list[dict[str, Any]]:
    """Cheap identity of the raw inputs (paths, sizes, mtimes; Python version for the stdlib)."""
    return [source_step.inputs_fingerprint(src) for src in cfg.sources]


def _check_buckets(cfg: CurateConfig) -> None:
    for src in cfg.sources:
        b = src.bucket
        if not b or b.startswith(("_", ".")) or "/" in b or "\\" in b or b != b.strip():
            raise ValueError(f"curate.sources: bucket {b!r} is not a valid directory name "
                             "(no '/', must not start with '_' or '.')")


def _clean_stale(run_path: Path) -> None:
    """Remove what a killed earlier run left behind; never a finished curated/."""
    for stale in [*run_path.glob(".curated.tmp-*"), *run_path.glob(".curated.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)


def _publish(tmp: Path, final: Path) -> None:
    """Swap tmp in as final with renames; the old output is deleted only afterwards."""
    fsync_tree(tmp)
    old = final.with_name(f".curated.old-{os.getpid()}")
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("[bold]curate[/] {task.description}"), BarColumn(),
                    MofNCompleteColumn(), TextColumn("docs"), TimeElapsedColumn(),
                    disable=not enabled)


def _write_buckets(staging: Path, out: Path, dedup: dedup_step.ExactDedup, shard_docs: int) -> dict[str, PartWriter]:
    """Second pass: kept documents learn their dup_cluster, then go to their bucket's parts."""
    writers: dict[str, PartWriter] = {}
    for part in sorted(staging.glob("part-*.parquet")):
        for batch in pq.ParquetFile(part).iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                row["dup_cluster"] = dedup.cluster_of(row["id"])
                bucket = row["bucket"]
                if bucket not in writers:
                    writers[bucket] = PartWriter(out / bucket, DOC_SCHEMA, shard_docs)
                writers[bucket].add(row)
    for writer in writers.values():
        writer.close()
    shutil.rmtree(staging)
    return writers


def _summary(funnel: Funnel, writers: dict[str, PartWriter], seconds: float) -> dict[str, Any]:
    data = funnel.to_dict()
    total = data["total"]
    buckets = {}
    for b, steps in data["buckets"].items():
        buckets[b] = {"docs_in": steps["read"]["docs_in"], "bytes_in": steps["read"]["bytes_in"],
                      "docs_out": steps["exact_dedup"]["docs_out"], "bytes_out": steps["exact_dedup"]["bytes_out"],
                      "parts": len(writers[b].parts) if b in writers else 0}
    return {"docs_in": total["read"]["docs_in"], "bytes_in": total["read"]["bytes_in"],
            "docs_out": total["exact_dedup"]["docs_out"], "bytes_out": total["exact_dedup"]["bytes_out"],
            "docs_rejected": sum(total[s]["docs_rejected"] for s in STEPS),
            "seconds": round(seconds, 3), "buckets": buckets}


def run_curate(run: RunDir, progress: bool = True) -> dict[str, Any]:
    """Run the stage for `run.config.curate`; returns docs / bytes in and out, per bucket too."""
    cfg = run.config.curate
    if not cfg.sources:
        raise ValueError("curate.sources is empty: there is nothing to curate")
    _check_buckets(cfg)
    for src in cfg.sources:
        source_step.check_source(src)  # a missing path fails now, not after minutes of work

    started = time.time()
    _clean_stale(run.path)
    tmp = run.path / f".curated.tmp-{os.getpid()}"
    tmp.mkdir(parents=True)
    events = run.events
    events.write(STAGE, "start", sources=len(cfg.sources), workers=cfg.workers)
    try:
        funnel, dedup = Funnel(), dedup_step.ExactDedup()
        rejected = PartWriter(tmp / REJECTED_DIR, REJECTED_SCHEMA, cfg.shard_docs)
        staging = PartWriter(tmp / ".staging", DOC_SCHEMA, cfg.shard_docs)
        work = partial(process_record, settings=Settings(cfg.quality, cfg.min_chars))
        with OrderedMapper(cfg.workers) as mapper, _progress(progress) as bar:
            for src in cfg.sources:
                name = source_step.source_name(src)
                task = bar.add_task(f"{src.bucket} ← {name}", total=None)
                t0, n_docs, n_bytes = time.time(), 0, 0
                for outcome in mapper.map(work, source_step.read_source(src, cfg.max_doc_bytes)):
                    n_docs += 1
                    n_bytes += outcome.marks[0].bytes_in
                    _route(outcome, funnel, dedup, staging, rejected)
                    bar.advance(task)
                bar.update(task, total=n_docs)
                events.write(STAGE, "source", source=name, bucket=src.bucket, docs=n_docs, bytes=n_bytes,
                             seconds=round(time.time() - t0, 3))
        staging.close()
        rejected.close(write_empty=True)  # always present, so readers find the schema
        writers = _write_buckets(tmp / ".staging", tmp, dedup, cfg.shard_docs)
        funnel_data = funnel.write(tmp / FUNNEL_FILE)
        problems = funnel.violations()
        if problems:
            raise RuntimeError("curate funnel does not add up (a bug):\n" + "\n".join(problems))
        _publish(tmp, run.path / "curated")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    for step in STEPS:
        events.write(STAGE, "step", step=step, **funnel_data["total"][step])
    events.write(STAGE, "funnel", steps=list(STEPS), d_eff=funnel_data["d_eff"],
                 buckets={b: {s: {k: v for k, v in c.items() if k != "rejected"} for s, c in per.items()}
                          for b, per in funnel_data["buckets"].items()})
    summary = _summary(funnel, writers, time.time() - started)
    events.write(STAGE, "done", **summary)
    return summary


def _route(outcome: Outcome, funnel: Funnel, dedup: dedup_step.ExactDedup,
           staging: PartWriter, rejected: PartWriter) -> None:
    """Account one outcome in the funnel, run exact dedup, send the document to its writer."""
    doc = outcome.doc
    funnel.source_in(doc.source, doc.bucket, outcome.marks[0].bytes_in)
    for mark in outcome.marks:
        funnel.record(doc.bucket, mark)
    rejection = outcome.rejection
    if rejection is None:
        assert doc.text is not None
        n = text_bytes(doc.text)
        rejection = dedup.check(doc.id, doc.text)
        funnel.record(doc.bucket, StepMark("exact_dedup", n, 0 if rejection else n, True,
                                           rejection.rule if rejection else None))
        if rejection is None:
            doc.lineage.append(("exact_dedup", dedup_step.VERSION))
            funnel.source_out(doc.source, n)
            staging.add(doc.row())
            return
    rejected.add(doc.rejected_row(rejection))
