"""A fastText-style linear text classifier: hashed word uni+bigrams, logistic regression.

The quality classifiers of GPT-3 (Brown et al. 2020, appendix A), CCNet's follow-ups, Llama
(Touvron et al. 2023) and DCLM (Li et al. 2024) are linear models over hashed word n-grams
(fastText, Joulin et al. 2017) trained to tell a reference corpus (Wikipedia, books, curated
answers: label 1) from random crawl (label 0); their P(reference) ranks documents
(the GPT-3 and Llama quality classifiers). This module is that model, in numpy, trained from scratch: nothing is downloaded.

Features: the tokens (data.classifiers.ngram_lm.tokenize: lowercased words, punctuation, line breaks) and
their adjacent pairs are hashed (xxh3 per distinct word, a 64-bit mix for pairs) into 2^dim_bits
buckets; a document is its bucket vector of sublinear counts 1 + ln(tf), L2-normalised so long
and short documents weigh alike. The model is logistic regression, p = sigmoid(w.x + b), fit by
mini-batch AdaGrad on the class-balanced log loss (each class contributes half of the loss, so
P(reference) is calibrated for equal priors whatever the two sample sizes) with a small L2
penalty. The batch order comes from a seeded generator, and every sum runs in a fixed order
(`np.bincount`), so training is bit-for-bit repeatable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import xxhash

VERSION = "1"

DIM_BITS = 20  # 1 M buckets: few collisions among the ~10^5-10^6 distinct uni+bigrams of a corpus
EPOCHS = 6
BATCH = 32
LEARNING_RATE = 0.5
L2 = 1e-6

_MUL = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_S29 = np.uint64(29)


def _word_hashes(tokens: Sequence[str]) -> np.ndarray:
    """A stable 64-bit hash per token (xxh3; Python's hash() changes with every process)."""
    table = {t: xxhash.xxh3_64_intdigest(t.encode("utf-8")) for t in set(tokens)}
    return np.fromiter((table[t] for t in tokens), np.uint64, len(tokens))


def features(tokens: Sequence[str], dim_bits: int = DIM_BITS) -> tuple[np.ndarray, np.ndarray]:
    """(bucket indices, values) of a document: sublinear uni+bigram counts, unit L2 norm."""
    if not tokens:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    h = _word_hashes(tokens)
    pairs = h[:-1] * _MUL + (h[1:] ^ (h[1:] >> _S29)) * _M1  # order matters: "a b" != "b a"
    mask = np.uint64((1 << dim_bits) - 1)
    buckets = np.concatenate([h & mask, (pairs ^ (pairs >> _S29)) & mask]).astype(np.int64)
    idx, tf = np.unique(buckets, return_counts=True)
    val = 1.0 + np.log(tf)
    return idx, (val / np.sqrt((val * val).sum())).astype(np.float32)


@dataclass
class _Csr:
    """Many documents' sparse features in compressed-row form."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    @classmethod
    def build(cls, docs: Sequence[tuple[np.ndarray, np.ndarray]]) -> "_Csr":
        lengths = np.array([len(i) for i, _ in docs], np.int64)
        indptr = np.concatenate(([0], np.cumsum(lengths)))
        cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.empty(0, dt)  # noqa: E731
        return cls(indptr, cat([i for i, _ in docs], np.int64), cat([v for _, v in docs], np.float64))

    def rows(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row number within sel, bucket, value) of every entry of the selected rows."""
        starts, ends = self.indptr[sel], self.indptr[sel + 1]
        lengths = ends - starts
        row = np.repeat(np.arange(sel.size), lengths)
        offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        at = np.repeat(starts, lengths) + offsets
        return row, self.indices[at], self.values[at]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow warning for large |z|


@dataclass
class LinearClassifier:
    """Weights over hashed features; `score` is P(label 1) for a token list."""

    weights: np.ndarray  # float32 [2^dim_bits]
    bias: float
    dim_bits: int = DIM_BITS

    def score_features(self, idx: np.ndarray, val: np.ndarray) -> float:
        z = float(np.dot(self.weights[idx].astype(np.float64), val)) + self.bias
        return float(_sigmoid(np.array(z)))

    def score(self, tokens: Sequence[str]) -> float:
        return self.score_features(*features(tokens, self.dim_bits))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"weights": self.weights, "bias": np.array(self.bias, np.float64), "dim_bits": np.array(self.dim_bits, np.int64)}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray] | np.lib.npyio.NpzFile) -> "LinearClassifier":
        return cls(a["weights"], float(a["bias"]), int(a["dim_bits"]))


