"""The tokenize stage: curated parts -> token shards per bucket and split, EOS after each document.

  plan      one task per curated part: its file, content hash and held-out rule (fixed by the data:
            the bucket's cut and the part's candidates moved to training, see plan_parts)
  encode    on `tokenize.workers` cores: worker processes over the parts when there is enough
            data to pay for starting them, else tiktoken threads in this process; each part writes
            its documents to
            `tokens.parts/<bucket>/<part>/{train,val}.{bin,idx,docs.parquet}` and then a
            `_done.json` marker holding the task's key (tokenizer sha256, encoder, part content,
            held-out rule). A killed stage, run again, skips every part whose marker matches and
            redoes the rest — a part encoded with another tokenizer is never reused.
  assemble  the pieces, in part order, are cut into shards of about `shard_tokens` tokens in
            `tokens.tmp/` (a shard closes after the document that reaches the limit), `_meta.json`
            is written, and `tokens.tmp/` is renamed to `tokens/` only then.

Every shard's content depends only on the data, the tokenizer and the config, never on how many
workers ran or in what order they finished.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import queue
import shutil
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash
from rich.console import Console
from rich.progress import Progress

from tokenmill import json_limits
from tokenmill.runs import RunDir, atomic_write_text, sha256_json
from tokenmill.tokenizer.bpe import load_tokenizer, tokenizer_sha256
from tokenmill.tokenizer.fast_encode import Encoder, choose_encoder, load_encoder
from tokenmill.tokenizer.special import BOS_ID, EOS_ID, MASK, PAD_ID, sentinel
from tokenmill.data.curated import bucket_parts, curated_buckets
from tokenmill.tokens.heldout_dedup import Decision, shuffled_training_duplicates
from tokenmill.tokens.heldout_size import small_heldout_message, too_small
from tokenmill.data.heldout_split import HeldoutCut, bucket_cuts
from tokenmill.tokens.store import SPLITS, Shard, ShardWriter, TokenStoreError, token_dtype

# the stage's own warnings; paths and ids are data, so rich must not read markup from them
console = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)

PIECES_FORMAT = 1  # bump when what a part piece holds changes: old pieces are then redone
# Curated Parquet bytes that justify one more worker process. Starting one costs ~0.3 s (spawn +
# imports + tokenizer load), about what 2 MB of Parquet (~6 MB of text) takes to encode; below
# this much per process the extra cores are used as tiktoken threads instead (free to start).
PROCESS_MIN_BYTES = 16 << 20


@dataclass(frozen=True)
class PartTask:
    """Everything a worker needs to encode one curated part (picklable, no open handles)."""

    bucket: str
    part: str
    out: str
    cut: HeldoutCut  # the bucket's held-out cut: the part's own ids decide, no per-document set
    moved: frozenset[str]  # held-out candidates of this part that duplicate training text: they train
    tokenizer: str
    encoder: str
    dtype: str
    batch_docs: int
    verify_chars: int
    key: str
    threads: int = 1  # encode threads in the process that runs it (does not change the output)


# --------------------------------------------------------------------------- encode (worker side)
def _read_part(part: Path, batch_docs: int) -> Iterator[tuple[list[str], list[str], list[int], list[str | None]]]:
    """(ids, texts, UTF-8 byte lengths, license ids) of a part, batch by batch, row order preserved
    (license ids None for a part written without the column)."""
    pf = pq.ParquetFile(part)
    has_license = "license" in pf.schema_arrow.names
    for batch in pf.iter_batches(batch_size=batch_docs, columns=["id", "text", *(["license"] if has_license else [])]):
        text = batch.column("text")
        if text.null_count:
            row = text.to_pylist().index(None)
            raise ValueError(f"{part}: document {batch.column('id')[row]} has no text")
        lics = batch.column("license").to_pylist() if has_license else [None] * batch.num_rows
        yield batch.column("id").to_pylist(), text.to_pylist(), pc.binary_length(text).to_pylist(), lics


def _with_eos(ids: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.empty(ids.size + 1, dtype=dtype)
    out[:-1] = ids
    out[-1] = EOS_ID
    return out


def _head(texts: list[str], n_chars: int) -> list[str]:
    """The first texts, cut to n_chars characters in all."""
    out: list[str] = []
    for text in texts:
        if n_chars <= 0:
            break
        out.append(text[:n_chars])
        n_chars -= len(out[-1])
    return out


def _spot_check(task: PartTask, enc: Encoder, texts: list[str]) -> Encoder:
    """The fast encoder, or HF when the two differ on the start of the part.

    The fast encoder was verified on the tokenizer's training sample; this re-checks it on text
    the sample may not have seen, at a cost of a few KB of HF encoding per part."""
    if enc.name == "hf" or task.verify_chars == 0:
        return enc
    head = _head(texts, task.verify_chars)
    hf = load_encoder(Path(task.tokenizer), "hf")
    if all(np.array_equal(a, b) for a, b in zip(hf.encode(head), enc.encode(head))):
        return enc
    return hf


def _finished(task: PartTask) -> dict[str, Any] | None:
    """The record of this exact task when its pieces are on disk and whole, else None."""
    marker = Path(task.out) / "_done.json"
    try:
        record = json_limits.load_file(marker)
        if record.get("key") != task.key:
            return None
        for split in SPLITS:
            Shard(task.bucket, split, Path(task.out) / split, np.dtype(task.dtype))
    except (OSError, json.JSONDecodeError, TokenStoreError):
        return None
    return record


def encode_part(task: PartTask) -> dict[str, Any]:
    """Encode one curated part into its train/val pieces; a matching finished part is skipped."""
    out = Path(task.out)
    marker = out / "_done.json"
    if (record := _finished(task)) is not None:
        return {**record, "skipped": True}
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    fast = load_encoder(Path(task.tokenizer), task.encoder, task.threads)
    batches = _read_part(Path(task.part), task.batch_docs)
    first = next(batches, None)
    enc = _spot_check(task, fast, first[1] if first else [])
    dtype = np.dtype(task.dtype)
    writers = {s: ShardWriter(out / s, dtype) for s in SPLITS}
    per_license: dict[str, dict[str, dict[str, int]]] = {}  # license -> split -> docs, tokens
    for ids, texts, n_bytes, lics in itertools.chain([first] if first else [], batches):
        for doc_id, arr, nb, lic in zip(ids, enc.encode(texts), n_bytes, lics):
            split = "val" if task.cut.holds(doc_id) and doc_id not in task.moved else "train"
            writers[split].add(doc_id, _with_eos(arr, dtype), nb)
            slot = per_license.setdefault(lic or "unknown", {}).setdefault(split, {"docs": 0, "tokens": 0})
            slot["docs"] += 1
            slot["tokens"] += arr.size + 1  # with its EOS, as the store counts
    record = {
        "key": task.key,
        "bucket": task.bucket,
        "part": Path(task.part).name,
        "encoder": enc.name,
        "spot_check_failed": enc is not fast,
        "seconds": time.perf_counter() - t0,
        "pid": os.getpid(),
        "splits": {s: w.close() for s, w in writers.items()},
        "licenses": per_license,
    }
    atomic_write_text(marker, json.dumps(record, indent=1))  # last: the part counts as done only now
    return {**record, "skipped": False}


# --------------------------------------------------------------------------- plan
def _file_hash(path: Path) -> str:
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def plan_parts(
    run: RunDir, parts_dir: Path, encoder: str, dtype: np.dtype, moved_out: dict[str, Any] | None = None
) -> list[PartTask]:
    """One task per curated part, buckets in name order, parts in file order. Held-out candidates
    that duplicate a training document go to training; `moved_out` receives them with the reason.

    No list of the corpus's ids: one pass over the id column gives each bucket its held-out cut,
    the duplicate check is a shuffle on disk, and each task applies the cut to its own ids."""
    cfg = run.config.tokenize
    curated = run.sub("curated")
    tok_path = run.sub("tokenizer", "tokenizer.json")
    sha = tokenizer_sha256(tok_path)
    buckets = {b: bucket_parts(curated, b) for b in curated_buckets(curated)}
    cuts = bucket_cuts(curated, cfg.val_fraction, cfg.min_val_docs, run.config.seed)
    parts = [(b, p) for b, ps in buckets.items() for p in ps]
    decisions = (
        _heldout_duplicates(run, [p for _, p in parts], [cuts[b] for b, _ in parts], parts_dir) if cfg.dedup_heldout else []
    )
    if moved_out is not None:
        moved_out.update((d.doc_id, d.record) for d in decisions)
    moved: dict[int, set[str]] = {}
    for d in decisions:
        moved.setdefault(d.part, set()).add(d.doc_id)
    tasks = []
    for index, (bucket, p) in enumerate(parts):
        cut, part_moved = cuts[bucket], frozenset(moved.get(index, ()))
        # The cut (bucket-level) and the part's moved ids fix which of its documents are held out.
        key = sha256_json(
            {
                "format": PIECES_FORMAT,
                "tokenizer_sha256": sha,
                "encoder": encoder,
                "part": _file_hash(p),
                "held": [cut.score, cut.doc_id, cut.seed, sorted(part_moved)],
                "dtype": dtype.name,
                "verify_chars": cfg.verify_chars,
            }
        )
        tasks.append(
            PartTask(
                bucket,
                str(p),
                str(parts_dir / bucket / p.stem),
                cut,
                part_moved,
                str(tok_path),
                encoder,
                dtype.name,
                cfg.batch_docs,
                cfg.verify_chars,
                key,
            )
        )
    return tasks


def _heldout_duplicates(run: RunDir, parts: list[Path], cuts: list[HeldoutCut], parts_dir: Path) -> list[Decision]:
    """The held-out duplicate check (tokens/heldout_dedup.py) on `tokenize.workers` processes
    when the corpus is large enough to pay for starting them (the same rule as encoding's)."""
    cfg = run.config.tokenize
    size = sum(p.stat().st_size for p in parts)
    processes = max(1, min(cfg.workers, -(-size // PROCESS_MIN_BYTES)))
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    threads = cfg.workers if processes == 1 else 1  # a small corpus: the cores as threads, free to start
    decisions = shuffled_training_duplicates(
        parts,
        cuts,
        run.config.curate.minhash_dedup,
        run.config.seed,
        parts_dir / "_heldout_dedup",
        cfg.shuffle_records,
        cfg.batch_docs,
        processes,
        timings,
        threads,
    )
    run.events.write(
        "tokenize",
        "heldout_check",
        parts=len(parts),
        processes=processes,
        threads=threads,
        moved=len(decisions),
        seconds=round(time.perf_counter() - t0, 3),
        phases=timings,
    )
    return decisions


def layout(tasks: list[PartTask], workers: int) -> tuple[int, int]:
    """(processes, encode threads per process) for `workers` cores and the parts left to encode."""
    pending = [t for t in tasks if _finished(t) is None]
    size = sum(Path(t.part).stat().st_size for t in pending)
    processes = max(1, min(workers, len(pending), -(-size // PROCESS_MIN_BYTES)))
    return processes, max(1, workers // processes)


def _drop_unplanned(parts_dir: Path, tasks: list[PartTask]) -> None:
    """Remove pieces of parts that are no longer in the curated data."""
    planned = {Path(t.out) for t in tasks}
    for bucket_dir in parts_dir.iterdir() if parts_dir.is_dir() else []:
        for piece in bucket_dir.iterdir() if bucket_dir.is_dir() else [bucket_dir]:
            if piece not in planned:
                shutil.rmtree(piece) if piece.is_dir() else piece.unlink()


# --------------------------------------------------------------------------- assemble
class _SplitWriter:
    """Writes one bucket/split as a sequence of shards of at most ~shard_tokens tokens."""

    def __init__(self, root: Path, bucket: str, split: str, dtype: np.dtype, shard_tokens: int):
        self.root, self.bucket, self.split = root, bucket, split
        self.dtype, self.shard_tokens = dtype, shard_tokens
        self.shards: list[str] = []
        self.totals = {"docs": 0, "tokens": 0, "bytes": 0}
        self._writer: ShardWriter | None = None

    def add(self, doc_id: str, ids: np.ndarray, n_bytes: int) -> None:
        if self._writer is None:
            name = f"{self.split}-{len(self.shards):05d}"
            self._writer = ShardWriter(self.root / self.bucket / name, self.dtype)
            self.shards.append(f"{self.bucket}/{name}")
        self._writer.add(doc_id, ids, n_bytes)
        if self._writer.n_tokens >= self.shard_tokens:
            self._close_shard()

    def _close_shard(self) -> None:
        assert self._writer is not None
        for k, v in self._writer.close().items():
            self.totals[k] += v
        self._writer = None

    def close(self) -> None:
        if self._writer is not None:
            self._close_shard()


def assemble_split(tmp: Path, bucket: str, split: str, pieces: list[Path], dtype: np.dtype, shard_tokens: int) -> _SplitWriter:
    """Concatenate the parts' pieces of one bucket/split, in part order, into final shards."""
    writer = _SplitWriter(tmp, bucket, split, dtype, shard_tokens)
    for prefix in pieces:
        piece = Shard(bucket, split, prefix, dtype)
        table = piece.doc_table()
        for i, (doc_id, nb) in enumerate(zip(table.column("id").to_pylist(), table.column("n_bytes").to_pylist())):
            writer.add(doc_id, piece.doc(i), nb)
    writer.close()
    return writer


# --------------------------------------------------------------------------- stage
def _special_meta(tok_path: Path) -> dict[str, Any]:
    """MASK and sentinel ids as this tokenizer has them (None / [] for a tokenizer without)."""
    tok = load_tokenizer(tok_path)
    sentinels: list[int] = []
    while (i := tok.token_to_id(sentinel(len(sentinels)))) is not None:
        sentinels.append(i)
    return {"eos_id": EOS_ID, "bos_id": BOS_ID, "pad_id": PAD_ID, "mask_id": tok.token_to_id(MASK), "sentinel_ids": sentinels}


class _Claims:
    """Hands out task indices, largest part first (so the last tasks to finish are short), to
    this process and to the threads that feed the children; stops handing out on the first error."""

    def __init__(self, tasks: list[PartTask]):
        order = sorted(range(len(tasks)), key=lambda i: (-Path(tasks[i].part).stat().st_size, i))
        self._it = iter(order)
        self._lock = threading.Lock()
        self.stop = threading.Event()

    def next(self) -> int | None:
        with self._lock:
            return None if self.stop.is_set() else next(self._it, None)


def run_parts(
    tasks: list[PartTask], processes: int, runners: int, on_done: Callable[[int, dict[str, Any]], None]
) -> list[dict[str, Any]]:
    """encode_part over every task, by this process and `runners - 1` helpers at once.

    processes > 1: each helper feeds one 'spawn' child process (spawn: forking a process that runs
    rich's refresh thread or holds torch/HF threads is not safe); this process encodes parts
    itself while the children start. processes == 1: the helpers are threads of this process
    that run parts themselves — they share one tiktoken thread pool (the task's `threads`), so
    one part's Parquet reading and shard writing overlap another's encoding.
    Either way a helper takes the next part as soon as it is free, and each part's output depends
    on the part alone: who ran it changes nothing.
    """
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    claims = _Claims(tasks)
    finished: queue.Queue[tuple[int, dict[str, Any] | None, BaseException | None]] = queue.Queue()

    def finish(i: int, record: dict[str, Any]) -> None:
        results[i] = record
        on_done(i, record)

    def drain(wait: float) -> None:
        """Record what the helpers finished, waiting up to `wait` seconds for the first."""
        try:
            while True:
                i, record, exc = finished.get(timeout=wait)
                if exc is not None:
                    raise exc
                finish(i, record)  # type: ignore[arg-type]
                wait = 0.0
        except queue.Empty:
            pass

    def helper(run_one: Callable[[PartTask], dict[str, Any]]) -> None:
        try:
            while (i := claims.next()) is not None:
                finished.put((i, run_one(tasks[i]), None))
        except BaseException as exc:  # re-raised in the main thread
            claims.stop.set()
            finished.put((-1, None, exc))

    n_helpers = min(runners, len(tasks)) - 1
    pool = (
        ProcessPoolExecutor(n_helpers, mp_context=multiprocessing.get_context("spawn"))
        if processes > 1 and n_helpers > 0
        else None
    )
    run_one = (lambda t: pool.submit(encode_part, t).result()) if pool else encode_part
    helpers = [threading.Thread(target=helper, args=(run_one,), daemon=True) for _ in range(n_helpers)]
    try:
        for t in helpers:
            t.start()
        while (i := claims.next()) is not None:
            finish(i, encode_part(tasks[i]))
            drain(0.0)
        while any(t.is_alive() for t in helpers):
            drain(0.1)
        drain(0.0)
    finally:
        claims.stop.set()  # on an error or Ctrl-C: helpers finish their part and take no more
        for t in helpers:
            t.join()
        if pool is not None:
            pool.shutdown()
    return results  # type: ignore[return-value]


def _encode_all(run: RunDir, tasks: list[PartTask]) -> list[dict[str, Any]]:
    processes, threads = layout(tasks, run.config.tokenize.workers)
    tasks = [replace(t, threads=threads) for t in tasks]
    run.events.write("tokenize", "layout", parts=len(tasks), processes=processes, threads=threads)
    with Progress(transient=True) as progress:
        bar = progress.add_task("tokenize parts", total=len(tasks))

        def done(i: int, record: dict[str, Any]) -> None:
            progress.advance(bar)
            run.events.write(
                "tokenize",
                "part",
                bucket=record["bucket"],
                part=record["part"],
                encoder=record["encoder"],
                skipped=record["skipped"],
                spot_check_failed=record["spot_check_failed"],
                seconds=record["seconds"],
                pid=record["pid"],
                splits=record["splits"],
            )

        return run_parts(tasks, processes, processes if processes > 1 else threads, done)


def license_tokens(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """Documents and tokens per license id and split, summed over the parts' records."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for record in records:
        for lic, splits in record["licenses"].items():
            for split, c in splits.items():
                slot = out.setdefault(lic, {}).setdefault(split, {"docs": 0, "tokens": 0})
                slot["docs"] += c["docs"]
                slot["tokens"] += c["tokens"]
    return dict(sorted(out.items()))


def warn_small_heldout(run: RunDir, buckets: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    """One line per bucket whose held-out set is too small for a trustworthy bits-per-byte
    (tokens/heldout_size.py), on the console and as a `small_heldout` event; nothing when the
    config holds nothing out on purpose (val_fraction and min_val_docs both 0)."""
    cfg = run.config.tokenize
    if cfg.val_fraction == 0 and cfg.min_val_docs == 0:
        return []
    lines = []
    for bucket, splits in buckets.items():
        docs = splits["val"]["docs"]
        scored = splits["val"]["tokens"] - docs  # each document's closing EOS is stored, not scored
        if not too_small(docs, scored):
            continue
        total = docs + splits["train"]["docs"]
        lines.append(small_heldout_message(bucket, docs, scored, total, cfg))
        run.events.write("tokenize", "small_heldout", bucket=bucket, docs=docs, tokens=scored, message=lines[-1])
        console.print(lines[-1], style="yellow")
    return lines


def run_tokenize(run: RunDir) -> dict[str, Any]:
    cfg = run.config.tokenize
    tok_dir = run.sub("tokenizer")
    tok_path = tok_dir / "tokenizer.json"
    vocab = load_tokenizer(tok_path).get_vocab_size()
    dtype = token_dtype(vocab)
    encoder, why = choose_encoder(tok_dir, cfg.encoder)
    if why:
        run.events.write("tokenize", "warning", message=f"using HF tokenizers: {why}")
    parts_dir, tmp, final = run.sub("tokens.parts"), run.sub("tokens.tmp"), run.sub("tokens")
    moved: dict[str, Any] = {}
    tasks = plan_parts(run, parts_dir, encoder, dtype, moved)
    if moved:
        run.events.write("tokenize", "heldout_moved", count=len(moved), docs=moved)
    _drop_unplanned(parts_dir, tasks)
    records = _encode_all(run, tasks)
    failed = [r["part"] for r in records if r["spot_check_failed"]]
    if failed:
        run.events.write(
            "tokenize",
            "warning",
            message=f"tiktoken differed from HF on {len(failed)} part(s); those were encoded with HF: {failed}",
        )

    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    meta: dict[str, Any] = {
        "dtype": dtype.name,
        "vocab_size": vocab,
        **_special_meta(tok_path),
        "tokenizer_sha256": tokenizer_sha256(tok_path),
        "encoder": encoder,
        "hf_fallback_parts": failed,
        "seed": run.config.seed,
        "val_fraction": cfg.val_fraction,
        "heldout_moved_to_train": moved,
        "buckets": {},
        "shards": [],
    }
    for bucket in curated_buckets(run.sub("curated")):
        outs = [Path(t.out) for t in tasks if t.bucket == bucket]
        writers = {s: assemble_split(tmp, bucket, s, [o / s for o in outs], dtype, cfg.shard_tokens) for s in SPLITS}
        for w in writers.values():
            meta["shards"].extend(w.shards)
        meta["buckets"][bucket] = {s: w.totals for s, w in writers.items()}
        run.events.write("tokenize", "bucket", bucket=bucket, **meta["buckets"][bucket])

    warn_small_heldout(run, meta["buckets"])
    if all("licenses" in r for r in records):  # parts encoded before licenses were counted: none claimed
        meta["licenses"] = license_tokens(records)
    atomic_write_text(tmp / "_meta.json", json.dumps(meta, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    shutil.rmtree(parts_dir, ignore_errors=True)  # only once tokens/ is complete
    return {"encoder": encoder, **{b: {s: v["tokens"] for s, v in d.items()} for b, d in meta["buckets"].items()}}
