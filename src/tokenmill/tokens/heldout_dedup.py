"""Keep duplicates of training documents out of the held-out split.

A held-out document that is (nearly) the same text as a training document measures recall, not
generalization: validation bits-per-byte would reward memorization. Curation's
dedup steps usually removed such pairs already, but a user may run without them, and the split
may see data curated in several runs. So before tokenizing, every held-out candidate is checked
against the training documents of all buckets:

    exact     the same words (xxh3-128 of `minhash.normalized_words`, joined by one space)
    near      MinHash LSH candidates (the run's curate.minhash_dedup bands/rows/shingles),
              verified by exact shingle Jaccard >= its threshold

A held-out document that matches goes to training instead (its text is seen in training anyway)
and is recorded with its reason and the training document it matched.
"""

from __future__ import annotations

import copy
import multiprocessing
import shutil
import time
from collections import defaultdict
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow.parquet as pq
import xxhash

from tokenmill.data.config import MinHashConfig
from tokenmill.data.dedup.minhash import MinHasher, jaccard, normalized_words
from tokenmill.data.heldout_split import HeldoutCut
from tokenmill.data.dedup.spill import Spill, hash_partition, partitions_for


def exact_key(text: str) -> str:
    """Hash of the text's words (lowercased, punctuation dropped, any whitespace one separator)."""
    return xxhash.xxh3_128_hexdigest(b" ".join(normalized_words(text)))


def training_duplicates(
    texts: dict[str, str], held: Iterable[str], cfg: MinHashConfig, seed: int
) -> dict[str, dict[str, str | float]]:
    """{held-out id: {"reason": "exact"|"near", "match": training id, "jaccard": J}} for every
    held-out document that duplicates a training document (texts maps id -> text, all splits)."""
    held = set(held)
    train_ids = [i for i in texts if i not in held]
    held_ids = sorted(i for i in texts if i in held)
    if not held_ids or not train_ids:
        return {}
    found: dict[str, dict[str, str | float]] = {}
    by_key = {exact_key(texts[i]): i for i in train_ids}
    for i in held_ids:
        match = by_key.get(exact_key(texts[i]))
        if match is not None:
            found[i] = {"reason": "exact", "match": match, "jaccard": 1.0}

    rest = [i for i in held_ids if i not in found]
    if not rest:
        return found
    hasher = MinHasher(cfg, seed)
    ids = train_ids + rest
    shingles = hasher.shingle_sets([texts[i] for i in ids])
    sigs = hasher.signatures_of(shingles)
    bands: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    n_train = len(train_ids)
    for row in range(n_train):
        for b in range(cfg.bands):
            bands[(b, sigs[row, b * cfg.rows : (b + 1) * cfg.rows].tobytes())].append(row)
    for k, i in enumerate(rest):
        row = n_train + k
        if len(shingles[row]) == 0:
            continue
        candidates: set[int] = set()
        for b in range(cfg.bands):
            candidates.update(bands.get((b, sigs[row, b * cfg.rows : (b + 1) * cfg.rows].tobytes()), ()))
        best, best_j = None, 0.0
        for c in sorted(candidates):
            j = jaccard(shingles[row], shingles[c])
            if j > best_j:
                best, best_j = c, j
        if best is not None and best_j >= cfg.threshold:
            found[i] = {"reason": "near", "match": train_ids[best], "jaccard": round(float(best_j), 4)}
    return found


