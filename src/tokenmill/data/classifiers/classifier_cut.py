"""The corpus-wide classifier cut of curation (`model_quality.keep_top_percent`), a phase between
the per-document steps and dedup.

count      per shard: how many documents the classifier scored (model_quality's applies)
select     radix passes over every shard's map output (data/classifiers/top_percent.py): the threshold key
           of the top p%; saved to cut/threshold.json before anything changes, so a resumed run
           applies the same threshold to the chunks it had not finished
apply      per map chunk: documents below the threshold leave with rule `keep_top_percent` (their
           rows go to _rejected with the score, the threshold and the population); the chunk is
           rewritten with the rest, so dedup never sees a cut document. The funnel gains the step
           `classifier_cut` between the per-document steps and dedup.

A task holds one chunk and 65,536 counters; the coordinator holds the summed counters, never a
document's score. The kept set equals sorting every scored key, for any worker count.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill import json_limits
from tokenmill.data.classifiers import top_percent as tp
from tokenmill.data.dedup.workspace import final_dir, map_dir
from tokenmill.data.document import REJECTED_DIR, REJECTED_SCHEMA, Doc, Rejection, format_value, text_bytes, write_table_atomic
from tokenmill.data.funnel import Funnel, StepMark
from tokenmill.data.registry import MAP_STEPS
from tokenmill.runs import atomic_write_text

STEP = "classifier_cut"
RULE = "keep_top_percent"
CUT_DIR = "cut"


def cut_on(cfg: Any, steps: tuple[str, ...]) -> bool:
    mq = cfg.model_quality
    return "model_quality" in steps and mq.reference is not None and mq.keep_top_percent is not None


def funnel_steps(steps: tuple[str, ...], on: bool) -> tuple[str, ...]:
    """("read", *steps), with the cut after the last per-document step when it runs."""
    names = ("read", *steps)
    if not on:
        return names
    last = max(i for i, s in enumerate(names) if s == "read" or s in MAP_STEPS)
    return (*names[: last + 1], STEP, *names[last + 1 :])


def _chunks(work: str, shard: int) -> list[Path]:
    return sorted(map_dir(work, shard).glob("chunk-*[0-9].parquet"))


def chunk_keys(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(scored mask, scores, score keys, id keys) of a map chunk's rows."""
    t = pq.read_table(path, columns=["id", "model_quality"])
    scores = pc.struct_field(t.column("model_quality"), "classifier_score").to_numpy(zero_copy_only=False)
    scores = np.asarray(scores, dtype=np.float64)
    scored = ~np.isnan(scores)
    return scored, scores, tp.score_keys(np.where(scored, scores, 0.0)), tp.id_keys(t.column("id").to_pylist())


def count_shard(work: str, shard: int) -> int:
    return sum(int(chunk_keys(p)[0].sum()) for p in _chunks(work, shard))


def histogram_shard(work: str, shard: int, prefix: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The shard's digit counts for `prefix`, sparse (digits, counts): a task returns at most
    one entry per scored document, not 65,536."""
    total = np.zeros(tp.DIGITS, dtype=np.int64)
    for p in _chunks(work, shard):
        scored, _, hi, lo = chunk_keys(p)
        total += tp.histogram(hi[scored], lo[scored], prefix)
    nz = np.nonzero(total)[0]
    return nz, total[nz]


def select_threshold(job: Any, specs: list[Any], executor: Any) -> dict[str, Any]:
    """The threshold, computed once and saved (cut/threshold.json) before any chunk changes."""
    path = Path(job.work) / CUT_DIR / "threshold.json"
    if path.exists():
        return json_limits.load_file(path)
    n = sum(executor.map(count_shard, [(job.work, s.index) for s in specs]))
    percent = job.cfg.model_quality.keep_top_percent

    def pass_counts(prefix: list[int]) -> np.ndarray:
        counts = np.zeros(tp.DIGITS, dtype=np.int64)
        for digits, c in executor.map(histogram_shard, [(job.work, s.index, prefix) for s in specs]):
            counts[digits] += c
        return counts

    cut, k, passes = tp.select(pass_counts, n, percent)
    record = {
        "percent": percent,
        "scored": n,
        "kept": k,
        "passes": passes,
        "threshold": list(cut) if cut else None,
        "threshold_score": _score_of(cut[0]) if cut else None,
    }
    atomic_write_text(path, json.dumps(record))
    return record


def _score_of(hi: int) -> float:
    """The float whose order-preserving key is `hi` (inverse of top_percent.score_keys)."""
    key = np.array([hi], dtype=np.uint64)
    bits = np.where(key & tp._SIGN, key ^ tp._SIGN, ~key)
    return float(bits.view(np.float64)[0])


def apply_shard(job: Any, shard: int, record: dict[str, Any]) -> int:
    """Cut one shard's map chunks; a chunk whose decision is recorded is not decided again."""
    removed = 0
    for path in _chunks(job.work, shard):
        done = Path(job.work) / CUT_DIR / f"{shard:05d}" / f"{path.stem}.done"
        pending = path.with_name(path.stem + ".cut.parquet")
        if not done.exists():
            removed += _apply_chunk(job, shard, path, pending, done, record)
        if pending.exists():  # decided, not yet swapped in (a kill between the two)
            _swap(pending, path)
    return removed


def _swap(pending: Path, path: Path) -> None:
    os.replace(pending, path)


def _apply_chunk(job: Any, shard: int, path: Path, pending: Path, done: Path, record: dict[str, Any]) -> int:
    table = pq.read_table(path)
    scored, scores, hi, lo = chunk_keys(path)
    cut = tuple(record["threshold"]) if record["threshold"] else None
    keep = ~scored | tp.kept(hi, lo, cut)
    funnel = Funnel(funnel_steps(job.steps, True))
    rejected = []
    for i, row in enumerate(table.to_pylist()):
        n = text_bytes(row["text"])
        bucket = row.pop("_funnel_bucket", None) or row["bucket"]  # the bucket the map phase counted it in
        if keep[i]:
            funnel.record(bucket, StepMark(STEP, n, n, bool(scored[i])))
            continue
        mark = StepMark(STEP, n, 0, True, RULE)
        funnel.record(bucket, mark)
        funnel.outcome(row["language"], mark, row.get("kind"), row.get("license"))
        fmt = row.pop("_format")
        row.pop("_exact"), row.pop("_sig")
        doc = Doc.from_row(row, fmt)
        rejected.append(
            doc.rejected_row(
                Rejection(
                    STEP,
                    RULE,
                    format_value(float(scores[i])),
                    f"classifier score {scores[i]:.4g} is below the top {record['percent']:g}% of the {record['scored']:,} "
                    f"documents scored (the {record['kept']:,}th score is {record['threshold_score']:.4g})",
                )
            )
        )
    write_table_atomic(
        rejected, REJECTED_SCHEMA, final_dir(job.work) / REJECTED_DIR / f"part-{shard:05d}-{path.stem[6:]}-c.parquet"
    )
    pq.write_table(table.filter(keep), pending, compression="zstd")
    atomic_write_text(done.with_name(f"{path.stem}.funnel.json"), json.dumps(funnel.to_dict()))
    atomic_write_text(done, "{}")
    return len(rejected)


def cut_phase(job: Any, specs: list[Any], executor: Any) -> dict[str, Any]:
    record = select_threshold(job, specs, executor)
    removed = sum(executor.map(apply_shard, [(job, s.index, record) for s in specs]))
    return {**record, "removed": removed}
