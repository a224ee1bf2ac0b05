"""Held-out split: which curated documents are kept out of training, tokenizer sample included.

The choice depends only on the run seed and the document id (never on order or on how many
workers read the data), so every stage that asks gets the same answer. Memorization canaries
(data.canaries) are never held out: they exist to be trained on, and leaving them out of the
candidates keeps every other document's split what it is without them.
"""

from __future__ import annotations

import xxhash

from tokenmill.data.canaries import is_canary_id


def split_score(doc_id: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, id)."""
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF) / 2.0**64


def heldout_ids(doc_ids: list[str], fraction: float, min_docs: int, seed: int) -> set[str]:
    """Documents whose score is below `fraction`; at least `min_docs` (the lowest scores),
    and never the whole bucket: one document always stays for training. Canaries are never chosen."""
    doc_ids = [d for d in doc_ids if not is_canary_id(d)]
    if len(doc_ids) < 2:
        return set()
    ranked = sorted(doc_ids, key=lambda d: (split_score(d, seed), d))
    n = sum(1 for d in ranked if split_score(d, seed) < fraction)
    n = min(max(n, min_docs), len(ranked) - 1)
    return set(ranked[:n])
