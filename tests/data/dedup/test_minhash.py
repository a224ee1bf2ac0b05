"""MinHash dedup: shingles equal an independent set computation, signatures equal a reference
implementation and estimate Jaccard within binomial bounds, LSH candidates equal a brute-force
band comparison, clusters keep the smallest index and drop unverified candidates."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

from tokenmill.config import MinHashConfig
from tokenmill.data.dedup import minhash as mh
from tokenmill.data.dedup.minhash import (MinHasher, UnionFind, candidate_pairs, candidate_probability, clusters,
                                    jaccard, minhash_dedup_local, normalized_words)

CFG = MinHashConfig()
VOCAB = [f"w{i}" for i in range(5000)]


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(VOCAB) for _ in range(n)]


def _gram_set(text: str, k: int = 5) -> set[tuple[str, ...]]:
    """Independent shingling: the regex definition of a word, Python tuples, no hashing."""
    w = re.sub(r"[^\w\s]|_", "", text.lower()).split()
    if 0 < len(w) < k:
        return {tuple(w)}
    return {tuple(w[i: i + k]) for i in range(len(w) - k + 1)}


def _true_jaccard(a: str, b: str) -> float:
    sa, sb = _gram_set(a), _gram_set(b)
    return len(sa & sb) / len(sa | sb)


# ----------------------------------------------------------------------------- words, shingles
def test_words_are_lowercase_and_punctuation_free():
    assert normalized_words("Don't PANIC: the U.S.-based fox_trot!") == [b"dont", b"panic", b"the", b"usbased", b"foxtrot"]
    # Unicode punctuation and whitespace, accented letters kept
    assert normalized_words("Café «naïve»—x\u00a0y\u3000z") == ["café".encode(), "naïvex".encode(), b"y", b"z"]
    assert normalized_words("") == [] and normalized_words(" ... ! ") == []


def test_all_three_paths_equal_the_regex_definition():
    rng = random.Random(3)
    ascii_chars = [chr(c) for c in range(128)]
    other = list("éß«»—\u00a0\u2009\u3000中文ÉİΣ…’\U0001F600")
    # pure ASCII (translate), a few non-ASCII (translate + replace), mostly non-ASCII (regex)
    for alphabet in (ascii_chars, ascii_chars * 8 + other, ascii_chars + other * 10):
        for _ in range(300):
            s = "".join(rng.choice(alphabet) for _ in range(40))
            expected = [w.encode() for w in re.sub(r"[^\w\s]|_", "", s.lower()).split()]
            assert normalized_words(s) == expected


def test_shingle_count_and_jaccard_equal_independent_sets():
    rng = random.Random(0)
    h = MinHasher(CFG, seed=1)
    base = _words(rng, 300)
    for edit in (0.0, 0.02, 0.1, 0.3):
        other = [rng.choice(VOCAB) if rng.random() < edit else w for w in base]
        a, b = " ".join(base), ", ".join(other).upper()  # punctuation and case do not matter
        sa, sb = h.shingles(a), h.shingles(b)
        assert len(sa) == len(_gram_set(a)) and len(sb) == len(_gram_set(b))
        assert jaccard(sa, sb) == pytest.approx(_true_jaccard(a, b), abs=1e-12)


def test_batched_shingles_respect_document_boundaries():
    h = MinHasher(CFG, seed=1)
    texts = ["one two three four five six", "", "a b", "x", "seven eight nine ten eleven", "... !!"]
    batched = h.shingle_sets(texts)
    for t, s in zip(texts, batched):
        assert np.array_equal(s, h.shingles(t))
        assert len(s) == len(_gram_set(t))
    # a short document is one shingle of all its words, distinct from the same words inside a longer one
    assert len(batched[2]) == 1 and len(np.intersect1d(batched[2], h.shingles("a b c d e"))) == 0


def test_char_shingles():
    h = MinHasher(MinHashConfig(shingle="char", k=3), seed=1)
    s = h.shingles("Abc  abcd")  # lowercased, spaces collapsed: "abc abcd"
    assert len(s) == len({"abc", "bc ", "c a", " ab", "bcd"})
    assert np.array_equal(h.shingles("ABC\nabcd"), s)


# ----------------------------------------------------------------------------- signatures
def _reference_signature(shingles: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[int]:
    """min over x of (a * fmix32(x mod 2^32) + b) mod 2^32, with Python integers."""
    def fmix32(x: int) -> int:
        x ^= x >> 16
        x = (x * 0x85EBCA6B) & 0xFFFFFFFF
        x ^= x >> 13
        x = (x * 0xC2B2AE35) & 0xFFFFFFFF
        return x ^ (x >> 16)
    xs = [fmix32(int(v) & 0xFFFFFFFF) for v in shingles]
    return [min((int(ai) * x + int(bi)) & 0xFFFFFFFF for x in xs) for ai, bi in zip(a, b)]


def test_signatures_equal_a_reference_implementation():
    rng = random.Random(1)
    h = MinHasher(MinHashConfig(bands=4, rows=3), seed=9)
    texts = [" ".join(_words(rng, n)) for n in (7, 40, 3, 0, 120)]
    sigs = h.signatures(texts)
    assert sigs.shape == (5, 12) and sigs.dtype == np.uint32
    for t, sig in zip(texts, sigs):
        s = h.shingles(t)
        expected = _reference_signature(s, h.a, h.b) if len(s) else [0xFFFFFFFF] * 12
        assert sig.tolist() == expected


def test_large_document_and_batch_paths_agree(monkeypatch):
    rng = random.Random(2)
    texts = [" ".join(_words(rng, n)) for n in (50, 3000, 10, 0, 700)]
    h = MinHasher(CFG, seed=4)
    whole = h.signatures(texts)
    monkeypatch.setattr(mh, "_BATCH_SHINGLES", 64)  # forces the running-minimum path and many batches
    monkeypatch.setattr(mh, "_BATCH_BYTES", 100)
    assert np.array_equal(h.signatures(texts), whole)
    assert np.array_equal(h.signatures_of(h.shingle_sets(texts)), whole)
    assert np.array_equal(h.signatures(texts[1:2])[0], whole[1])


def test_identical_texts_identical_signatures_and_determinism():
    h = MinHasher(CFG, seed=5)
    t = "The quick brown fox jumps over the lazy dog near the river bank today."
    s = h.signatures([t, t, t.upper().replace(" ", "  ")])
    assert np.array_equal(s[0], s[1]) and np.array_equal(s[0], s[2])
    assert np.array_equal(MinHasher(CFG, seed=5).signatures([t]), s[:1])
    assert not np.array_equal(MinHasher(CFG, seed=6).signatures([t]), s[:1])  # the seed picks permutations


def test_agreement_rate_estimates_jaccard_within_binomial_bounds():
    """Per pair, R * J_hat ~ Binomial(R, J): the z-scores of 300 pairs must look standard normal."""
    rng = random.Random(7)
    h = MinHasher(CFG, seed=11)
    R = h.num_perm
    a_texts, b_texts = [], []
    for i in range(300):
        base = _words(rng, 200)
        edit = (i % 10) / 20  # 0 .. 0.45 of the words replaced: J from 1 down to ~0.05
        a_texts.append(" ".join(base))
        b_texts.append(" ".join(rng.choice(VOCAB) if rng.random() < edit else w for w in base))
    sa, sb = h.shingle_sets(a_texts), h.shingle_sets(b_texts)
    est = (h.signatures_of(sa) == h.signatures_of(sb)).mean(axis=1)
    true = np.array([jaccard(x, y) for x, y in zip(sa, sb)])
    assert np.array_equal(est[true == 1.0], np.ones(int((true == 1.0).sum())))
    mid = (true > 0.02) & (true < 0.98)
    z = (est[mid] - true[mid]) / np.sqrt(true[mid] * (1 - true[mid]) / R)
    assert abs(z.mean()) < 4 / math.sqrt(mid.sum())  # unbiased
    assert 0.7 < z.std() < 1.3  # binomial spread: the permutations act independently
    assert np.mean(np.abs(z) > 3) < 0.02


# ----------------------------------------------------------------------------- LSH
def test_band_keys_equal_exactly_when_band_rows_equal():
    h = MinHasher(MinHashConfig(bands=4, rows=3), seed=1)
    rng = np.random.default_rng(0)
    sigs = rng.integers(0, 2**32, (3, 12), dtype=np.uint64).astype(np.uint32)
    sigs[1, 6:9] = sigs[0, 6:9]  # docs 0 and 1 agree on band 2 only
    sigs[2, 0:3] = sigs[0, 3:6]  # same rows in a different band must not match
    keys = h.band_keys(sigs)
    assert np.array_equal(keys, mh.band_keys(sigs, 4, 3))
    assert keys.shape == (3, 4) and keys.dtype == np.uint64
    assert (keys[0] == keys[1]).tolist() == [False, False, True, False]
    assert not (keys[2] == keys[0]).any()


def _brute_force_pairs(keys: np.ndarray) -> set[tuple[int, int]]:
    n = len(keys)
    return {(i, j) for i in range(n) for j in range(i + 1, n) if (keys[i] == keys[j]).any()}


def test_candidate_pairs_equal_brute_force_band_comparison():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 40, (150, 6)).astype(np.uint64)  # many collisions, buckets up to ~10
    pairs = candidate_pairs(keys)
    assert pairs.dtype == np.int64 and (pairs[:, 0] < pairs[:, 1]).all()
    assert len({tuple(p) for p in pairs.tolist()}) == len(pairs)  # deduplicated
    assert {tuple(p) for p in pairs.tolist()} == _brute_force_pairs(keys)
    h = MinHasher(MinHashConfig(bands=6, rows=1), seed=0)  # the method uses the configured window
    assert np.array_equal(h.candidate_pairs(keys), pairs)
    per_band = np.concatenate([candidate_pairs(keys[:, [b]]) for b in range(6)])  # one task per band
    assert np.array_equal(np.unique(per_band, axis=0), pairs)
    assert candidate_pairs(rng.integers(0, 10**9, (50, 3)).astype(np.uint64)).shape == (0, 2)


def test_bucket_window_bounds_pairs_but_keeps_buckets_connected():
    keys = np.zeros((200, 2), dtype=np.uint64)  # one bucket of 200 identical documents per band
    keys[:, 1] = np.arange(200)
    limited = candidate_pairs(keys, window=5)
    assert len(limited) == sum(min(5, 199 - i) for i in range(200))  # each member with its next 5
    assert len(candidate_pairs(keys, window=None)) == 200 * 199 // 2
    assert len(candidate_pairs(keys)) == sum(min(mh.DEFAULT_WINDOW, 199 - i) for i in range(200))
    assert (clusters(200, limited) == 0).all()


# ----------------------------------------------------------------------------- clusters
def _components(n: int, pairs: list[tuple[int, int]]) -> list[int]:
    """Independent: breadth-first search, root = smallest member."""
    adj: dict[int, list[int]] = {i: [] for i in range(n)}
    for i, j in pairs:
        adj[i].append(j)
        adj[j].append(i)
    root = [-1] * n
    for s in range(n):
        if root[s] < 0:
            stack, comp = [s], []
            root[s] = s
            while stack:
                v = stack.pop()
                comp.append(v)
                for w in adj[v]:
                    if root[w] < 0:
                        root[w] = s
                        stack.append(w)
    return root


def test_union_find_roots_are_cluster_minima():
    rng = random.Random(4)
    n = 300
    pairs = [(rng.randrange(n), rng.randrange(n)) for _ in range(250)]
    expected = _components(n, pairs)
    uf = UnionFind(n)
    uf.union_pairs(np.array(pairs, dtype=np.int64))
    assert uf.roots().tolist() == expected
    scalar = UnionFind(n)
    for i, j in pairs:
        scalar.union(i, j)
    assert [scalar.find(i) for i in range(n)] == expected
    chain = UnionFind(1000)  # a long chain in reverse order: many hooking rounds
    chain.union_pairs(np.array([(i, i - 1) for i in range(999, 0, -1)]))
    assert (chain.roots() == 0).all()


def test_clusters_verify_removes_false_candidates():
    pairs = np.array([[0, 3], [3, 5], [1, 2], [2, 4]])
    assert clusters(6, pairs).tolist() == [0, 1, 1, 0, 1, 0]
    rejected = {(3, 5), (1, 2)}
    verify = lambda p: np.array([tuple(x) not in rejected for x in p.tolist()])  # noqa: E731
    assert clusters(6, pairs, verify).tolist() == [0, 1, 2, 0, 2, 5]
    assert clusters(4, np.empty((0, 2), dtype=np.int64)).tolist() == [0, 1, 2, 3]


def test_minhash_dedup_local_finds_near_duplicates_and_keeps_the_first():
    rng = random.Random(8)
    base = _words(rng, 400)
    near = list(base)
    for i in rng.sample(range(400), 4):  # 1% of words changed: J about 0.95
        near[i] = rng.choice(VOCAB)
    far = [rng.choice(VOCAB) if rng.random() < 0.3 else w for w in base]  # J about 0.2
    texts = [" ".join(_words(rng, 300)), " ".join(near), " ".join(far), " ".join(base),
             " ".join(base).upper() + "!", " ".join(_words(rng, 300))]
    assert _true_jaccard(texts[1], texts[3]) > 0.9 and _true_jaccard(texts[2], texts[3]) < 0.5
    roots = minhash_dedup_local(texts, CFG, seed=3)
    assert roots.tolist() == [0, 1, 2, 1, 1, 5]  # survivor: the smallest index of the cluster
    assert np.array_equal(minhash_dedup_local(texts, CFG, seed=3), roots)
    assert mh.cluster_sizes(roots).tolist() == [1, 3, 1, 3, 3, 1]
    # reversed order: the same clusters, the survivor is again the first in the new order
    rev = minhash_dedup_local(texts[::-1], CFG, seed=3)
    assert rev.tolist() == [0, 1, 1, 3, 1, 5]


def test_verification_rejects_candidates_below_the_threshold():
    rng = random.Random(9)
    base = _words(rng, 400)
    other = [rng.choice(VOCAB) if rng.random() < 0.05 else w for w in base]  # J about 0.6-0.7
    texts = [" ".join(base), " ".join(other)]
    j = _true_jaccard(*texts)
    assert 0.5 < j < 0.8
    loose = MinHashConfig(bands=50, rows=2)  # P_cand(0.6) > 0.9999: surely a candidate
    h = MinHasher(loose, seed=1)
    assert len(h.candidate_pairs(h.band_keys(h.signatures(texts)))) == 1
    assert minhash_dedup_local(texts, loose, seed=1).tolist() == [0, 1]
    assert minhash_dedup_local(texts, loose.model_copy(update={"threshold": 0.5}), seed=1).tolist() == [0, 0]


def test_candidate_probability_formula():
    assert candidate_probability(0.8, 25, 5) == pytest.approx(1 - (1 - 0.8**5) ** 25)
    assert candidate_probability(0.8, 25, 5) > 0.9999 and candidate_probability(0.3, 25, 5) < 0.06


def test_rejection_names_survivor_and_both_jaccards():
    r = mh.near_duplicate_rejection("abc", 0.84, 0.861, CFG)
    assert (r.step, r.rule, r.value) == ("minhash_dedup", "near_duplicate_of", "abc")
    assert "0.861" in r.reason and "0.840" in r.reason


def test_hasher_pickles_for_worker_processes():
    import pickle

    h = MinHasher(CFG, seed=2)
    texts = ["some words that make a few shingles here and there", "another short text of words"]
    clone = pickle.loads(pickle.dumps(h))
    assert np.array_equal(clone.signatures(texts), h.signatures(texts))
    assert np.array_equal(clone.band_keys(clone.signatures(texts)), h.band_keys(h.signatures(texts)))
