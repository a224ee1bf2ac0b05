"""A multiclass linear text classifier: softmax regression over linear_classifier's hashed features.

The classify step (data/steps/classify.py) learns topic or format classes from a file of labelled
texts the user brings (classifiers for topic, code and math; Llama 3's domain
buckets). The features are exactly linear_classifier.features (hashed word uni+bigrams,
sublinear counts, unit L2 norm); the model is one weight row per class, p = softmax(W x + b),
fit by mini-batch AdaGrad on the class-balanced cross-entropy (each class carries 1/K of the
loss whatever its count, so a rare class is not drowned) with a small L2 penalty. The batch order
comes from a seeded generator and every sum runs in a fixed order, so training is repeatable bit
for bit, and scoring one document is a fixed-order sum over its own features: the same on any
worker.

`evaluate` gives held-out accuracy, one-vs-rest ROC AUC per class (rank statistic, ties half)
and their macro mean, and the confusion matrix (rows: true label, columns: predicted).
`held_out` is the deterministic split: a text is held out when its xxh3 hash says so, so the
split does not depend on the order of the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import xxhash

from tokenmill.data.classifiers import linear_classifier as lc

VERSION = "1"

DIM_BITS = 18  # 256 k buckets per class: a K-class model is K x 1 MiB of float32
EPOCHS = 8
BATCH = 32
LEARNING_RATE = 0.5
L2 = 1e-6

Features = tuple[np.ndarray, np.ndarray]


def held_out(text: str, every: int) -> bool:
    """Whether a text belongs to the held-out share (about 1/every), decided by its content alone."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8")) % every == 0


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)  # no overflow: the largest logit becomes 0
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class MulticlassClassifier:
    """Weights [K, 2^dim_bits] and biases [K] over hashed features; labels name the rows."""

    labels: list[str]
    weights: np.ndarray  # float32 [K, 2^dim_bits]
    bias: np.ndarray  # float64 [K]
    dim_bits: int = DIM_BITS

    def proba_features(self, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
        """P(class) for one document's features; a fixed-order sum, so exact on any worker."""
        z = (self.weights[:, idx].astype(np.float64) * val.astype(np.float64)).sum(axis=1) + self.bias
        return _softmax(z)

    def predict_proba(self, tokens: Sequence[str]) -> np.ndarray:
        return self.proba_features(*lc.features(tokens, self.dim_bits))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "weights": self.weights,
            "bias": self.bias,
            "dim_bits": np.array(self.dim_bits, np.int64),
            "labels": np.array(self.labels, dtype=np.str_),  # a unicode array, not objects: no pickle
        }

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> "MulticlassClassifier":
        return cls([str(x) for x in a["labels"]], a["weights"], a["bias"].astype(np.float64), int(a["dim_bits"]))


def fit(
    examples: Sequence[Features],
    labels: Sequence[str],
    *,
    dim_bits: int = DIM_BITS,
    seed: int = 0,
    epochs: int = EPOCHS,
    batch: int = BATCH,
    lr: float = LEARNING_RATE,
    l2: float = L2,
) -> MulticlassClassifier:
    """Softmax regression of `examples` (linear_classifier.features each) on their labels."""
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise ValueError(f"a classifier needs two or more classes, got {classes}")
    y = np.array([classes.index(x) for x in labels], np.int64)
    n, k = len(y), len(classes)
    counts = np.bincount(y, minlength=k)
    weight = (n / (k * counts))[y]  # class-balanced: each class's examples share a total weight n/K
    onehot = np.eye(k)[y]
    data = lc._Csr.build(examples)
    w = np.zeros((k, 1 << dim_bits), np.float64)
    g2 = np.zeros_like(w)  # AdaGrad's running sums of squared gradients
    b, b2 = np.zeros(k), np.zeros(k)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch):
            sel = order[start : start + batch]
            row, col, val = data.rows(sel)
            z = np.stack([np.bincount(row, weights=w[c, col] * val, minlength=sel.size) for c in range(k)], axis=1) + b
            err = (_softmax(z) - onehot[sel]) * (weight[sel] / sel.size)[:, None]  # d loss / d z
            cols, inverse = np.unique(col, return_inverse=True)
            for c in range(k):
                grad = np.bincount(inverse, weights=err[row, c] * val, minlength=cols.size) + l2 * w[c, cols]
                g2[c, cols] += grad * grad
                w[c, cols] -= lr * grad / np.sqrt(g2[c, cols] + 1e-12)
            gb = err.sum(axis=0)
            b2 += gb * gb
            b -= lr * gb / np.sqrt(b2 + 1e-12)
    return MulticlassClassifier(classes, w.astype(np.float32), b, dim_bits)


def rank_auc(positive: np.ndarray, negative: np.ndarray) -> float | None:
    """P(a random positive scores above a random negative), ties half; None without both sides."""
    if not positive.size or not negative.size:
        return None
    allv = np.concatenate([positive, negative])
    order = np.argsort(allv, kind="stable")
    _, first, counts = np.unique(allv[order], return_index=True, return_counts=True)
    ranks = np.empty(allv.size)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)  # 1-based average rank per tie group
    return float((ranks[: positive.size].sum() - positive.size * (positive.size + 1) / 2) / (positive.size * negative.size))


def evaluate(model: MulticlassClassifier, examples: Sequence[Features], labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, one-vs-rest AUC per class and macro, confusion matrix (rows true, columns predicted).
    Labels the model does not know count as errors and get a confusion row of their own."""
    names = model.labels + sorted(set(labels) - set(model.labels))
    if not examples:
        return {"examples": 0, "accuracy": None, "auc": {}, "macro_auc": None, "labels": names, "confusion": []}
    probs = np.stack([model.proba_features(*x) for x in examples])
    truth = np.array([names.index(x) for x in labels])
    predicted = probs.argmax(axis=1)
    confusion = np.zeros((len(names), len(names)), np.int64)
    np.add.at(confusion, (truth, predicted), 1)
    auc = {name: rank_auc(probs[truth == c, c], probs[truth != c, c]) for c, name in enumerate(model.labels)}
    known = [v for v in auc.values() if v is not None]
    return {
        "examples": len(examples),
        "accuracy": float((predicted == truth).mean()),
        "auc": auc,
        "macro_auc": float(np.mean(known)) if known else None,
        "labels": names,
        "confusion": confusion.tolist(),
    }
