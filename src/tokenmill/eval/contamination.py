"""Contamination audit: how much of each eval set's token n-grams occurs in the training tokens.

For every eval set (its items already tokenized with the run's tokenizer) the audit counts the
item n-grams (every window of `n` consecutive tokens inside one item; items shorter than `n` give
none) and how many of them occur anywhere in the training split of the token store, all buckets.
A training n-gram lies inside one stored document (the document's closing EOS included); windows
that straddle two documents are not n-grams of either.

Cost: the eval side is small, so its n-grams are hashed into a sorted unique uint64 array once;
the training shards are then streamed (memmapped, in chunks) and each chunk's window hashes are
computed with a vectorized polynomial hash (`n` vector passes, no per-token Python loop) and
looked up in the eval array with searchsorted. Memory stays O(eval n-grams + chunk), whatever the
size of the store. Every hash hit is then confirmed token by token against the eval n-gram with
that hash, so a training window counts only when it is exactly equal: the result is exact up to
two *distinct eval* n-grams sharing a 64-bit hash (probability about E^2 / 2^65 for E unique eval
n-grams, ~3e-9 for a million of them), and never inflated by a training-side collision.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tokenmill.tokens.store import TokenStore

# Odd 64-bit multiplier (odd: invertible mod 2^64, so no information is shifted out).
_BASE = np.uint64(0x9E3779B97F4A7C15)
_CHUNK = 1 << 22  # training window starts per chunk


def ngram_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of every length-n window of `tokens` (len - n + 1 of them; empty when shorter).

    h(w) = sum_j (w[j] + 1) * B^(n-1-j) mod 2^64, computed over all windows at once with n
    vectorized multiply-adds (uint64 arithmetic wraps, which is the mod).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    a = np.asarray(tokens).astype(np.uint64) + np.uint64(1)
    count = a.size - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    h = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h *= _BASE
            h += a[j : j + count]
    return h


def ngram_hash(window: Iterable[int]) -> int:
    """The same hash for one window, computed directly with Python integers (reference)."""
    h = 0
    for t in window:
        h = (h * int(_BASE) + int(t) + 1) % (1 << 64)
    return h


def _eval_ngrams(items: list[list[int]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes of every item window in order, the windows' tokens [k, n])."""
    hashes, windows = [], []
    for item in items:
        arr = np.asarray(item, dtype=np.int64)
        if arr.size < n:
            continue
        hashes.append(ngram_hashes(arr, n))
        windows.append(np.lib.stride_tricks.sliding_window_view(arr, n))
    if not hashes:
        return np.zeros(0, dtype=np.uint64), np.zeros((0, n), dtype=np.int64)
    return np.concatenate(hashes), np.concatenate(windows)


def _training_hits(store: TokenStore, keys: np.ndarray, reps: np.ndarray, n: int, chunk: int = _CHUNK) -> np.ndarray:
    """Boolean mask over `keys` (sorted unique eval hashes): the eval n-gram with that hash occurs,
    token for token, in some training document."""
    found = np.zeros(keys.size, dtype=bool)
    if keys.size == 0:
        return found
    for bucket in store.buckets:
        for shard in store.shards(bucket, "train"):
            total = shard.n_tokens
            offsets = shard.offsets
            for start in range(0, max(total - n + 1, 0), chunk):
                stop = min(start + chunk, total - n + 1)  # window starts [start, stop)
                toks = np.asarray(shard.tokens[start : stop + n - 1])
                h = ngram_hashes(toks, n)
                pos = np.arange(start, stop, dtype=np.int64)
                # the window must end inside the document it starts in
                doc_end = offsets[np.searchsorted(offsets, pos, side="right")]
                k = np.searchsorted(keys, h)
                k[k == keys.size] = 0
                hit = (keys[k] == h) & (pos + n <= doc_end)
                if not hit.any():
                    continue
                rel = np.nonzero(hit)[0]
                cand = k[rel]
                new = ~found[cand]
                rel, cand = rel[new], cand[new]
                if rel.size == 0:
                    continue
                win = np.lib.stride_tricks.sliding_window_view(toks, n)[rel].astype(np.int64)
                exact = (win == reps[cand]).all(axis=1)
                found[cand[exact]] = True
    return found


def contamination(store: TokenStore, eval_sets: dict[str, list[list[int]]], n: int = 13) -> dict[str, dict]:
    """{set name: {"ngrams", "found", "share"}}: the eval set's n-gram windows (counted with
    multiplicity, over all items), how many occur in the training split, and found / ngrams
    (0.0 for a set with no n-grams)."""
    if n < 1:
        raise ValueError(f"contamination n must be >= 1, got {n}")
    per_set = {name: _eval_ngrams(items, n) for name, items in eval_sets.items()}
    all_h = [h for h, _ in per_set.values()]
    all_w = [w for _, w in per_set.values()]
    if all_h and sum(h.size for h in all_h):
        hashes = np.concatenate(all_h)
        windows = np.concatenate(all_w)
        keys, first = np.unique(hashes, return_index=True)
        reps = windows[first]
    else:
        keys, reps = np.zeros(0, dtype=np.uint64), np.zeros((0, n), dtype=np.int64)
    found = _training_hits(store, keys, reps, n)
    # an eval window counts when its hash was confirmed and it is the representative window
    # itself (a distinct eval n-gram with a colliding hash, ~2^-64, would be counted too)
    out: dict[str, dict] = {}
    for name, (h, _) in per_set.items():
        if h.size == 0:
            out[name] = {"ngrams": 0, "found": 0, "share": 0.0}
            continue
        hit = int(found[np.searchsorted(keys, h)].sum())
        out[name] = {"ngrams": int(h.size), "found": hit, "share": hit / h.size}
    return out


def flag(result: dict[str, dict], threshold: float) -> list[str]:
    """Names of the eval sets whose share of training n-grams is above `threshold`, sorted."""
    return sorted(name for name, r in result.items() if r["share"] > threshold)


def task_eval_sets(tasks: list, tokenizer: Any) -> dict[str, list[list[int]]]:
    """{task name: token ids of each scored item's solved text (context + correct continuation)},
    encoded without special tokens, the items `score_task` scores (the first `limit`)."""
    from tokenmill.eval.tasks import load_task

    out: dict[str, list[list[int]]] = {}
    for cfg in tasks:
        items = load_task(cfg)[: cfg.limit]
        out[cfg.name] = [tokenizer.encode(it.solved(), add_special_tokens=False).ids for it in items]
    return out
