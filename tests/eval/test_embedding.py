"""The SIF embedder tokenmill trains (PPMI + SVD word vectors, Arora et al. sentence embeddings)."""

from __future__ import annotations

import math

import numpy as np
import pydoc_data.topics as topics
import pytest

from tokenmill.eval.embedding import Embedder, _cooccurrence, _ppmi, words

CORPUS = [topics.topics[k] for k in sorted(topics.topics)]  # real prose: Python's reference topics


def test_ppmi_equals_a_direct_computation():
    texts = [["a", "b", "c", "a", "b"], ["c", "a", "d"]]
    vocab = ["a", "b", "c", "d"]
    ids = [np.asarray([vocab.index(w) for w in t]) for t in texts]
    window = 2
    counts = np.zeros((4, 4))
    for t in ids:  # every ordered pair at distance 1..window inside one text, weighted 1/distance, both ways
        for i in range(len(t)):
            for j in range(len(t)):
                if 0 < abs(i - j) <= window:
                    counts[t[i], t[j]] += 1 / abs(i - j)
    got = _cooccurrence(ids, 4, window).toarray()
    assert got == pytest.approx(counts)
    ctx = counts.sum(axis=0) ** 0.75
    ctx /= ctx.sum()
    total = counts.sum()
    want = np.zeros_like(counts)
    for i in range(4):
        for j in range(4):
            if counts[i, j] > 0:
                want[i, j] = max(0.0, math.log(counts[i, j] / total / (counts[i].sum() / total * ctx[j])))
    assert _ppmi(_cooccurrence(ids, 4, window)).toarray() == pytest.approx(want)


@pytest.fixture(scope="module")
def embedder():
    emb = Embedder.train(CORPUS, dim=64, seed=0)
    emb.fit_common(CORPUS[:200])
    return emb


def test_training_is_deterministic_and_saves_without_pickle(embedder, tmp_path):
    again = Embedder.train(CORPUS, dim=64, seed=0)
    assert np.array_equal(again.vectors, embedder.vectors)
    embedder.save(tmp_path / "e")
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == ["embedder.safetensors", "vocab.json"]
    loaded = Embedder.load(tmp_path / "e")
    probe = ["A dictionary maps each key to a value", "the for statement iterates over a sequence"]
    assert np.array_equal(loaded.embed(probe), embedder.embed(probe))


def test_a_bag_of_words_and_unknown_words(embedder):
    v = embedder.embed(["the loop ends with break", "break ends the loop with", "zzqx qqvz"])
    assert v[0] == pytest.approx(v[1], abs=1e-6)  # word order does not matter
    assert np.linalg.norm(v[0]) == pytest.approx(1.0, abs=1e-5) and not v[2].any()  # nothing known: zero
    assert words("Über-Größe x_1 2024") == ["über", "größe", "x_1", "2024"]


def test_paraphrases_are_closer_than_unrelated_sentences(embedder):
    pairs = [("To leave a loop before it ends, write the statement break",
              "Use the break statement to exit a loop early"),
             ("A dictionary maps each key to a value", "Dictionaries associate every key with a value"),
             ("An exception raised in the try clause is handled by a matching except clause",
              "The except clause catches errors thrown inside try")]
    v = embedder.embed([t for p in pairs for t in p])
    sims = v @ v.T
    for k in range(len(pairs)):
        same = sims[2 * k, 2 * k + 1]
        others = [sims[2 * k, 2 * j + 1] for j in range(len(pairs)) if j != k]
        assert same > max(others) + 0.1, (pairs[k], same, others)


def test_too_little_text_is_a_clear_error():
    with pytest.raises(ValueError, match="too few for 128-dimensional"):
        Embedder.train(["just a few words here"], dim=128, min_count=1)
