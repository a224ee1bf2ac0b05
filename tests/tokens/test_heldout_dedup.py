import random
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import MinHashConfig
from tokenmill.data.heldout_split import CutCounter
from tokenmill.tokens import heldout_dedup
from tokenmill.tokens.heldout_dedup import (all_pairs, band_dtype, exact_key, last_matches,
                                            shuffled_training_duplicates, training_duplicates)

CFG = MinHashConfig()


def _text(seed: int, n: int = 120) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "paper", "light", "green", "metal",
             "ocean", "field", "tower", "glass", "sound", "north", "quiet", "amber", "cedar"]
    return " ".join(rng.choice(words) + str(rng.randint(0, 50)) for _ in range(n))


def test_exact_key_ignores_case_punctuation_and_spacing():
    assert exact_key("Hello, World!\n") == exact_key("hello   world")
    assert exact_key("hello world") != exact_key("hello there")


def test_exact_and_near_duplicates_of_training_documents_are_found():
    base = _text(1)
    words = base.split()
    near = " ".join(words[:-3] + ["zz1", "zz2", "zz3"])  # 3 of 120 words changed: Jaccard ~0.93
    texts = {"t1": base, "t2": _text(2), "h_exact": base.upper() + " !!", "h_near": near, "h_new": _text(3)}
    found = training_duplicates(texts, {"h_exact", "h_near", "h_new"}, CFG, seed=7)
    assert set(found) == {"h_exact", "h_near"}
    assert found["h_exact"] == {"reason": "exact", "match": "t1", "jaccard": 1.0}
    assert found["h_near"]["reason"] == "near" and found["h_near"]["match"] == "t1"
    assert CFG.threshold <= found["h_near"]["jaccard"] < 1.0


def test_held_out_documents_are_never_matched_to_each_other():
    base = _text(5)
    texts = {"t": _text(6), "h1": base, "h2": base}  # duplicates inside the held-out split only
    assert training_duplicates(texts, {"h1", "h2"}, CFG, seed=7) == {}
    assert training_duplicates({"t": base}, set(), CFG, seed=7) == {}


# --------------------------------------------------------------------------- the shuffle on disk
def _planted_corpus(tmp_path, seed: int):
    """Three buckets of several parts: new texts, copies of a pool of originals exact (case and
    punctuation changed) or near (a few words changed: either side of the threshold), originals
    copied many times (ties), short texts, punctuation-only and empty texts."""
    rng = random.Random(seed)
    pool = [_text(1000 + k) for k in range(40)]

    def doc() -> str:
        kind = rng.choice(["new", "new", "orig", "exact", "near", "near", "short", "punct", "empty"])
        if kind == "new":
            return _text(rng.getrandbits(32))
        base = rng.choice(pool)
        if kind == "orig":
            return base
        if kind == "exact":
            return base.upper().replace(" ", " , ")
        if kind == "near":
            words = base.split()
            for k in rng.sample(range(len(words)), rng.choice([1, 1, 2, 3, 6])):
                words[k] = f"zz{rng.randint(0, 9)}"
            return " ".join(words)
        return {"short": "two words", "punct": rng.choice(["!!", "...", "?!"]), "empty": ""}[kind]

    parts, texts = [], {}
    for bucket in ("a", "b", "c"):
        for k in range(3):
            ids = [f"{bucket}{rng.getrandbits(40):x}" for _ in range(rng.randint(0, 60))]
            docs = [doc() for _ in ids]
            path = tmp_path / "curated" / bucket / f"part-{k:05d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"id": pa.array(ids, pa.string()), "text": pa.array(docs, pa.string())}), path)
            parts.append((bucket, path, ids))
            texts.update((i, t) for i, t in zip(ids, docs) if t)  # as tokenize reads it in memory
    return parts, texts


@pytest.mark.parametrize("seed,per_partition,batch", [(0, 10**9, 512), (1, 97, 13), (2, 40, 1), (3, 300, 7)])
def test_shuffle_on_disk_decides_exactly_what_the_dict_in_memory_decides(tmp_path, seed, per_partition, batch):
    parts, texts = _planted_corpus(tmp_path, seed)
    cuts = {}
    for bucket in ("a", "b", "c"):
        counter = CutCounter(0.3, 2, seed)
        for b, _, ids in parts:
            if b == bucket:
                counter.add(ids)
        cuts[bucket] = counter.cut()
    held = {i for b, _, ids in parts for i in ids if cuts[b].holds(i)}
    want = training_duplicates(texts, held, CFG, seed=7)
    assert sum(r["reason"] == "exact" for r in want.values()) >= 3 and sum(r["reason"] == "near" for r in want.values()) >= 3

    work = tmp_path / "work"
    got = shuffled_training_duplicates([p for _, p, _ in parts], [cuts[b] for b, _, _ in parts], CFG, 7, work,
                                       records_per_partition=per_partition, batch_docs=batch)
    assert [(d.doc_id, d.record) for d in got] == list(want.items())  # same decisions, same order
    assert all(d.doc_id in parts[d.part][2] for d in got) and not work.exists()


