"""Keep duplicates of training documents out of the held-out split.

A held-out document that is (nearly) the same text as a training document measures recall, not
generalization: validation bits-per-byte would reward memorization (seed 002 §2.5–2.7). Curation's
dedup steps usually removed such pairs already, but a user may run without them, and the split
may see data curated in several runs. So before tokenizing, every held-out candidate is checked
against the training documents of all buckets:

    exact     the same words (xxh3-128 of `minhash.normalized_words`, joined by one space)
    near      MinHash LSH candidates (the run's curate.minhash_dedup bands/rows/shingles),
              verified by exact shingle Jaccard >= its threshold

A held-out document that matches goes to training instead (its text is seen in training anyway)
and is recorded with its reason and the training document it matched.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import xxhash

from tokenmill.data.config import MinHashConfig
from tokenmill.data.dedup.minhash import MinHasher, jaccard, normalized_words


def exact_key(text: str) -> str:
    """Hash of the text's words (lowercased, punctuation dropped, any whitespace one separator)."""
    return xxhash.xxh3_128_hexdigest(b" ".join(normalized_words(text)))


def training_duplicates(texts: dict[str, str], held: Iterable[str], cfg: MinHashConfig, seed: int
                        ) -> dict[str, dict[str, str | float]]:
    """{held-out id: {"reason": "exact"|"near", "match": training id, "jaccard": J}} for every
    held-out document that duplicates a training document (texts maps id -> text, all splits)."""
    held = set(held)
    train_ids = [i for i in texts if i not in held]
    held_ids = sorted(i for i in texts if i in held)
    if not held_ids or not train_ids:
        return {}
    found: dict[str, dict[str, str | float]] = {}
    by_key = {exact_key(texts[i]): i for i in train_ids}
    for i in held_ids:
        match = by_key.get(exact_key(texts[i]))
        if match is not None:
            found[i] = {"reason": "exact", "match": match, "jaccard": 1.0}

    rest = [i for i in held_ids if i not in found]
    if not rest:
        return found
    hasher = MinHasher(cfg, seed)
    ids = train_ids + rest
    shingles = hasher.shingle_sets([texts[i] for i in ids])
    sigs = hasher.signatures_of(shingles)
    bands: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    n_train = len(train_ids)
    for row in range(n_train):
        for b in range(cfg.bands):
            bands[(b, sigs[row, b * cfg.rows:(b + 1) * cfg.rows].tobytes())].append(row)
    for k, i in enumerate(rest):
        row = n_train + k
        if len(shingles[row]) == 0:
            continue
        candidates: set[int] = set()
        for b in range(cfg.bands):
            candidates.update(bands.get((b, sigs[row, b * cfg.rows:(b + 1) * cfg.rows].tobytes()), ()))
        best, best_j = None, 0.0
        for c in sorted(candidates):
            j = jaccard(shingles[row], shingles[c])
            if j > best_j:
                best, best_j = c, j
        if best is not None and best_j >= cfg.threshold:
            found[i] = {"reason": "near", "match": train_ids[best], "jaccard": round(float(best_j), 4)}
    return found