# --------------------------------------------------------------------------- at scale: a shuffle
# `training_duplicates` holds every text of the corpus in one dict. `shuffled_training_duplicates`
# decides the same by partitions. A document is named by its position (part index << 32 | row:
# positions sort in corpus order); the keys that can pair a held-out candidate with a training
# document go to files partitioned by key.
#
#   map      per part, batch by batch: the exact key and the MinHash band keys of every document
#   reduce   per key partition: each held-out key's last training document with the same exact
#            key, and every (held-out, training) pair that shares a band key; both spilled again,
#            partitioned by the held-out position
#   verify   per held-out partition: exact matches stand; the other candidates' exact Jaccard,
#            reading only the texts their pairs name
#
# Each phase's tasks run on `processes` spawned processes (map: runs of consecutive parts, about
# 8 tasks per process; reduce and verify: one per partition), each writing spill files of its
# own (`Spill.writer`, tagged by its first part or its partition), read in tag order: the same
# records in the same order as one process writes, so the decisions do not depend on the
# number of processes.
#
# Memory: a map task holds one batch of documents; a reduce task one partition of about
# `records_per_partition` records (the band file is the largest: `bands` records per document,
# 4·(rows+1)+9 bytes each); a verify task its pairs and the texts they name. The coordinator
# holds the part list, counters and the answer.
EXACT = np.dtype([("key", "<u4", (4,)), ("pos", "<i8"), ("held", "u1")])
PAIR = np.dtype([("held", "<i8"), ("train", "<i8")])


def band_dtype(rows: int) -> np.dtype:
    """A band record: the band's index and its `rows` signature values (the exact key), the
    document's position and whether it is a held-out candidate."""
    return np.dtype([("key", "<u4", (rows + 1,)), ("pos", "<i8"), ("held", "u1")])


@dataclass(frozen=True)
class Decision:
    """A held-out candidate that goes to training: its part (index in the input), id and why."""

    part: int
    doc_id: str
    record: dict[str, str | float]


