"""One bucket's endless token stream: its documents, reshuffled every epoch, end to end.

All train documents of a bucket (every shard, in store order) get a bucket-wide index. Epoch e
is a permutation of them drawn from `np.random.default_rng([seed, xxh64(bucket), e])` — a pure
function of (seed, bucket, epoch) — and the stream is epoch 0's documents concatenated (each
already closed by its EOS in the store), then epoch 1's, and so on. Packed rows are windows of
this stream; padded rows are its documents one by one. Both are found in O(log D) per document
touched from a stream position, so no per-run index is ever written.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import xxhash

from tokenmill.tokens.store import Shard

EPOCH_CACHE = 4  # permutations kept: a window touches at most two epochs, prefetch may run ahead


@dataclass(frozen=True)
class Piece:
    """A run of one document inside a window: doc tokens [start, end) at window offset row_start."""

    doc: int  # bucket-wide document index
    start: int
    end: int
    row_start: int
    epoch: int


class BucketStream:
    """Random access into one bucket's epoch-shuffled document stream."""

    def __init__(self, bucket: str, shards: list[Shard], seed: int):
        self.bucket = bucket
        self.shards = shards
        self._key = [int(seed) & 0xFFFF_FFFF_FFFF_FFFF, xxhash.xxh64_intdigest(bucket.encode())]
        n_docs = [s.n_docs for s in shards]
        self.doc_shard = np.repeat(np.arange(len(shards), dtype=np.int64), n_docs)
        self.doc_start = (np.concatenate([s.offsets[:-1] for s in shards]) if shards else np.zeros(0, np.int64)).astype(np.int64)
        self.doc_len = (np.concatenate([np.diff(s.offsets) for s in shards]) if shards else np.zeros(0, np.int64)).astype(
            np.int64
        )
        self.doc_base = np.concatenate([[0], np.cumsum(n_docs)]).astype(np.int64)  # shard -> first doc
        self.n_docs = int(self.doc_len.size)
        self.n_tokens = int(self.doc_len.sum())
        self._epochs: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ epochs
    def epoch(self, e: int) -> tuple[np.ndarray, np.ndarray]:
        """(permutation of doc indices, end offset of each permuted doc within the epoch)."""
        with self._lock:
            hit = self._epochs.get(e)
            if hit is not None:
                self._epochs.move_to_end(e)
                return hit
        perm = np.random.default_rng([*self._key, int(e)]).permutation(self.n_docs)
        ends = np.cumsum(self.doc_len[perm])
        with self._lock:
            self._epochs[e] = (perm, ends)
            while len(self._epochs) > EPOCH_CACHE:
                self._epochs.popitem(last=False)
        return perm, ends

    # ------------------------------------------------------------------ access
    def pieces(self, start: int, n: int) -> list[Piece]:
        """The document runs covering stream tokens [start, start + n)."""
        out: list[Piece] = []
        pos, filled = start, 0
        while filled < n:
            e, q = divmod(pos, self.n_tokens)
            perm, ends = self.epoch(e)
            k = int(np.searchsorted(ends, q, side="right"))  # skips zero-length docs
            doc = int(perm[k])
            off = q - (int(ends[k]) - int(self.doc_len[doc]))
            take = min(int(self.doc_len[doc]) - off, n - filled)
            out.append(Piece(doc, off, off + take, filled, e))
            filled += take
            pos += take
        return out

    def read(self, pieces: list[Piece], out: np.ndarray) -> None:
        """Copy the tokens of `pieces` into `out` at their row offsets."""
        for p in pieces:
            shard = self.shards[int(self.doc_shard[p.doc])]
            s = int(self.doc_start[p.doc])
            out[p.row_start : p.row_start + p.end - p.start] = shard.tokens[s + p.start : s + p.end]

    def check_ids(self, pieces: list[Piece]) -> None:
        """Refuse, naming the shard file and offset, the first id of `pieces` past the vocabulary."""
        for p in pieces:
            shard = self.shards[int(self.doc_shard[p.doc])]
            s = int(self.doc_start[p.doc]) + p.start
            shard.check_ids(np.asarray(shard.tokens[s : s + p.end - p.start]), s)

    def doc_at(self, k: int) -> tuple[int, int]:
        """(epoch, bucket-wide doc index) of the k-th document of the stream."""
        e, i = divmod(k, self.n_docs)
        return e, int(self.epoch(e)[0][i])

    def capped_tokens(self, k0: int, k1: int, cap: int) -> int:
        """Σ min(len, cap) over stream documents k0 .. k1-1 (the tokens padded rows keep)."""
        capped = np.minimum(self.doc_len, cap)
        full = int(capped.sum())
        total = 0
        k = k0
        while k < k1:
            e, i = divmod(k, self.n_docs)
            stop = min(k1 - e * self.n_docs, self.n_docs)
            if i == 0 and stop == self.n_docs:
                total += full
            else:
                total += int(capped[self.epoch(e)[0][i:stop]].sum())
            k += stop - i
        return total

    def capped_tokens_at(self, ks: np.ndarray, cap: int) -> int:
        """Σ min(len, cap) over the stream documents at positions `ks` (in any order)."""
        capped = np.minimum(self.doc_len, cap)
        epochs, idx = np.divmod(np.asarray(ks, dtype=np.int64), self.n_docs)
        return sum(int(capped[self.epoch(int(e))[0][idx[epochs == e]]].sum()) for e in np.unique(epochs))

    def locate(self, doc: int) -> tuple[int, int]:
        """Bucket-wide doc index -> (shard index, doc index inside the shard)."""
        si = int(self.doc_shard[doc])
        return si, doc - int(self.doc_base[si])