def fit(
    positives: Sequence[tuple[np.ndarray, np.ndarray]],
    negatives: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    dim_bits: int = DIM_BITS,
    seed: int = 0,
    epochs: int = EPOCHS,
    batch: int = BATCH,
    lr: float = LEARNING_RATE,
    l2: float = L2,
) -> LinearClassifier:
    """Logistic regression of positives (label 1) against negatives (label 0), `features` each."""
    if not positives or not negatives:
        raise ValueError(f"a classifier needs both classes: {len(positives)} positive, {len(negatives)} negative examples")
    data = _Csr.build([*positives, *negatives])
    n_pos, n = len(positives), len(positives) + len(negatives)
    y = np.r_[np.ones(n_pos), np.zeros(n - n_pos)]
    # Class-balanced loss: each class's examples share a total weight of n/2.
    weight = np.where(y == 1, n / (2 * n_pos), n / (2 * (n - n_pos)))
    w = np.zeros(1 << dim_bits, np.float64)
    g2 = np.zeros_like(w)  # AdaGrad's running sum of squared gradients, per bucket
    b, b2 = 0.0, 0.0
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch):
            sel = order[start : start + batch]
            row, col, val = data.rows(sel)
            z = np.bincount(row, weights=w[col] * val, minlength=sel.size) + b
            err = (_sigmoid(z) - y[sel]) * weight[sel] / sel.size  # d loss / d z, per example
            cols, inverse = np.unique(col, return_inverse=True)
            grad = np.bincount(inverse, weights=err[row] * val, minlength=cols.size) + l2 * w[cols]
            g2[cols] += grad * grad
            w[cols] -= lr * grad / np.sqrt(g2[cols] + 1e-12)
            gb = float(err.sum())
            b2 += gb * gb
            b -= lr * gb / np.sqrt(b2 + 1e-12)
    return LinearClassifier(w.astype(np.float32), b, dim_bits)


def evaluate(
    model: LinearClassifier,
    positives: Sequence[tuple[np.ndarray, np.ndarray]],
    negatives: Sequence[tuple[np.ndarray, np.ndarray]],
) -> dict[str, float]:
    """Balanced accuracy at 0.5 and ROC AUC (rank statistic) on held-out examples."""
    sp = np.array([model.score_features(*x) for x in positives])
    sn = np.array([model.score_features(*x) for x in negatives])
    if not sp.size or not sn.size:
        return {"balanced_accuracy": float("nan"), "auc": float("nan")}
    # AUC = P(score of a random positive > that of a random negative), ties counted half.
    allv = np.concatenate([sp, sn])
    ranks = np.empty(allv.size)
    order = np.argsort(allv, kind="stable")
    sorted_v = allv[order]
    _, first, counts = np.unique(sorted_v, return_index=True, return_counts=True)
    avg_rank = first + (counts + 1) / 2.0  # 1-based average rank of each tie group
    ranks[order] = np.repeat(avg_rank, counts)
    auc = (ranks[: sp.size].sum() - sp.size * (sp.size + 1) / 2) / (sp.size * sn.size)
    acc = 0.5 * ((sp >= 0.5).mean() + (sn < 0.5).mean())
    return {"balanced_accuracy": float(acc), "auc": float(auc)}
