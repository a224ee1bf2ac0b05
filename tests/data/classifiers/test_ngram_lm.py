"""The n-gram LM: modified Kneser-Ney equals an independent textbook implementation, distributions
sum to 1, <unk> gets the smoothing mass, perplexity orders real text < shuffled < random strings."""

from __future__ import annotations

import random
import string
from collections import Counter, defaultdict

import numpy as np
import pytest
from pydoc_data.topics import topics

from tokenmill.data.classifiers import ngram_lm as L

# Real prose written by others that every Python installation carries: the language reference.
TOPIC_NAMES = sorted(topics)
HELD_OUT = {"class", "for", "lambda"}
TRAIN_DOCS = [L.tokenize(topics[k]) for k in TOPIC_NAMES if k not in HELD_OUT]


@pytest.fixture(scope="module")
def lm3() -> L.NgramLM:
    return L.train(TRAIN_DOCS, 3)


# --------------------------------------------------------------------------- an independent KN
def reference_kn(sentences: list[list[str]], order: int):
    """Interpolated modified Kneser-Ney straight from Chen & Goodman (1998), with dicts."""
    vocab_size = len({w for s in sentences for w in s}) + 2  # V' = words, </s>, <unk>
    counts: list[Counter] = [Counter() for _ in range(order + 2)]
    for s in sentences:
        toks = ["<s>", *s, "</s>"]
        for i in range(1, len(toks)):
            for k in range(1, min(order, i + 1) + 1):
                counts[k][tuple(toks[i - k + 1:i + 1])] += 1
    left: dict[tuple, set] = defaultdict(set)
    for k in range(2, order + 1):
        for g in counts[k]:
            left[g[1:]].add(g[0])
    adj: list[dict] = [{} for _ in range(order + 1)]
    for k in range(1, order + 1):
        for g, c in counts[k].items():
            adj[k][g] = c if k == order or g[0] == "<s>" else len(left[g])
    disc = {}
    for k in range(1, order + 1):
        n = Counter(adj[k].values())
        y = n[1] / (n[1] + 2 * n[2])
        disc[k] = (1 - 2 * y * n[2] / n[1], 2 - 3 * y * n[3] / n[2], 3 - 4 * y * n[4] / n[3])

    def d(k: int, a: int) -> float:
        return disc[k][min(a, 3) - 1]

    def prob(w: str, h: tuple) -> float:
        k = len(h) + 1
        ext = {g: a for g, a in adj[k].items() if g[:-1] == h}
        if not ext:  # a context never seen: all weight on the shorter one
            return prob(w, h[1:])
        total = sum(ext.values())
        a = ext.get(h + (w,), 0)
        alpha = (a - d(k, a)) / total if a else 0.0
        gamma = sum(d(k, x) for x in ext.values()) / total
        lower = 1.0 / vocab_size if k == 1 else prob(w, h[1:])
        return alpha + gamma * lower

    return prob, disc