def _sides(records: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(is held-out, group number of the key: equal keys, equal numbers) of each record, or None
    when one side is missing (no pair can form)."""
    held = records["held"].astype(bool)
    if held.all() or not held.any():
        return None
    return held, np.unique(records["key"], axis=0, return_inverse=True)[1].reshape(-1)


def last_matches(records: np.ndarray) -> np.ndarray:
    """(held, train) for each held-out record and the last training record (highest position)
    with its key: the training document a dict {key: id} built in corpus order would hold."""
    if (sides := _sides(records)) is None:
        return np.empty(0, dtype=PAIR)
    held, group = sides
    last = np.full(group.max() + 1, -1, dtype=np.int64)
    np.maximum.at(last, group[~held], records["pos"][~held])
    match = last[group[held]]
    out = np.empty(int((match >= 0).sum()), dtype=PAIR)
    out["held"], out["train"] = records["pos"][held][match >= 0], match[match >= 0]
    return out


def all_pairs(records: np.ndarray) -> np.ndarray:
    """(held, train) for every held-out record and every training record with the same key."""
    if (sides := _sides(records)) is None:
        return np.empty(0, dtype=PAIR)
    held, group = sides
    order = np.argsort(group[~held], kind="stable")
    t_group, t_pos = group[~held][order], records["pos"][~held][order]
    lo = np.searchsorted(t_group, group[held], "left")
    count = np.searchsorted(t_group, group[held], "right") - lo
    out = np.empty(int(count.sum()), dtype=PAIR)
    out["held"] = np.repeat(records["pos"][held], count)
    out["train"] = t_pos[np.repeat(lo - (np.cumsum(count) - count), count) + np.arange(out.size)]
    return out


def read_positions(parts: list[Path], positions: np.ndarray, batch_rows: int = 4096) -> dict[int, tuple[str, str]]:
    """(id, text) of the documents at these positions, each part read once, batch by batch."""
    out: dict[int, tuple[str, str]] = {}
    positions = np.unique(positions)
    for index in np.unique(positions >> 32):
        rows = positions[(positions >> 32) == index] & 0xFFFFFFFF
        start = 0
        for batch in pq.ParquetFile(parts[int(index)]).iter_batches(batch_size=batch_rows, columns=["id", "text"]):
            here = rows[(rows >= start) & (rows < start + batch.num_rows)]
            if here.size:
                ids = batch.column("id").take(here - start).to_pylist()
                texts = batch.column("text").take(here - start).to_pylist()
                out.update(((int(index) << 32) + int(r), (i, t)) for r, i, t in zip(here, ids, texts))
            start += batch.num_rows
    return out


class _Shuffle:
    def __init__(self, parts: list[Path], work: Path, cfg: MinHashConfig, seed: int, n: int):
        self.parts, self.cfg, self.n = parts, cfg, n
        self.hasher = MinHasher(cfg, seed)
        self.exact = Spill(work / "exact", EXACT, n)
        self.bands = Spill(work / "bands", band_dtype(cfg.rows), n)
        self.matched = Spill(work / "matched", PAIR, n)  # exact matches, by held-out position
        self.pairs = Spill(work / "pairs", PAIR, n)  # near candidates, by held-out position

    def task(self, tag: int) -> "_Shuffle":
        """This shuffle for one task: it writes spill files of its own (tagged by the task)."""
        view = copy.copy(self)
        view.exact, view.bands = self.exact.writer(tag), self.bands.writer(tag)
        view.matched, view.pairs = self.matched.writer(tag), self.pairs.writer(tag)
        return view

    def map_part(self, index: int, cut: HeldoutCut, batch_docs: int) -> None:
        row = 0
        for batch in pq.ParquetFile(self.parts[index]).iter_batches(batch_size=batch_docs, columns=["id", "text"]):
            ids, texts = batch.column("id").to_pylist(), batch.column("text").to_pylist()
            keep = [k for k, t in enumerate(texts) if t]  # an empty text takes no part (as in memory)
            if keep:
                pos = (index << 32) + row + np.asarray(keep, dtype=np.int64)
                held = np.fromiter((cut.holds(ids[k]) for k in keep), dtype=np.uint8, count=len(keep))
                self._map_batch([texts[k] for k in keep], pos, held)
            row += len(texts)

    def _map_batch(self, texts: list[str], pos: np.ndarray, held: np.ndarray) -> None:
        digests = b"".join(xxhash.xxh3_128_digest(b" ".join(normalized_words(t))) for t in texts)
        exact = np.empty(len(texts), dtype=EXACT)
        exact["key"], exact["pos"], exact["held"] = np.frombuffer(digests, dtype="<u4").reshape(-1, 4), pos, held
        self.exact.write(exact, hash_partition(exact["key"][:, 0], self.n))

        shingles = self.hasher.shingle_sets(texts)
        has = np.fromiter(map(len, shingles), dtype=np.int64, count=len(texts)) > 0  # none: J = 0 with all
        b, r = self.cfg.bands, self.cfg.rows
        sigs = self.hasher.signatures_of([s for s, h in zip(shingles, has) if h])
        bands = np.empty((len(sigs), b), dtype=self.bands.dtype)
        bands["key"][:, :, 0] = np.arange(b, dtype=np.uint32)
        bands["key"][:, :, 1:] = sigs.reshape(len(sigs), b, r)
        bands["pos"], bands["held"] = pos[has][:, None], held[has][:, None]
        self.bands.write(bands.reshape(-1), hash_partition(self.hasher.band_keys(sigs).reshape(-1), self.n))

    def reduce(self, p: int) -> None:
        for spill, pairs in ((self.matched, last_matches(self.exact.read(p))), (self.pairs, all_pairs(self.bands.read(p)))):
            spill.write(pairs, hash_partition(pairs["held"], self.n))

    def verify(self, p: int) -> tuple[list[tuple[int, str, dict]], list[tuple[int, str, dict]]]:
        """(exact, near) decisions of the held-out candidates of partition p: (position, id, record)."""
        matched = self.matched.read(p)
        pairs = self.pairs.read(p)
        pairs = np.unique(pairs[~np.isin(pairs["held"], matched["held"])])  # sorted: held, then train
        docs = read_positions(self.parts, np.concatenate([matched["held"], matched["train"], pairs["held"], pairs["train"]]))
        exact = [
            (int(h), docs[h][0], {"reason": "exact", "match": docs[t][0], "jaccard": 1.0})
            for h, t in zip(matched["held"].tolist(), matched["train"].tolist())
        ]
        near_ids = np.unique(np.concatenate([pairs["held"], pairs["train"]])).tolist()
        shingles = dict(zip(near_ids, self.hasher.shingle_sets([docs[i][1] for i in near_ids])))
        near = []
        for h, start, end in _runs(pairs["held"]):
            best, best_j = None, 0.0
            for t in pairs["train"][start:end].tolist():  # ascending: ties go to the first, as in memory
                j = jaccard(shingles[h], shingles[t])
                if j > best_j:
                    best, best_j = t, j
            if best is not None and best_j >= self.cfg.threshold:
                near.append((h, docs[h][0], {"reason": "near", "match": docs[best][0], "jaccard": round(float(best_j), 4)}))
        return exact, near


def _runs(values: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values in a sorted array."""
    if values.size == 0:
        return
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    ends = np.r_[starts[1:], values.size]
    yield from zip(values[starts].tolist(), starts.tolist(), ends.tolist())


def _map_task(args: tuple[_Shuffle, int, list[HeldoutCut], int]) -> None:
    """Map consecutive parts first, first + 1, ... (one spill file per partition for all of them)."""
    shuffle, first, cuts, batch_docs = args
    mine = shuffle.task(first)
    for index, cut in enumerate(cuts, start=first):
        mine.map_part(index, cut, batch_docs)


def _reduce_task(args: tuple[_Shuffle, int]) -> None:
    shuffle, p = args
    shuffle.task(p).reduce(p)


def _verify_task(args: tuple[_Shuffle, int]) -> tuple[list[tuple[int, str, dict]], list[tuple[int, str, dict]]]:
    shuffle, p = args
    return shuffle.verify(p)


def _run_all(pool: Executor | None, fn: Callable[[Any], Any], args: Sequence[Any]) -> list[Any]:
    """fn over args, on the pool when there is one (results in args order either way)."""
    return list(pool.map(fn, args)) if pool is not None else [fn(a) for a in args]


def shuffled_training_duplicates(
    parts: list[Path],
    cuts: list[HeldoutCut],
    cfg: MinHashConfig,
    seed: int,
    work: Path,
    records_per_partition: int,
    batch_docs: int,
    processes: int = 1,
    timings: dict[str, float] | None = None,
    threads: int = 1,
) -> list[Decision]:
    """`training_duplicates` of a corpus on disk: `parts` in corpus order, `cuts[i]` the held-out
    cut of part i's bucket. Same decisions, in the same order (exact ones, then near ones, each by
    id), with no per-document state outside one task, whatever `processes` runs the tasks (1: this
    process alone; `threads` > 1: this process's threads, for a corpus too small to pay for
    starting processes, since the signatures' numpy work releases the GIL). `work` is scratch,
    removed at the end; `timings` receives each phase's seconds (start: the pool's processes,
    then map, reduce, verify)."""
    if all(c.holds_none for c in cuts):
        return []
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    shuffle = _Shuffle(parts, work, cfg, seed, partitions_for(rows * cfg.bands, records_per_partition))
    # spawn, not fork: the caller may hold threads (rich's refresh, tokenizer pools)
    pool: Executor | None = None
    if processes > 1 and max(len(parts), shuffle.n) > 1:
        pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
    elif threads > 1 and max(len(parts), shuffle.n) > 1:
        pool = ThreadPoolExecutor(threads)  # tasks share nothing mutable: each writes its own spill files
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        if timings is not None:
            timings[phase] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()

    try:
        lap("start")
        # Consecutive parts per map task, ~8 tasks per process: enough to balance uneven parts,
        # few enough that the spill files (tasks x partitions) stay few.
        per = max(1, -(-len(parts) // (8 * max(1, processes, threads))))
        _run_all(pool, _map_task, [(shuffle, i, cuts[i : i + per], batch_docs) for i in range(0, len(parts), per)])
        lap("map")
        _run_all(pool, _reduce_task, [(shuffle, p) for p in range(shuffle.n)])
        lap("reduce")
        exact, near = [], []
        for e, n in _run_all(pool, _verify_task, [(shuffle, p) for p in range(shuffle.n)]):
            exact += e
            near += n
        lap("verify")
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        shutil.rmtree(work, ignore_errors=True)
    return [Decision(pos >> 32, i, rec) for pos, i, rec in sorted(exact, key=lambda d: d[1]) + sorted(near, key=lambda d: d[1])]
