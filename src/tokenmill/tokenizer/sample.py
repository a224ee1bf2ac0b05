"""The tokenizer's training sample, stratified by bucket: a byte budget per bucket, a seeded
random choice of whole documents inside each bucket.

A bucket's budget comes from `tokenizer.bucket_bytes` when set, else from `sample_bytes` in
proportion to the bucket's training bytes. The choice depends only on the seed, the bucket name
and the document sizes in curated order, so a rerun trains on the same text.
"""

from __future__ import annotations

import numpy as np
import xxhash

from tokenmill.tokenizer.config import TokenizerConfig
from tokenmill.errors import UserError


class SampleConfigError(UserError, ValueError):
    """`tokenizer.bucket_bytes` names a bucket the curated data does not have."""


def bucket_budgets(train_bytes: dict[str, int], cfg: TokenizerConfig) -> dict[str, int]:
    """Bytes to sample from each bucket, never more than the bucket has."""
    if cfg.bucket_bytes is not None:
        unknown = sorted(set(cfg.bucket_bytes) - set(train_bytes))
        if unknown:
            raise SampleConfigError(f"tokenizer.bucket_bytes: unknown bucket(s) {unknown}; "
                                    f"curated buckets are {sorted(train_bytes)}")
        return {b: min(max(cfg.bucket_bytes.get(b, 0), 0), n) for b, n in train_bytes.items()}
    total = sum(train_bytes.values())
    if total <= cfg.sample_bytes:
        return dict(train_bytes)
    return {b: n * cfg.sample_bytes // total for b, n in train_bytes.items()}


def select_documents(sizes: np.ndarray, budget: int, seed: int, bucket: str) -> np.ndarray:
    """Boolean mask over a bucket's documents: a seeded random subset of at most `budget` bytes.

    Documents are visited in a random order and taken while they fit, so one large document
    early in the order does not end the sample far below its budget.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    keep = np.zeros(sizes.size, dtype=bool)
    if sizes.sum() <= budget:
        keep[:] = True
        return keep
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x70C, xxhash.xxh32_intdigest(bucket.encode("utf-8"))])
    left = int(budget)
    smallest = int(sizes.min()) if sizes.size else 0
    for i in rng.permutation(sizes.size):
        if left < smallest:
            break
        if sizes[i] <= left:
            keep[i] = True
            left -= int(sizes[i])
    return keep
