"""Document ids: the user's own id where it names one document, else the stable hash.

A JSONL / Parquet record's `id` field (a string or an integer, as text) becomes the document id
of its row when it is usable and no other record of the run carries the same id; otherwise
the row keeps the hash of source and locator (document.doc_id), as every other record does.
Either way the record's `id` stays in `metadata.id`, and a row whose id is the user's names
its hash in `lineage` as the step `hash_id` (its "version" is the hash).

- usable: 1 to MAX_ID_CHARS characters, encodable as UTF-8 (JSON can carry lone surrogates),
  no control characters (they would break a log line or a table cell), and not starting with
  `canary-` (the prefix of memorization canaries, data/canaries.py);
- unique in the run: an id that two records carry, in one source or in two sources, names
  neither: ALL its records keep their hash ids (joining back by it would be ambiguous), and
  the funnel counts them per source (`ids.shared`). Nothing is quarantined for an id.

Uniqueness is decided before any document is processed, by one read of the sources whose
formats carry ids (`Reader.carries_ids`), shard by shard in parallel (`collect_shard`); only
64-bit hashes of the ids are kept (8 bytes an id). The decision is a shuffle: each shard's
(hash, source) pairs are partitioned by hash, one task per partition finds the ids carried more
than once (`merge`, on that partition alone) and saves them sorted; the map tasks look ids up
in those memory-mapped partitions (`IdRule`). No process holds every id, and a resumed run, any
worker count and any chunking give every record the same id.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Iterable

import numpy as np
import xxhash

from tokenmill import json_limits
from tokenmill.data.canaries import ID_PREFIX as CANARY_PREFIX
from tokenmill.data.dedup.shuffle import PartitionedSet
from tokenmill.data.document import RawRecord

MAX_ID_CHARS = 256
STEP = "hash_id"  # the lineage entry of a row whose id is the user's: (STEP, its hash id)
SHARED_DIR = "shared"  # one sorted .npy of shared id hashes per partition
PLAN_FILE = "plan.json"  # the partition count of the ids shuffle


def id_problem(record_id: str) -> str | None:
    """Why a record's own id cannot be a document id, or None."""
    if not record_id or len(record_id) > MAX_ID_CHARS:
        return f"{len(record_id)} characters (1 to {MAX_ID_CHARS} can be an id)"
    try:
        record_id.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate"
    if any(unicodedata.category(c) == "Cc" for c in record_id):
        return "holds a control character"
    if record_id.startswith(CANARY_PREFIX):
        return f"starts with {CANARY_PREFIX!r}, the prefix of canary ids"
    return None


def id_hash(record_id: str) -> int:
    return xxhash.xxh3_64_intdigest(record_id.encode("utf-8"))


def collect_shard(records: Iterable[RawRecord]) -> tuple[np.ndarray, int]:
    """(hashes of the usable ids, in record order; how many ids were not usable) of one shard."""
    hashes, unusable = [], 0
    for record in records:
        if record.record_id is None:
            continue
        if id_problem(record.record_id) is None:
            hashes.append(id_hash(record.record_id))
        else:
            unusable += 1
    return np.array(hashes, dtype=np.uint64), unusable


def merge(per_source: dict[int, list[np.ndarray]]) -> tuple[np.ndarray, dict[str, int]]:
    """(sorted hashes of the ids more than one record carries; counts): `within` ids repeated
    inside one source, `across` ids that two or more sources use."""
    uniques, within = [], []
    for arrays in per_source.values():
        values, counts = np.unique(np.concatenate(arrays) if arrays else np.zeros(0, np.uint64), return_counts=True)
        uniques.append(values)
        within.append(values[counts > 1])
    values, n_sources = np.unique(np.concatenate(uniques) if uniques else np.zeros(0, np.uint64), return_counts=True)
    across = values[n_sources > 1]
    shared = np.union1d(np.concatenate(within) if within else np.zeros(0, np.uint64), across).astype(np.uint64)
    return shared, {"ids": int(values.size), "within": int(sum(w.size for w in within)), "across": int(across.size)}


def merge_partition(hashes: np.ndarray, sources: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """`merge` over one hash partition given as aligned (hash, source index) arrays."""
    per_source: dict[int, list[np.ndarray]] = {}
    for src in np.unique(sources).tolist():
        per_source[int(src)] = [hashes[sources == src]]
    return merge(per_source)


class IdRule:
    """Decides each record's document id from the shared-id set `merge` found (a sorted array,
    or the partitioned set the shuffle wrote)."""

    def __init__(self, shared: "np.ndarray | PartitionedSet"):
        self.shared = (
            shared if isinstance(shared, PartitionedSet) else PartitionedSet([np.sort(np.asarray(shared, dtype=np.uint64))])
        )

    @classmethod
    def load(cls, directory: Path) -> "IdRule":
        plan = directory / PLAN_FILE
        if not plan.exists():
            return cls(np.zeros(0, np.uint64))
        return cls(PartitionedSet.load(directory / SHARED_DIR, int(json_limits.load_file(plan)["partitions"])))

    def is_shared(self, record_id: str) -> bool:
        if not len(self.shared):  # the usual case: every id names one record
            return False
        return bool(self.shared.contains(np.array([id_hash(record_id)], dtype=np.uint64))[0])

    def decide(self, record: RawRecord) -> tuple[str, str | None]:
        """(document id, why the record's own id was not taken: None, "shared" or "unusable";
        None also when the record has no id of its own)."""
        rid = record.record_id
        if rid is None:
            return record.id, None
        if id_problem(rid) is not None:
            return record.id, "unusable"
        if self.is_shared(rid):
            return record.id, "shared"
        return rid, None