def _cut_corpus(tmp_path):
    """The planted corpus of 5 parts, one held-out cut over all of it, and the part paths."""
    parts, texts = _planted_corpus(tmp_path, 5)
    counter = CutCounter(0.3, 2, 5)
    for _, _, ids in parts:
        counter.add(ids)
    return parts, texts, counter.cut(), [p for _, p, _ in parts]


def test_tasks_on_two_processes_decide_what_one_process_decides(tmp_path):
    parts, texts, cut, paths = _cut_corpus(tmp_path)
    one = shuffled_training_duplicates(paths, [cut] * len(parts), CFG, 7, tmp_path / "w1", 50, 9, processes=1)
    two = shuffled_training_duplicates(paths, [cut] * len(parts), CFG, 7, tmp_path / "w2", 50, 9, processes=2)
    held = {i for _, _, ids in parts for i in ids if cut.holds(i)}
    want = training_duplicates(texts, held, CFG, seed=7)
    assert len(want) >= 6
    assert [(d.part, d.doc_id, d.record) for d in two] == [(d.part, d.doc_id, d.record) for d in one]
    assert [(d.doc_id, d.record) for d in two] == list(want.items())
    assert not (tmp_path / "w2").exists()


def test_tasks_on_threads_decide_what_one_thread_decides(tmp_path, monkeypatch):
    """A corpus too small for processes runs the tasks on this process's threads: every task still
    writes its own spill files, so the decisions are the same, in the same order."""
    parts, texts, cut, paths = _cut_corpus(tmp_path)
    seen_threads = set()
    real_map = heldout_dedup._map_task

    def spying(args):
        seen_threads.add(threading.get_ident())
        return real_map(args)

    monkeypatch.setattr(heldout_dedup, "_map_task", spying)
    one = shuffled_training_duplicates(paths, [cut] * len(parts), CFG, 7, tmp_path / "w1", 50, 9)
    main_only = set(seen_threads)
    seen_threads.clear()
    two = shuffled_training_duplicates(paths, [cut] * len(parts), CFG, 7, tmp_path / "w2", 50, 9, threads=2)
    assert main_only == {threading.get_ident()} and threading.get_ident() not in seen_threads  # the pool ran them
    held = {i for _, _, ids in parts for i in ids if cut.holds(i)}
    assert [(d.part, d.doc_id, d.record) for d in two] == [(d.part, d.doc_id, d.record) for d in one]
    assert [(d.doc_id, d.record) for d in two] == list(training_duplicates(texts, held, CFG, seed=7).items())


def test_nothing_held_out_reads_nothing(tmp_path):
    parts, _ = _planted_corpus(tmp_path, 0)
    none = CutCounter(0.0, 0, 1).cut()
    assert none.holds_none
    assert shuffled_training_duplicates([p for _, p, _ in parts], [none] * len(parts), CFG, 7, tmp_path / "w", 10, 8) == []


def test_pair_joins_match_a_direct_computation():
    rng = np.random.default_rng(0)
    rec = np.zeros(300, dtype=band_dtype(2))
    rec["key"][:, 2] = rng.integers(0, 30, 300)
    rec["pos"] = rng.permutation(10_000)[:300]
    rec["held"] = rng.random(300) < 0.3
    rows = list(zip(rec["key"][:, 2].tolist(), rec["pos"].tolist(), rec["held"].tolist()))
    pairs = {(h, t) for kh, h, sh in rows if sh for kt, t, st in rows if not st and kt == kh}
    assert set(zip(all_pairs(rec)["held"].tolist(), all_pairs(rec)["train"].tolist())) == pairs
    last = {h: max(t for hh, t in pairs if hh == h) for h, _ in pairs}
    assert dict(zip(last_matches(rec)["held"].tolist(), last_matches(rec)["train"].tolist())) == last
