"""A corpus-wide top-k% cut on the quality classifier's score (DCLM keeps the top 10%), exact,
deterministic and the same for any number of workers, with memory bounded per task.

Every scored document gets a 128-bit key: its score as an order-preserving 64-bit integer, then
xxh64 of its id (so equal scores are ordered too, by something every worker computes alike).
The k = ceil(p/100 · N) largest keys are kept. The threshold — the k-th largest key — is found
by radix selection over 16-bit digits: a pass counts, over every shard, the keys that share the
digits chosen so far, by their next digit (65,536 counters per task, summed by the coordinator);
the digit where the running count from the top reaches k is chosen. Most corpora need two or
three passes; eight always suffice. Nobody ever holds the scores of the corpus, and the answer
equals sorting every key (tested).
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import xxhash

DIGIT_BITS = 16
DIGITS = 65536
LEVELS = 8  # 128 bits / 16
_SIGN = np.uint64(1 << 63)


def score_keys(scores: np.ndarray) -> np.ndarray:
    """float64 scores as uint64 that sort like the floats (IEEE 754: flip the sign bit of
    non-negative numbers, every bit of negative ones)."""
    bits = np.ascontiguousarray(scores, dtype=np.float64).view(np.uint64)
    negative = (bits & _SIGN) != 0
    return np.where(negative, ~bits, bits | _SIGN)


def id_keys(ids: Iterable[str]) -> np.ndarray:
    return np.fromiter((xxhash.xxh64_intdigest(i.encode("utf-8")) for i in ids), dtype=np.uint64)


def digit(hi: np.ndarray, lo: np.ndarray, level: int) -> np.ndarray:
    """The level-th 16-bit digit of the 128-bit keys (hi, lo), most significant first."""
    word = hi if level < LEVELS // 2 else lo
    shift = np.uint64(48 - DIGIT_BITS * (level % (LEVELS // 2)))
    return ((word >> shift) & np.uint64(DIGITS - 1)).astype(np.int64)


def with_prefix(hi: np.ndarray, lo: np.ndarray, prefix: list[int]) -> np.ndarray:
    """Which keys start with the chosen digits."""
    mask = np.ones(len(hi), dtype=bool)
    for level, d in enumerate(prefix):
        mask &= digit(hi, lo, level) == d
    return mask


def histogram(hi: np.ndarray, lo: np.ndarray, prefix: list[int]) -> np.ndarray:
    """Counts of the next digit among keys with `prefix` (one pass's work on one part)."""
    mask = with_prefix(hi, lo, prefix)
    return np.bincount(digit(hi[mask], lo[mask], len(prefix)), minlength=DIGITS).astype(np.int64)


def choose_digit(counts: np.ndarray, need: int) -> tuple[int, int]:
    """(digit, still needed inside it): walking down from the largest digit, where the running
    count reaches `need`."""
    above = np.cumsum(counts[::-1])  # above[j]: keys with digit >= DIGITS-1-j
    j = int(np.searchsorted(above, need))
    d = DIGITS - 1 - j
    return d, need - (int(above[j - 1]) if j else 0)


def threshold(prefix: list[int]) -> tuple[int, int]:
    """The smallest key with `prefix` (padded with zero digits) as (hi, lo)."""
    digits = prefix + [0] * (LEVELS - len(prefix))
    hi = lo = 0
    for level, d in enumerate(digits):
        if level < LEVELS // 2:
            hi = (hi << DIGIT_BITS) | d
        else:
            lo = (lo << DIGIT_BITS) | d
    return hi, lo


def keep_count(n: int, percent: float) -> int:
    """How many of n scored documents the top `percent`% keeps (at least one of a non-empty set)."""
    return min(n, max(1 if n else 0, math.ceil(n * percent / 100 - 1e-9)))


def kept(hi: np.ndarray, lo: np.ndarray, cut: tuple[int, int] | None) -> np.ndarray:
    """Keys at or above the threshold (None: nothing was scored, all kept)."""
    if cut is None:
        return np.ones(len(hi), dtype=bool)
    t_hi, t_lo = np.uint64(cut[0]), np.uint64(cut[1])
    return (hi > t_hi) | ((hi == t_hi) & (lo >= t_lo))


def select(pass_counts, n: int, percent: float) -> tuple[tuple[int, int] | None, int, int]:
    """The threshold of the top `percent`% of n keys, by radix passes. `pass_counts(prefix)`
    returns the summed histogram of every part for that prefix. Returns (threshold, k, passes)."""
    k = keep_count(n, percent)
    if k == 0:
        return None, 0, 0
    prefix: list[int] = []
    need = k
    for level in range(LEVELS):
        counts = pass_counts(prefix)
        d, need = choose_digit(counts, need)
        prefix.append(d)
        if need == counts[d]:  # every key with this prefix is kept: the threshold is its smallest
            return threshold(prefix), k, level + 1
    return threshold(prefix), k, LEVELS
