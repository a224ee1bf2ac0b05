"""The unigram baseline: a model that ignores context, fitted on the bucket's training tokens.

A language model worth its compute must beat it; its bits-per-byte is reported beside the
model's on the same held-out tokens.
"""

from __future__ import annotations

import numpy as np

from tokenmill.tokens.store import TokenStore


def unigram_logprobs(store: TokenStore, bucket: str, alpha: float = 1.0) -> np.ndarray:
    """Natural-log probabilities of every token id, add-alpha smoothed so none is -inf."""
    counts = np.zeros(store.vocab_size, dtype=np.float64)
    for shard in store.shards(bucket, "train"):
        counts += np.bincount(np.asarray(shard.tokens), minlength=store.vocab_size)[: store.vocab_size]
    probs = (counts + alpha) / (counts.sum() + alpha * store.vocab_size)
    return np.log(probs)


def unigram_nll(logprobs: np.ndarray, targets: np.ndarray) -> float:
    """Total negative log-likelihood (nats) of a token sequence under the unigram model."""
    return float(-logprobs[np.asarray(targets, dtype=np.int64)].sum())
