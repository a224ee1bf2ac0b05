"""The first training sampler: stateless random windows, nanoGPT style (kept for callers that
have not moved to `Loader`; new code uses `tokenmill.mixture.loader.Loader`).

Every micro-batch is a pure function of (seed, step, micro): its generator is
`np.random.default_rng([seed, step, micro])`. For each row it picks a bucket by the mixture
weights, then a window of seq_len+1 tokens uniformly among all windows that fit inside one of
that bucket's train shards (documents follow each other in a shard, EOS closing each one).
So the data cursor of the training state is just the next (step, micro) — resuming at a step
reproduces the uninterrupted run's batches exactly, whatever happened before.

Every row maps back to its source: `batch_provenance(step, micro)` gives (bucket, shard,
start) for each row, and `window_source(step, micro, row, t)` resolves a single position to
(bucket, shard, document index, offset in document, curated document id) through `Shard.locate`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tokenmill.mixture.errors import MixtureError
from tokenmill.tokens.store import Shard, TokenStore


@dataclass(frozen=True)
class WindowSource:
    bucket: str
    shard: str  # shard prefix relative to tokens/, e.g. "web/train-00000"
    doc: int  # document index inside the shard
    offset: int  # token offset inside the document
    doc_id: str  # the curated row id of the document (from the shard's .docs.parquet)


class BatchSampler:
    """`batch(step, micro) -> LongTensor[micro_batch, seq_len + 1]`, stateless and exact on resume."""

    def __init__(
        self,
        store: TokenStore,
        weights: dict[str, float] | None,
        seq_len: int,
        micro_batch: int,
        seed: int,
        split: str = "train",
    ):
        if seq_len < 1 or micro_batch < 1:
            raise MixtureError(f"seq_len ({seq_len}) and micro_batch ({micro_batch}) must be >= 1")
        self.store = store
        self.seq_len = seq_len
        self.micro_batch = micro_batch
        self.seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF  # default_rng wants non-negative entropy
        self.split = split
        window = seq_len + 1

        # Windows per shard: a shard of n tokens holds n - window + 1 starting positions.
        self._shards: dict[str, list[Shard]] = {}
        self._cum_windows: dict[str, np.ndarray] = {}
        for b in store.buckets:
            shards = store.shards(b, split)
            counts = np.array([max(0, s.n_tokens - window + 1) for s in shards], dtype=np.int64)
            self._shards[b] = shards
            self._cum_windows[b] = np.cumsum(counts)

        self.buckets, self.probs = self._resolve_weights(weights)
        self._doc_ids: dict[str, list[str]] = {}  # shard name -> document ids, read on first use

    def _n_windows(self, bucket: str) -> int:
        cum = self._cum_windows.get(bucket)
        return int(cum[-1]) if cum is not None and cum.size else 0

    def _resolve_weights(self, weights: dict[str, float] | None) -> tuple[list[str], np.ndarray]:
        known = self.store.buckets
        window = self.seq_len + 1
        if weights is None:
            raw = {b: float(self.store.n_tokens(b, self.split)) for b in known if self._n_windows(b) > 0}
            if not raw:
                raise MixtureError(
                    f"{self.store.root}: no {self.split} shard of any bucket ({', '.join(known) or 'none'}) "
                    f"holds a window of seq_len+1={window} tokens; use a shorter train.seq_len or more data")
        else:
            unknown = sorted(set(weights) - set(known))
            if unknown:
                raise MixtureError(
                    f"mixture.weights names bucket(s) {unknown} that are not in the token store "
                    f"{self.store.root} (buckets: {known})")
            bad = {b: w for b, w in weights.items() if not (np.isfinite(w) and w >= 0)}
            if bad:
                raise MixtureError(f"mixture.weights must be finite and >= 0, got {bad}")
            raw = {b: float(w) for b, w in weights.items() if w > 0}
            if not raw:
                raise MixtureError("mixture.weights: every weight is 0; give at least one bucket a positive weight")
            empty = sorted(b for b in raw if self._n_windows(b) == 0)
            if empty:
                raise MixtureError(
                    f"mixture.weights gives weight to bucket(s) {empty} whose {self.split} shards hold no "
                    f"window of seq_len+1={window} tokens")
        buckets = sorted(raw)
        p = np.array([raw[b] for b in buckets], dtype=np.float64)
        return buckets, p / p.sum()

    @property
    def weights(self) -> dict[str, float]:
        """The normalised sampling probability of each bucket actually drawn from."""
        return {b: float(p) for b, p in zip(self.buckets, self.probs)}

    # ----------------------------------------------------------------- drawing
    def _draw(self, step: int, micro: int) -> list[tuple[str, int, int]]:
        """(bucket, shard index, start) for every row of micro-batch (step, micro)."""
        if step < 0 or micro < 0:
            raise ValueError(f"step ({step}) and micro ({micro}) must be >= 0")
        rng = np.random.default_rng([self.seed, int(step), int(micro)])
        which = rng.choice(len(self.buckets), size=self.micro_batch, p=self.probs)
        rows = []
        for k in which:
            b = self.buckets[int(k)]
            cum = self._cum_windows[b]
            w = int(rng.integers(0, int(cum[-1])))
            si = int(np.searchsorted(cum, w, side="right"))
            start = w - (int(cum[si - 1]) if si else 0)
            rows.append((b, si, start))
        return rows

    def batch(self, step: int, micro: int) -> torch.Tensor:
        """LongTensor[micro_batch, seq_len + 1] of token ids for micro-batch `micro` of step `step`."""
        n = self.seq_len + 1
        out = np.empty((self.micro_batch, n), dtype=np.int64)
        for r, (b, si, start) in enumerate(self._draw(step, micro)):
            out[r] = self._shards[b][si].tokens[start:start + n]
        return torch.from_numpy(out)

    def _shard_name(self, shard: Shard) -> str:
        return shard.prefix.relative_to(self.store.root).as_posix()

    def batch_provenance(self, step: int, micro: int) -> list[tuple[str, str, int]]:
        """[(bucket, shard prefix relative to tokens/, start position in the shard)] per row."""
        return [(b, self._shard_name(self._shards[b][si]), start) for b, si, start in self._draw(step, micro)]

    def window_source(self, step: int, micro: int, row: int, position: int) -> WindowSource:
        """Where token `position` (0..seq_len) of row `row` of batch (step, micro) came from."""
        if not 0 <= position <= self.seq_len:
            raise IndexError(f"position {position} outside a window of {self.seq_len + 1} tokens")
        b, si, start = self._draw(step, micro)[row]
        shard = self._shards[b][si]
        doc, offset = shard.locate(start + position)
        name = self._shard_name(shard)
        if name not in self._doc_ids:
            self._doc_ids[name] = shard.doc_table().column("id").to_pylist()
        return WindowSource(bucket=b, shard=name, doc=doc, offset=offset, doc_id=self._doc_ids[name][doc])
