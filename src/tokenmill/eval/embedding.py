"""A sentence embedder that tokenmill trains on the user's own text: no model hub, no download.

Word vectors are the truncated SVD of the positive pointwise mutual information matrix of word
co-occurrences (Levy & Goldberg 2014, with their context-distribution smoothing α = 0.75 and the
symmetric U·√Σ vectors; Levy, Goldberg & Dagan 2015 show it on par with word2vec at this scale).
A text is the SIF embedding of its words (Arora, Liang & Ma 2017, "A Simple but Tough-to-Beat
Baseline for Sentence Embeddings"): the average of the word vectors weighted by a / (a + p(w)),
so frequent words count little, minus the projection on the first principal component of a
reference set of texts (what all texts share). Cosine similarity of two such embeddings is high
for texts about the same things in other words: a paraphrase, unlike a 13-gram, still matches.

The model is two arrays and a vocabulary, saved with safetensors and JSON (nothing executable).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds
from safetensors.numpy import load_file, save_file

from tokenmill import json_limits

WORD = re.compile(r"\w+", re.UNICODE)
SIF_A = 1e-3  # Arora et al.'s a: weights fall off for words more frequent than ~1 in 1000


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscore; any script)."""
    return WORD.findall(text.lower())


def _vocabulary(texts: list[list[str]], min_count: int, max_vocab: int) -> tuple[list[str], np.ndarray]:
    counts = Counter(w for t in texts for w in t)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))[:max_vocab]
    return kept, np.asarray([counts[w] for w in kept], dtype=np.float64)


def _cooccurrence(ids: list[np.ndarray], vocab: int, window: int) -> sp.csr_matrix:
    """Symmetric counts of word pairs at most `window` apart within one text, weighted 1/distance
    (ids of -1, words outside the vocabulary, hold their place but pair with nothing)."""
    mat = sp.csr_matrix((vocab, vocab), dtype=np.float64)
    if not ids:
        return mat
    seq = np.concatenate(ids)
    doc = np.repeat(np.arange(len(ids)), [len(a) for a in ids])
    for d in range(1, window + 1):
        ok = (seq[:-d] >= 0) & (seq[d:] >= 0) & (doc[:-d] == doc[d:])
        a, b = seq[:-d][ok], seq[d:][ok]
        if a.size == 0:
            continue
        part = sp.coo_matrix((np.full(a.size, 1.0 / d), (a, b)), shape=(vocab, vocab)).tocsr()
        mat = mat + part + part.T
    return mat


def _ppmi(counts: sp.csr_matrix, alpha: float = 0.75) -> sp.csr_matrix:
    total = counts.sum()
    row = np.asarray(counts.sum(axis=1)).ravel()
    ctx = np.asarray(counts.sum(axis=0)).ravel() ** alpha
    ctx /= ctx.sum()
    coo = counts.tocoo()
    pmi = np.log(coo.data * 1.0 / (row[coo.row] / total * ctx[coo.col] * total))
    keep = pmi > 0
    return sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=counts.shape)


@dataclass
class Embedder:
    """Word vectors (unit rows), the words' corpus probabilities, and the SIF common component."""

    vocab: list[str]
    vectors: np.ndarray  # [V, dim] float32
    prob: np.ndarray  # [V] float64, unigram probability in the training text
    common: np.ndarray | None = None  # [dim] unit vector removed from every embedding

    def __post_init__(self) -> None:
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.weight = SIF_A / (SIF_A + self.prob)

    @classmethod
    def train(
        cls, texts: Iterable[str], dim: int = 128, window: int = 5, min_count: int = 3, max_vocab: int = 30_000, seed: int = 0
    ) -> "Embedder":
        tokenized = [words(t) for t in texts]
        vocab, counts = _vocabulary(tokenized, min_count, max_vocab)
        if len(vocab) <= dim:
            raise ValueError(
                f"{len(vocab)} words seen at least {min_count} times: too few for {dim}-dimensional "
                "vectors; give more text or lower dim / min_count"
            )
        index = {w: i for i, w in enumerate(vocab)}
        ids = [np.asarray([index.get(w, -1) for w in t], dtype=np.int64) for t in tokenized]
        ppmi = _ppmi(_cooccurrence(ids, len(vocab), window))
        rng = np.random.default_rng(seed)  # ARPACK's start vector: seeded, so training is deterministic
        u, s, _ = svds(ppmi, k=dim, v0=rng.standard_normal(len(vocab)))
        vec = u * np.sqrt(s)
        norms = np.linalg.norm(vec, axis=1, keepdims=True)
        vec = (vec / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        # svds returns singular values in no guaranteed order and vectors up to sign: fix both
        order = np.argsort(-s)
        vec = vec[:, order]
        vec *= np.sign(vec[np.abs(vec).argmax(axis=0), np.arange(dim)])
        return cls(vocab, np.ascontiguousarray(vec), counts / counts.sum())

    def bag(self, texts: list[str]) -> np.ndarray:
        """SIF-weighted average of each text's word vectors, before the common component is removed."""
        rows, cols, vals = [], [], []
        for r, t in enumerate(texts):
            ids = [self.index[w] for w in words(t) if w in self.index]
            if ids:
                rows += [r] * len(ids)
                cols += ids
                vals += list(self.weight[ids] / len(ids))
        m = sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(self.vocab)), dtype=np.float64)
        return np.asarray(m @ self.vectors.astype(np.float64))

    def fit_common(self, texts: list[str]) -> None:
        """The first principal component of the reference texts' bags (Arora et al.'s u)."""
        bags = self.bag(texts)
        bags = bags[np.linalg.norm(bags, axis=1) > 0]
        _, _, vt = np.linalg.svd(bags, full_matrices=False)
        self.common = vt[0] * np.sign(vt[0][np.abs(vt[0]).argmax()])

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length SIF embeddings [n, dim]; a text with no known word is the zero vector."""
        e = self.bag(texts)
        if self.common is not None:
            e -= np.outer(e @ self.common, self.common)
        norms = np.linalg.norm(e, axis=1, keepdims=True)
        return (e / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        # safetensors writes an array's memory as it lies: C order, whatever numpy's view says
        arrays = {"vectors": np.ascontiguousarray(self.vectors), "prob": np.ascontiguousarray(self.prob)}
        if self.common is not None:
            arrays["common"] = np.ascontiguousarray(self.common)
        save_file(arrays, str(path / "embedder.safetensors"))
        (path / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> "Embedder":
        arrays = load_file(str(path / "embedder.safetensors"))
        return cls(json_limits.load_file((path / "vocab.json")), arrays["vectors"], arrays["prob"], arrays.get("common"))
