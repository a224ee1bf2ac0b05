"""The semantic back-check: training windows, best matches, planted paraphrases found, and the
eval integration (eval.semantic_contamination)."""

from __future__ import annotations

import json

import numpy as np
import pydoc_data.topics as topics
import pytest

import tokenmill.eval.semantic_contamination as sc
from tokenmill.eval.embedding import WORD, Embedder
from tokenmill.eval.paraphrase import plant, precision_recall

DOCS = [(f"topic-{k}", topics.topics[k]) for k in sorted(topics.topics)]
ITEMS = {"python": [
    "To leave a loop before it ends, write the statement break",
    "A dictionary maps each key to a value",
    "Code that must run whether or not an exception happened goes in a finally clause",
    "The with statement wraps the execution of a block with methods defined by a context manager",
    "A lambda expression creates an anonymous function",
    "The global statement declares that the listed identifiers are to be interpreted as globals",
    "Slicing a sequence selects a range of items",
    "The yield expression is used when defining a generator function",
]}
SYNONYMS = {"leave": ["exit", "quit"], "statement": ["instruction"], "maps": ["associates"], "value": ["result"],
            "must": ["has to"], "execution": ["running"], "block": ["suite"], "creates": ["makes", "builds"],
            "anonymous": ["unnamed", "nameless"], "function": ["routine"], "declares": ["states"],
            "selects": ["picks", "chooses"], "range": ["span"], "items": ["elements"], "defining": ["writing"],
            "identifiers": ["names"], "sequence": ["series"], "happened": ["occurred"]}


def test_each_item_is_compared_at_the_window_length_nearest_its_own():
    assert [sc.window_size(" ".join(["w"] * n)) for n in (1, 5, 12, 23, 24, 45, 46, 200)] == [8, 8, 16, 32, 32, 32, 64, 64]


def test_windows_cover_every_word_and_end_flush():
    text = " ".join(f"w{i}" for i in range(23)) + "."
    ws = list(sc.windows("d", text, 8))
    covered = {m.group(0) for w in ws for m in WORD.finditer(w.text)}
    assert covered == {f"w{i}" for i in range(23)}
    assert ws[-1].end == text.index(".") and all(len(WORD.findall(w.text)) == 8 for w in ws)
    assert [w.text for w in sc.windows("d", "only three words", 8)] == ["only three words"]
    assert list(sc.windows("d", "  ...  ", 8)) == []


@pytest.fixture(scope="module")
def embedder():
    emb = Embedder.train([t for _, t in DOCS], dim=64, seed=0)
    emb.fit_common([t for _, t in DOCS][:200])
    return emb


def test_block_by_block_equals_one_pass(embedder, monkeypatch):
    """The running maximum over blocks of windows equals the maximum over all windows at once."""
    items = ITEMS["python"]
    size = 16
    every = [w for d, t in DOCS[:30] for w in sc.windows(d, t, size)]
    sims = embedder.embed(items) @ embedder.embed([w.text for w in every]).T
    monkeypatch.setattr(sc, "BLOCK", 7)
    got = sc.best_matches(embedder, items, DOCS[:30], size=16)
    assert [m.score for m in got] == pytest.approx(sims.max(axis=1).tolist(), abs=1e-5)
    assert [m.window.text for m in got] == [every[j].text for j in sims.argmax(axis=1)]


def _held_out_sentences(n: int) -> tuple[list[tuple[str, str]], list[str]]:
    """Training documents: every other reference topic; items: n sentences of the other topics
    (unseen text on the same subject, so the hard negatives are real near-misses)."""
    import random
    import re

    keys = sorted(topics.topics)
    train = [(f"topic-{k}", topics.topics[k]) for k in keys[::2]]
    sents = [s for k in keys[1::2] for s in (" ".join(x.split()) for x in re.split(r"(?<=[.!?])\s+", topics.topics[k]))
             if 10 <= len(s.split()) <= 20 and s[0].isupper() and not any(c in s for c in ("*", "``", ">>>"))]
    return train, random.Random(0).sample(sents, n)


def test_planted_paraphrases_raise_their_items_scores_and_only_theirs():
    train, items = _held_out_sentences(20)
    emb = Embedder.train([t for _, t in train], dim=64, seed=0)
    emb.fit_common([t for _, t in train][:200])
    docs, labels, texts = plant({"b": items}, train, SYNONYMS, seed=3, share=0.5)
    y = labels["b"]
    def count(corpus: list[tuple[str, str]], p: str) -> int:
        return sum(t.count(p) for _, t in corpus)

    assert sum(y) == 10 and all(count(docs, p) == count(train, p) + 1 for p in texts["b"].values())
    before = [m.score for m in sc.best_matches(emb, items, train)]
    after = sc.best_matches(emb, items, docs)
    gain = [a.score - b for a, b in zip(after, before)]
    planted = [g for g, lab in zip(gain, y) if lab]
    others = [g for g, lab in zip(gain, y) if not lab]
    assert sum(planted) / len(planted) > 0.1 and max(abs(g) for g in others) < 0.01
    # where an item's score rose, its best window now holds (words of) its planted paraphrase
    for i, g in enumerate(gain):
        if g > 0.05:
            assert len(set(WORD.findall(texts["b"][i])) & set(WORD.findall(after[i].window.text))) >= 4
    # measured on this set (Python's docs repeat themselves, so some unplanted items are real near-copies)
    pr = precision_recall([m.score for m in after], y, 0.9)
    assert pr["precision"] >= 0.6 and pr["recall"] >= 0.6
    report = sc.back_check(emb, {"b": items}, docs, 0.9)["b"]
    assert report["flagged"] == pr["tp"] + pr["fp"] and report["examples"][0]["score"] >= 0.9


