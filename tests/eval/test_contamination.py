"""Contamination audit on the tiny token store: planted copies, novel items, partial copies."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.eval.contamination import contamination, flag, ngram_hash, ngram_hashes
from tokenmill.tokens.store import TokenStore


def _train_set(store: TokenStore, n: int) -> set[tuple[int, ...]]:
    """Independent reference: every n-gram inside a training document, as Python tuples."""
    grams: set[tuple[int, ...]] = set()
    for bucket in store.buckets:
        for shard, i in store.docs(bucket, "train"):
            doc = [int(t) for t in shard.doc(i)]
            grams.update(tuple(doc[j: j + n]) for j in range(len(doc) - n + 1))
    return grams


def _share(items: list[list[int]], grams: set[tuple[int, ...]], n: int) -> tuple[int, int]:
    windows = [tuple(it[j: j + n]) for it in items for j in range(len(it) - n + 1)]
    return len(windows), sum(w in grams for w in windows)


def test_rolling_hash_equals_direct_hash():
    rng = np.random.default_rng(0)
    toks = rng.integers(0, 70000, size=200)
    for n in (1, 5, 13):
        h = ngram_hashes(toks, n)
        assert h.dtype == np.uint64 and h.size == toks.size - n + 1
        assert [int(x) for x in h] == [ngram_hash(toks[j: j + n]) for j in range(toks.size - n + 1)]
    assert ngram_hashes(toks[:4], 5).size == 0


def test_contamination_planted_novel_and_partial(tiny_run):
    store = TokenStore(tiny_run.path / "tokens")
    n = 8
    shard = store.shards("b", "train")[0]
    docs = [shard.doc(i).tolist() for i in range(shard.n_docs)]
    copied = max(docs, key=len)
    rng = np.random.default_rng(5)
    # ids outside both buckets' patterns never continue a training n-gram
    novel = [int(t) for t in rng.integers(3, 64, size=40)]
    half = copied[: len(copied) // 2] + [int(t) for t in rng.integers(3, 64, size=len(copied) // 2)]
    sets = {"copied": [copied[:-1]], "novel": [novel], "half": [half, novel[:5]],
            "short": [[3, 4, 5]], "empty": []}
    res = contamination(store, sets, n=n)
    grams = _train_set(store, n)
    assert res["copied"]["share"] == 1.0 and res["copied"]["found"] == res["copied"]["ngrams"] == len(copied) - n
    for name in ("novel", "half"):
        total, found = _share(sets[name], grams, n)
        assert (res[name]["ngrams"], res[name]["found"]) == (total, found)
        assert res[name]["share"] == pytest.approx(found / total)
    assert res["novel"]["share"] < 0.2
    assert 0.2 < res["half"]["share"] < 0.9
    assert res["short"] == {"ngrams": 0, "found": 0, "share": 0.0}
    assert res["empty"] == {"ngrams": 0, "found": 0, "share": 0.0}
    assert flag(res, 0.5) == ["copied"] + (["half"] if res["half"]["share"] > 0.5 else [])
    assert flag(res, 1.0) == []


def test_windows_across_documents_do_not_count(tiny_run):
    """The tail of one training document followed by the head of the next is not a training n-gram
    (unless it occurs inside some document), and small chunks give the same answer."""
    import tokenmill.eval.contamination as cm

    store = TokenStore(tiny_run.path / "tokens")
    n = 6
    shard = store.shards("a", "train")[0]
    a, b = shard.doc(0).tolist(), shard.doc(1).tolist()
    straddle = a[-3:] + b[:3]  # a[-1] is EOS
    grams = _train_set(store, n)
    res = contamination(store, {"s": [straddle]}, n=n)
    assert res["s"]["found"] == int(tuple(straddle) in grams)
    rng = np.random.default_rng(1)
    items = [[int(t) for t in rng.integers(0, 64, size=30)] for _ in range(5)] + [a, b, straddle]
    total, found = _share(items, grams, n)
    keys = np.unique(np.concatenate([ngram_hashes(np.asarray(it), n) for it in items]))
    reps_h, reps_w = cm._eval_ngrams(items, n)
    _, first = np.unique(reps_h, return_index=True)
    small = cm._training_hits(store, keys, reps_w[first], n, chunk=7)
    big = cm._training_hits(store, keys, reps_w[first], n)
    assert np.array_equal(small, big)
    assert contamination(store, {"x": items}, n=n)["x"] == {"ngrams": total, "found": found,
                                                           "share": found / total}


def test_rejects_bad_n(tiny_run):
    with pytest.raises(ValueError):
        contamination(TokenStore(tiny_run.path / "tokens"), {"x": [[1, 2]]}, n=0)


def test_task_items_copied_from_training_text_are_flagged(tokenized_run, tmp_path):
    """End to end on a real tokenizer and store: a lambada task whose item is a training document's
    text shares nearly all its 13-grams with the training split; invented text shares none."""
    import json

    from tokenmill.config import TaskConfig
    from tokenmill.eval.contamination import task_eval_sets
    from tokenmill.tokenizer.bpe import load_tokenizer

    tok = load_tokenizer(tokenized_run.sub("tokenizer", "tokenizer.json"))
    store = TokenStore(tokenized_run.sub("tokens"))
    shard = store.shards(store.buckets[0], "train")[0]
    i = int(np.argmax(np.diff(shard.offsets)))
    text = tok.decode(shard.doc(i)[:-1].tolist())[:2000]
    copied, novel = tmp_path / "copied.jsonl", tmp_path / "novel.jsonl"
    copied.write_text(json.dumps({"text": text}) + "\n")
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("qzxjvkw"), size=7)) for _ in range(60)]
    novel.write_text(json.dumps({"text": " ".join(words)}) + "\n")
    tasks = [TaskConfig(name="copied", path=str(copied), format="lambada"),
             TaskConfig(name="novel", path=str(novel), format="lambada")]
    sets = task_eval_sets(tasks, tok)
    assert sets["copied"][0] == tok.encode(text, add_special_tokens=False).ids
    res = contamination(store, sets, n=13)
    assert res["copied"]["share"] > 0.9
    assert res["novel"]["found"] == 0 and res["novel"]["ngrams"] > 0
    assert flag(res, 0.01) == ["copied"]
