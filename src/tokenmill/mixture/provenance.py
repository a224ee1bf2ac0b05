"""Batch lineage: where every token of a row came from, down to the curated document id.

A row is a list of document spans. A span names the bucket, the shard (prefix relative to
tokens/, e.g. "web/train-00000"), the document's index inside that shard, its curated id (read
from the shard's .docs.parquet), the token range [start, end) inside the document and the row
offset where it starts, so `shard.doc(doc)[start:end] == row[row_start:row_start + end - start]`.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass

from tokenmill.tokens.store import Shard


@dataclass(frozen=True)
class DocSpan:
    bucket: str
    shard: str  # shard prefix relative to tokens/
    doc: int  # document index inside the shard
    doc_id: str  # curated row id
    start: int  # first token of the span inside the document
    end: int  # one past the last token
    row_start: int  # offset of `start` in the row's T+1 tokens
    epoch: int  # which pass over the bucket this occurrence belongs to (0-based)


@dataclass(frozen=True)
class SampleSource:
    """One sequence of a global batch and the documents it holds."""

    step: int
    rank: int
    micro: int
    row: int
    phase: str
    bucket: str
    sample: int  # index of this sample among the bucket's samples in the phase
    spans: tuple[DocSpan, ...]

    def to_dict(self) -> dict:
        return asdict(self)


class DocIds:
    """Curated ids of shard documents, each shard's table read once on first use."""

    def __init__(self) -> None:
        self._ids: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def get(self, name: str, shard: Shard, doc: int) -> str:
        ids = self._ids.get(name)
        if ids is None:
            ids = shard.doc_table().column("id").to_pylist()
            with self._lock:
                self._ids[name] = ids
        return ids[doc]