def toy_corpus(seed: int = 0, n_sentences: int = 400) -> list[list[str]]:
    """Zipf-distributed words with recurring phrases: every count-of-count n1..n4 is non-zero."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(80)]
    weights = [1 / (i + 1) for i in range(80)]
    phrases = [["the", "cat", "sat"], ["on", "the", "mat"], ["the", "dog"]]
    out = []
    for _ in range(n_sentences):
        s: list[str] = []
        while len(s) < rng.randint(3, 9):
            s += rng.choice(phrases) if rng.random() < 0.3 else rng.choices(words, weights)
        out.append(s)
    return out


def as_doc(sentences: list[list[str]]) -> list[str]:
    return [t for s in sentences for t in (*s, L.NEWLINE)]


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_equals_independent_modified_kneser_ney(order):
    sentences = toy_corpus()
    lm = L.train([as_doc(sentences)], order)
    prob, disc = reference_kn(sentences, order)
    for k in range(1, order + 1):
        assert lm.discounts[k - 1] == pytest.approx(disc[k])  # the formula, not the fallback
        assert lm.discounts[k - 1] != L.FALLBACK_DISCOUNTS
    contexts = [[], ["the"], ["the", "cat"], ["w0", "w1"], ["w3"], ["cat", "w0", "the"], ["unseen", "the"]]
    for ctx in contexts:
        got = np.exp(lm.next_logprobs(ctx))
        h = ("<s>", *(w if w in lm.vocab else "<unk>" for w in ctx))[-(order - 1):] if order > 1 else ()
        want = [0.0 if w == L.BOS else prob(w, h) for w in lm.vocab]
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-12, err_msg=f"context {ctx}")


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_probabilities_sum_to_one_on_real_text(order):
    lm = L.train(TRAIN_DOCS, order)
    for ctx in ([], ["the"], ["the", "value", "of"], ["a", "class", "definition"], ["zyzzyva", "of"],
                ["return", "."]):
        assert np.exp(lm.next_logprobs(ctx)).sum() == pytest.approx(1.0, abs=1e-5), ctx


def test_unknown_words_share_the_unigram_smoothing_mass(lm3):
    p = np.exp(lm3.next_logprobs(["zyzzyva", "qwxq"]))  # a context of unknown words: the unigram
    assert p[L.BOS_ID] < 1e-40  # <s> is never predicted
    predictable = np.delete(p, L.BOS_ID)
    # <unk> has no count of its own: only the uniform share gamma()/|V'|, the least of all words.
    assert p[L.UNK_ID] == pytest.approx(predictable.min(), rel=1e-6)
    assert p[L.UNK_ID] < 1e-4 and p[L.UNK_ID] * predictable.size < 0.2
    assert lm3.encode(["zyzzyva", "the", "\n"]).tolist() == [L.UNK_ID, lm3.vocab.index("the"), L.EOS_ID]


def test_tokenize_normalizes_like_ccnet():
    text = "Émile's 2020 “Quote” — done…\nNext LINE"
    assert L.tokenize(text) == ["emile", "'", "s", "0000", '"', "quote", '"', "-", "done", ".", ".", ".",
                                "\n", "next", "line"]


def test_frame_one_sentence_per_nonempty_line():
    e, b = L.EOS_ID, L.BOS_ID
    seq, pos = L.frame(np.array([e, e, 7, 8, e, e, e, 9]))
    assert seq.tolist() == [b, 7, 8, e, b, 9, e]
    assert pos.tolist() == [0, 1, 2, 3, 0, 1, 2]
    assert L.frame(np.array([e, e]))[0].size == 0


def _shuffled_and_garbage(tokens: list[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """The same words in a random order; random letter strings of the same lengths."""
    rng = random.Random(seed)
    words = [t for t in tokens if t != L.NEWLINE]
    garbage = ["".join(rng.choices(string.ascii_lowercase, k=len(w))) for w in words]
    return rng.sample(words, len(words)), garbage


def test_perplexity_training_text_below_shuffled_below_random_strings(lm3):
    train = TRAIN_DOCS[TOPIC_NAMES.index("assignment")]
    shuffled, garbage = _shuffled_and_garbage(train)
    pp = [lm3.perplexity(x) for x in (train, shuffled, garbage)]
    assert pp[0] < pp[1] < pp[2] and pp[1] > 10 * pp[0] and pp[2] > 10 * pp[1]
    # The same order holds for a topic left out of training: real < shuffled < random strings.
    real = L.tokenize(topics["for"])
    shuffled, garbage = _shuffled_and_garbage(real)
    assert lm3.perplexity(real) < lm3.perplexity(shuffled) < lm3.perplexity(garbage)
    assert lm3.perplexity([]) is None


def test_pair_logprobs_equal_the_order_2_model_at_every_position(lm3):
    """Seen and unseen bigrams, a held-out topic's and its pairs reversed (mostly unseen)."""
    seq, pos = L.frame(lm3.encode(L.tokenize(topics["for"])))
    at = np.flatnonzero(pos[1:] > 0) + 1  # every predicted position
    want = lm3.token_logprobs(seq, pos, max_order=2)[at]
    assert np.array_equal(lm3.pair_logprobs(seq[at - 1], seq[at]), want)
    prev, nxt = seq[at], seq[at - 1]  # the pairs reversed: each framed as a line <s> prev nxt
    lines = np.stack([np.full(at.size, L.BOS_ID), prev, nxt], axis=1).ravel()
    framed = lm3.token_logprobs(lines, np.tile(np.arange(3), at.size), max_order=2)[2::3]
    assert np.array_equal(lm3.pair_logprobs(prev, nxt), framed)
    backed_off = framed == lm3.uni_logp[nxt] + lm3.uni_backoff[prev].astype(np.float64)
    assert backed_off.any() and not backed_off.all()  # both branches: unseen pairs back off, seen ones do not


def test_perplexity_is_pooled_over_lines(lm3):
    """CCNet: exp(-(sum of all lines' log p) / (sum of all lines' words + 1 each))."""
    a, b = L.tokenize("the value of x"), L.tokenize("a class definition")
    (la, na), (lb, nb) = lm3.score(a), lm3.score(b)
    assert na == 5 and nb == 4
    assert lm3.perplexity([*a, "\n", *b]) == pytest.approx(np.exp(-(la + lb) / (na + nb)))


def test_arrays_round_trip_and_training_is_deterministic(lm3):
    arrays = lm3.to_arrays()
    assert all(a.dtype != object for a in arrays.values())
    again = L.train(TRAIN_DOCS, 3).to_arrays()
    assert arrays.keys() == again.keys()
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)
    loaded = L.NgramLM.from_arrays(arrays)
    doc = L.tokenize(topics["lambda"])
    assert loaded.perplexity(doc) == lm3.perplexity(doc)


def test_training_in_chunks_equals_training_at_once(monkeypatch, lm3):
    monkeypatch.setattr(L, "CHUNK_TOKENS", 5000)  # ~25 chunks instead of one
    chunked = L.train(TRAIN_DOCS, 3)
    doc = L.tokenize(topics["class"])
    assert chunked.perplexity(doc) == pytest.approx(lm3.perplexity(doc), rel=1e-6)
    assert chunked.stats() == lm3.stats()


def test_hash_table_finds_every_key_and_nothing_else():
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2**63, 5000, dtype=np.uint64) * np.uint64(2))
    keys = np.concatenate([keys, np.array([0], np.uint64)])  # 0 is the empty mark: still stored
    table, slots = L.build_table(keys)
    assert table.size >= 2 * keys.size and len(set(slots.tolist())) == keys.size
    slot, found = L.lookup(table, keys)
    assert found.all() and np.array_equal(slot, slots)
    others = keys[:-1] + np.uint64(1)  # odd: none of them is a key
    assert not L.lookup(table, others)[1].any()


def test_empty_reference_is_an_error():
    with pytest.raises(ValueError, match="no tokens"):
        L.train([[], []], 3)
