"""Collapse figures of a set of documents (token id arrays), measured against the real corpus.

Shumailov et al. 2024 observe that a model trained on its predecessor's samples first loses the
tails of the original distribution (rare events become rarer, then vanish), then narrows towards
a few modes. The figures here see both, on the same tokenizer's ids:

  distinct-n    distinct n-grams / all n-grams (Li et al. 2016), n = 1..4, counted inside
                documents (no n-gram spans two documents);
  vocab_used    how many different token ids occur;
  entropy_bits  entropy of the unigram distribution of the set, in bits;
  tail_mass     share of the set's tokens that fall in the real corpus's tail: the rarest token
                ids (ranked by their frequency in the real training tokens, ties by id) that
                together make up at most `tail` (default 10%) of the real tokens. Real text of
                the same kind scores about `tail`; a collapsing model scores less.

distinct-n and vocab_used grow with the size of the set, so sets are compared at one token
budget (`cap_tokens`), and the real reference is a set of windows of the same length as the
samples, cut from real training documents (`real_windows`).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tokenmill.tokens.store import TokenStore

NGRAM_SIZES = (1, 2, 3, 4)


def cap_tokens(docs: Sequence[np.ndarray], max_tokens: int) -> list[np.ndarray]:
    """The documents in order, up to max_tokens tokens in all (the last one cut)."""
    out, left = [], max_tokens
    for d in docs:
        if left <= 0:
            break
        out.append(np.asarray(d[:left], dtype=np.int64))
        left -= len(out[-1])
    return out


def distinct_n(docs: Sequence[np.ndarray], n: int) -> float:
    """Distinct n-grams / n-grams over the documents (0.0 when there is none)."""
    grams = [np.lib.stride_tricks.sliding_window_view(np.ascontiguousarray(d, dtype=np.int64), n) for d in docs if len(d) >= n]
    if not grams:
        return 0.0
    rows = np.ascontiguousarray(np.concatenate(grams))
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * n))).ravel()  # one opaque key per n-gram
    return len(np.unique(keys)) / len(keys)


def token_counts(docs: Sequence[np.ndarray], vocab_size: int) -> np.ndarray:
    """How often each token id occurs in the documents."""
    if not docs:
        return np.zeros(vocab_size, dtype=np.int64)
    return np.bincount(np.concatenate(docs).astype(np.int64), minlength=vocab_size)[:vocab_size]


def tail_ids(reference: np.ndarray, tail: float) -> np.ndarray:
    """Boolean mask of the rarest ids whose reference counts together make up at most `tail` of
    the reference tokens (ranked by count, then id)."""
    order = np.lexsort((np.arange(len(reference)), reference))  # rarest first, ties by id
    inside = np.cumsum(reference[order]) <= tail * reference.sum()
    mask = np.zeros(len(reference), dtype=bool)
    mask[order[inside]] = True
    return mask


def entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum() if counts.sum() else np.zeros(0)
    return float(-(p * np.log2(p)).sum())


def collapse_metrics(docs: Sequence[np.ndarray], vocab_size: int, tail: np.ndarray) -> dict[str, float]:
    """The figures of one set of documents; `tail` is `tail_ids` of the real corpus."""
    counts = token_counts(docs, vocab_size)
    total = int(counts.sum())
    return {
        "docs": len(docs),
        "tokens": total,
        "vocab_used": int((counts > 0).sum()),
        "entropy_bits": entropy_bits(counts),
        "tail_mass": float(counts[tail].sum() / total) if total else 0.0,
        **{f"distinct_{n}": distinct_n(docs, n) for n in NGRAM_SIZES},
    }


def real_counts(store: TokenStore, buckets: Sequence[str], skip: Sequence[int]) -> np.ndarray:
    """Token id counts of the real buckets' training split, without the `skip` ids (EOS)."""
    counts = np.zeros(store.vocab_size, dtype=np.int64)
    for b in buckets:
        for shard in store.shards(b, "train"):
            counts += token_counts([np.asarray(shard.tokens)], store.vocab_size)
    counts[list(skip)] = 0
    return counts


def real_windows(store: TokenStore, buckets: Sequence[str], lengths: Sequence[int], seed: int) -> list[np.ndarray]:
    """One window per length (shorter where a document is), at seeded random documents and offsets
    of the real buckets' training split; the closing EOS is never part of one."""
    docs = [(s, i) for b in buckets for s, i in store.docs(b, "train")]
    if not docs:
        return []
    rng = np.random.default_rng(seed)
    out = []
    for length in lengths:
        shard, i = docs[int(rng.integers(len(docs)))]
        body = shard.doc(i)[:-1]
        start = int(rng.integers(max(1, len(body) - length + 1)))
        out.append(np.asarray(body[start : start + length], dtype=np.int64))
    return out


def ratios(ours: dict[str, float], real: dict[str, float]) -> dict[str, float]:
    """ours / real per figure (nan where the real figure is 0)."""
    return {k: (ours[k] / real[k] if real[k] else math.nan) for k in ours if k not in ("docs", "tokens")}