def test_precision_recall_counts():
    pr = precision_recall([0.9, 0.8, 0.3, 0.7], [True, False, True, False], 0.75)
    assert (pr["tp"], pr["fp"], pr["fn"]) == (1, 1, 1) and pr["precision"] == pr["recall"] == 0.5


def test_the_eval_stage_reports_the_semantic_check_per_task(tokenized_run, no_whole_curated_column):
    from tokenmill.config import RunConfig
    from tokenmill.eval.evaluate import TaskScorer
    from tokenmill.runs import RunDir
    from tokenmill.tokens.store import TokenStore

    data = tokenized_run.config.model_dump(mode="json")
    data["eval"]["tasks"] = [{"name": "python-cloze", "path": "package:tasks/python_cloze.jsonl", "format": "lambada"}]
    data["eval"]["semantic_contamination"] = {"enabled": True, "threshold": 0.5, "dim": 32}
    run = RunDir(RunConfig.model_validate(data), tokenized_run.path)
    out = TaskScorer(run, TokenStore(run.sub("tokens"))).contamination()
    sem = out["python-cloze"]["semantic"]
    assert sem["items"] == 12 and sem["threshold"] == 0.5 and 0 <= sem["flagged"] <= 12
    assert -1.0 <= sem["max_score"] <= 1.0 and "share" in out["python-cloze"]  # beside the n-gram figure
    assert (run.sub("contamination", "embedder", "vocab.json")).exists()
    assert all(e["score"] >= 0.5 and e["doc_id"] for e in sem["examples"])
    json.dumps(out)  # goes into eval/<step>.json as it is


# --------------------------------------------------------------------------- streaming
def test_one_pass_over_a_stream_equals_one_scan_per_length(embedder):
    """Items of every window length against a one-shot generator: each item's best window is
    what a scan at its own length over a list finds."""
    items = ITEMS["python"] + ["break", "a loop", " ".join(WORD.findall(DOCS[3][1]))[:400]]
    assert len({sc.window_size(t) for t in items}) >= 3
    got = sc.best_matches(embedder, items, (d for d in DOCS[:40]))
    for n in {sc.window_size(t) for t in items}:
        mine = [i for i, t in enumerate(items) if sc.window_size(t) == n]
        want = sc.best_matches(embedder, [items[i] for i in mine], DOCS[:40], size=n)
        assert [got[i].score for i in mine] == pytest.approx([m.score for m in want], abs=1e-6)
        assert [got[i].window for i in mine] == [m.window for m in want]


def test_embedder_trains_on_the_first_documents_of_a_seeded_order_whatever_the_stream_order(monkeypatch):
    """The documents first by (seed, id) hash until max_words, as a sort of all of them would
    pick, from a stream in either order; the heap never holds more than that."""
    seen: list[list[str]] = []
    real = Embedder.train
    monkeypatch.setattr(Embedder, "train", classmethod(lambda cls, texts, **kw: (seen.append(list(texts)), real(texts, **kw))[1]))
    docs = DOCS[:120]
    ranked = sorted(docs, key=lambda d: sc._priority(d[0], 5))
    want, total = [], 0
    for _, text in ranked:
        if total >= 20_000:
            break
        want.append(text)
        total += len(text.split())
    a = sc.train_embedder(iter(docs), dim=16, max_words=20_000, seed=5)
    b = sc.train_embedder(iter(docs[::-1]), dim=16, max_words=20_000, seed=5)
    assert seen[0] == seen[1] == want and len(want) < len(docs)
    assert np.array_equal(a.vectors, b.vectors) and np.array_equal(a.common, b.common)


def test_training_documents_stream_by_merging_with_the_store(tokenized_run, request):
    """The merge of curated parts with the store's train ids gives the training documents, in
    store order, without reading a whole curated column; a store of other data is an error."""
    import pyarrow.parquet as pq

    from tokenmill.data.curated import iter_documents
    from tokenmill.tokens.store import TokenStore

    store = TokenStore(tokenized_run.sub("tokens"))
    curated = tokenized_run.sub("curated")
    train = [i for b in store.buckets for sh in store.shards(b, "train") for i in sh.doc_table().column("id").to_pylist()]
    text = {i: t for b in store.buckets for i, t in iter_documents(curated, b)}
    read_table = pq.read_table
    request.getfixturevalue("no_whole_curated_column")
    docs = sc.TrainingDocuments(curated, store)
    assert list(docs) == [(i, text[i]) for i in train] == list(docs)  # re-iterable
    assert len(train) < len(text)  # held-out documents were skipped

    part = curated / "prose" / "part-00000.parquet"
    table = read_table(part)
    pq.write_table(table.slice(0, table.num_rows - 3), part)  # the curated data changed since
    with pytest.raises(ValueError, match="not made from this curated data"):
        list(docs)
