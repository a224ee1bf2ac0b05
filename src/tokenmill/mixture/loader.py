"""The training loader: mixture, curriculum, packing, an exact stateless cursor, batch lineage.

Data order is a pure function of (seed, phase, epoch, sample index), so `batch(step, micro)`
has no hidden state and the data cursor of a checkpoint is just the next step (+ `fingerprint`):

  1. the step's phase (curriculum.py) fixes the sequence length T, the rows per micro-batch and
     the bucket interleave; the step's global batch is samples
     [(step - start_step) · R, (step - start_step + 1) · R) of that phase, R = world_size ·
     grad_accum · rows, laid out rank-major then micro then row: rank r takes the contiguous
     slice [r · grad_accum · rows, (r+1) · grad_accum · rows) and micro m the m-th `rows` of it.
     World size only changes who computes which slice, never the set of sequences of a step.
  2. sample i of a phase comes from the bucket the interleave (schedule.py) gives it, as that
     bucket's j-th sample in the phase; j plus the bucket's samples in earlier phases (closed-form
     counts) locate it in the bucket's stream (stream.py: documents shuffled per epoch by a
     generator seeded from (seed, bucket, epoch), concatenated with their EOS).
  3. packed: sample j is stream tokens [o + j·T, o + j·T + T + 1) — consecutive samples share one
     token, so each stream token is a target exactly once (Megatron's GPT dataset does the
     same); padded: sample j is stream document o + j, cut to T+1 tokens and padded.
  4. packing.py turns the row's document runs into positions, segments and loss_mask.

Every row keeps its document runs, so `global_provenance(step)` lists each sequence of the
global batch with the exact (bucket, shard, doc, curated id, token span) of each of its parts.
"""

from __future__ import annotations

import json
import weakref
from itertools import count
from typing import Iterator

import numpy as np
import torch
import xxhash

from tokenmill.mixture.config import MixtureConfig
from tokenmill.mixture.curriculum import Phase, build_phases, phase_index
from tokenmill.mixture.errors import MixtureError
from tokenmill.mixture.packing import Batch, RowMasks, packed_masks, padded_row
from tokenmill.mixture.plan import build_plan
from tokenmill.mixture.prefetch import Prefetcher
from tokenmill.mixture.provenance import DocIds, DocSpan, SampleSource
from tokenmill.mixture.stream import BucketStream, Piece
from tokenmill.tokens.store import TokenStore

LOADER_VERSION = "tokenmill-loader-v2"
# Samples a phase draws from a bucket are shuffled within blocks of this many (Megatron's
# shuffle index, blocked so any sample is found without building a whole-epoch permutation):
# without it the rows of a batch are consecutive windows of the same few documents, and the
# demo model trained measurably worse on such low-diversity batches.
SHUFFLE_BLOCK = 4096
# mixture.shuffle = "epoch" makes the block one epoch of the bucket instead, and draws a run's
# samples from the whole block even when the run needs fewer: with 4096-sample blocks over a
# document-shuffled stream, a run of 300 k tokens reads only the first few (long) documents, so
# runs of different lengths train on different slices of the data, which a scaling sweep (one run
# length per point) mistakes for an effect of N and D.
# Config fields that change which tokens or masks a step receives (prefetch and the warning
# threshold do not, so changing them never blocks a resume).
_ORDER_FIELDS = ("weights", "phases", "packing", "doc_masking", "shuffle")

__all__ = ["Batch", "DocSpan", "Loader", "MixtureError", "Phase", "SampleSource", "store_fingerprint"]


def store_fingerprint(store: TokenStore) -> str:
    """Hash of the token store: its meta file, every shard's file sizes and document offsets."""
    h = xxhash.xxh64()
    h.update(json.dumps(store.meta, sort_keys=True).encode())
    for rel in sorted(store.meta["shards"]):
        prefix = store.root / rel
        idx = prefix.with_suffix(".idx")
        h.update(f"{rel}:{prefix.with_suffix('.bin').stat().st_size}:{idx.stat().st_size}:".encode())
        h.update(idx.read_bytes())
    return h.hexdigest()


def _keys(step: int, micro: int, max_steps: int, grad_accum: int) -> Iterator[tuple[int, int]]:
    """(step, micro) in training order from (step, micro) to the run's last micro-batch."""
    for s in count(step):
        if s > max_steps:
            return
        for m in range(micro if s == step else 0, grad_accum):
            yield s, m


class Loader:
    """`batch(step, micro) -> Batch` for one data-parallel rank; stateless, exact on resume."""

    def __init__(
        self,
        store: TokenStore,
        mixture: MixtureConfig,
        seq_len: int,
        micro_batch: int,
        grad_accum: int,
        max_steps: int,
        seed: int,
        world_size: int = 1,
        rank: int = 0,
        split: str = "train",
        pin_memory: bool = False,
    ):
        for name, v in (
            ("seq_len", seq_len),
            ("micro_batch", micro_batch),
            ("grad_accum", grad_accum),
            ("max_steps", max_steps),
            ("world_size", world_size),
        ):
            if v < 1:
                raise MixtureError(f"{name} must be >= 1, got {v}")
        if not 0 <= rank < world_size:
            raise MixtureError(f"rank {rank} outside 0..{world_size - 1}")
        self.store, self.mixture, self.split = store, mixture, split
        self.seq_len, self.micro_batch, self.grad_accum = seq_len, micro_batch, grad_accum
        self.max_steps, self.seed, self.world_size, self.rank = max_steps, int(seed), world_size, rank
        self.pin_memory = pin_memory and torch.cuda.is_available()  # page-locked host memory for async H2D
        available = {b: store.n_tokens(b, split) for b in store.buckets}
        self.phases, self._interleaves = build_phases(
            mixture, available, seq_len, micro_batch, world_size * grad_accum, max_steps
        )
        used = sorted({b for il in self._interleaves for b in il.buckets})
        self._streams = {b: BucketStream(b, store.shards(b, split), self.seed) for b in used}
        self._blocks = [{b: self._block_size(ph, b) for b in il.buckets} for ph, il in zip(self.phases, self._interleaves)]
        self._counts, self._offsets = self._phase_accounting()
        self._doc_ids = DocIds()
        self._perms: dict[tuple[int, str, int], np.ndarray] = {}
        self._fingerprint_parts = self._compute_fingerprint_parts()
        self._prefetcher: Prefetcher | None = None
        self._plan = build_plan(
            phases=self.phases,
            counts=self._counts,
            offsets=self._offsets,
            streams=self._streams,
            packing=mixture.packing,
            doc_masking=mixture.doc_masking,
            max_epochs_warn=mixture.max_epochs_warn,
            layout={
                "version": LOADER_VERSION,
                "seed": self.seed,
                "split": split,
                "seq_len": seq_len,
                "micro_batch": micro_batch,
                "grad_accum": grad_accum,
                "world_size": world_size,
                "max_steps": max_steps,
                "tokens_per_step": self.tokens_per_step,
                "fingerprint": self.fingerprint(),
            },
            positions=self._sample_positions,
        )

    # ------------------------------------------------------------------ layout
    @property
    def tokens_per_step(self) -> int:
        """Tokens of the global batch of every step (the same in every phase)."""
        return self.world_size * self.grad_accum * self.micro_batch * self.seq_len

    @property
    def token_budget(self) -> int:
        return self.max_steps * self.tokens_per_step

    @property
    def max_seq_len(self) -> int:
        """Longest sequence of any phase: the model's RoPE tables must cover it."""
        return max(p.seq_len for p in self.phases)

    def _global_rows(self, phase: Phase) -> int:
        return self.world_size * self.grad_accum * phase.rows

    def _block_size(self, phase: Phase, bucket: str) -> int:
        """Samples per shuffle block: SHUFFLE_BLOCK, or (shuffle='epoch') the bucket's windows per epoch."""
        if self.mixture.shuffle == "block":
            return SHUFFLE_BLOCK
        stream = self._streams[bucket]
        per_epoch = stream.n_tokens // phase.seq_len if self.mixture.packing == "packed" else stream.n_docs
        return max(1, per_epoch)

    def _phase_accounting(self) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
        """Per phase: samples of each bucket, and where each bucket's stream starts (tokens or docs).
        With shuffle='epoch' a phase owns whole blocks (its samples are spread over them), so the
        next phase starts after the last one: the unread rest of that block is skipped, never reread."""
        counts, offsets, pos = [], [], dict.fromkeys(self._streams, 0)
        for k, (ph, il) in enumerate(zip(self.phases, self._interleaves)):
            n = ph.steps * self._global_rows(ph)
            c = {b: il.count_before(i, n) for i, b in enumerate(il.buckets)}
            offsets.append(dict(pos))
            unit = ph.seq_len if self.mixture.packing == "packed" else 1
            for b, nb in c.items():
                if self.mixture.shuffle == "epoch":
                    nb = -(-nb // self._blocks[k][b]) * self._blocks[k][b]
                pos[b] += nb * unit
            counts.append(c)
        return counts, offsets

    def phase_at(self, step: int) -> Phase:
        """The curriculum phase of optimizer step `step` (1-based)."""
        return self.phases[phase_index(self.phases, step)]

    def _check(self, step: int, micro: int) -> int:
        if not 0 <= micro < self.grad_accum:
            raise MixtureError(f"micro {micro} outside 0..{self.grad_accum - 1}")
        return phase_index(self.phases, step)

    # ------------------------------------------------------------------ samples
    def _samples(self, k: int, step: int, lo: int, hi: int) -> list[tuple[str, int]]:
        """(bucket, j) of global rows lo .. hi-1 of `step` in phase k."""
        base = (step - self.phases[k].start_step) * self._global_rows(self.phases[k])
        il = self._interleaves[k]
        return [(il.buckets[b], j) for b, j in il.samples(base + lo, base + hi)]

    def _shuffled(self, k: int, bucket: str, j: int) -> int:
        """A seeded injection of the phase's samples of a bucket into its windows, block by block:
        'block' permutes the samples the phase reads (0..n-1); 'epoch' picks them from a
        permutation of the whole block, so a phase shorter than a block samples all of it."""
        n, block = self._counts[k][bucket], self._blocks[k][bucket]
        b0 = (j // block) * block
        key = (k, bucket, b0)
        perm = self._perms.get(key)
        if perm is None:
            bucket_no = sorted(self._streams).index(bucket)
            rng = np.random.default_rng([self.seed, 0x5A3F, k, bucket_no, b0])
            size = block if self.mixture.shuffle == "epoch" else min(block, n - b0)
            perm = self._perms[key] = rng.permutation(size)
        return b0 + int(perm[j - b0])

    def _sample_positions(self, k: int, bucket: str) -> np.ndarray:
        """Stream positions (samples, relative to the phase's offset) that phase k reads from `bucket`."""
        n = self._counts[k].get(bucket, 0)
        return np.fromiter((self._shuffled(k, bucket, j) for j in range(n)), dtype=np.int64, count=n)

    def _pieces(self, k: int, bucket: str, j: int) -> list[Piece]:
        """The document runs of bucket's j-th sample in phase k (after the sample shuffle)."""
        j = self._shuffled(k, bucket, j)
        stream, T = self._streams[bucket], self.phases[k].seq_len
        if self.mixture.packing == "packed":
            return stream.pieces(self._offsets[k][bucket] + j * T, T + 1)
        epoch, doc = stream.doc_at(self._offsets[k][bucket] + j)
        return [Piece(doc, 0, min(int(stream.doc_len[doc]), T + 1), 0, epoch)]

    def _local_rows(self, phase: Phase, micro: int) -> tuple[int, int]:
        lo = (self.rank * self.grad_accum + micro) * phase.rows
        return lo, lo + phase.rows

    # ------------------------------------------------------------------ batches
    def _build(self, step: int, micro: int) -> Batch:
        k = self._check(step, micro)
        phase = self.phases[k]
        T, doc_masking = phase.seq_len, self.mixture.doc_masking
        out = RowMasks.empty(phase.rows, T)
        for r, (bucket, j) in enumerate(self._samples(k, step, *self._local_rows(phase, micro))):
            stream, pieces = self._streams[bucket], self._pieces(k, bucket, j)
            if self.mixture.packing == "packed":
                stream.read(pieces, out.tokens[r])
                packed_masks(
                    [p.end - p.start for p in pieces], T, doc_masking, out.positions[r], out.segments[r], out.loss_mask[r]
                )
            else:
                p = pieces[0]
                doc = np.empty(p.end, np.int64)
                stream.read(pieces, doc)
                padded_row(doc, T, self.store.pad_id, out.tokens[r], out.positions[r], out.segments[r], out.loss_mask[r])
        # One max over the batch's ids (B·(T+1) integers, far below a forward pass over them),
        # so an id past the vocabulary is named with its shard file and offset here, not met
        # as an IndexError inside the embedding.
        if out.tokens.size and int(out.tokens.max()) >= self.store.vocab_size:
            for bucket, j in self._samples(k, step, *self._local_rows(phase, micro)):
                self._streams[bucket].check_ids(self._pieces(k, bucket, j))
            raise MixtureError(  # only a pad id past the vocabulary is left (_meta.json is wrong)
                f"{self.store.root / '_meta.json'}: pad id {self.store.pad_id} is not below the vocabulary size "
                f"{self.store.vocab_size}; rerun `tokenmill tokenize CONFIG`"
            )
        batch = out.to_batch(doc_masking, step, micro, phase.name)
        return batch.pin_memory() if self.pin_memory else batch

    def batch(self, step: int, micro: int) -> Batch:
        """Micro-batch `micro` of optimizer step `step` (1-based) for this rank."""
        if self._prefetcher is not None:
            got = self._prefetcher.take((step, micro))
            if got is not None:
                return got
            self._prefetcher.close()
            self._prefetcher = None
            b = self._build(step, micro)
            self._start(step, micro + 1)
            return b
        return self._build(step, micro)

    def rebuild(self, step: int, micro: int) -> Batch:
        """Micro-batch (step, micro) built afresh, leaving the prefetch queue alone (a second look
        at a batch already trained on: the trainer's activation probe)."""
        return self._build(step, micro)

    def row_buckets(self, step: int, micro: int) -> list[str]:
        """The bucket of each row of this rank's micro-batch (step, micro); each row is one sample
        of one bucket's stream. Cheap: no document lookup (`provenance` has the documents)."""
        k = self._check(step, micro)
        return [bucket for bucket, _ in self._samples(k, step, *self._local_rows(self.phases[k], micro))]

    def n_targets(self, step: int) -> int:
        """Targets that count in the loss over the whole global batch of `step` (all ranks and
        micro-batches): the denominator of an exactly token-weighted loss under DDP."""
        k = phase_index(self.phases, step)
        phase = self.phases[k]
        T, total = phase.seq_len, 0
        for bucket, j in self._samples(k, step, 0, self._global_rows(phase)):
            pieces = self._pieces(k, bucket, j)
            if self.mixture.packing == "padded":
                total += pieces[0].end - 1
            else:
                total += T - ((len(pieces) - 1) if self.mixture.doc_masking else 0)
        return total

    # ------------------------------------------------------------------ prefetch
    def _start(self, step: int, micro: int) -> None:
        if self.mixture.prefetch <= 0:
            return
        if micro >= self.grad_accum:
            step, micro = step + 1, 0
        if step > self.max_steps:
            return
        ref = weakref.ref(self)  # the thread must not keep a forgotten loader alive

        def produce(key: tuple[int, int]) -> Batch:
            loader = ref()
            if loader is None:
                raise RuntimeError("loader was garbage-collected")
            return loader._build(*key)

        self._prefetcher = Prefetcher(
            produce, _keys(step, micro, self.max_steps, self.grad_accum), depth=self.mixture.prefetch, order=lambda key: key
        )

    def start_prefetch(self, first_step: int) -> None:
        """Prepare batches from (first_step, micro 0) on in a background thread (mixture.prefetch deep)."""
        self.close()
        self._start(first_step, 0)

    def close(self) -> None:
        """Stop the prefetch thread (batch() keeps working, computing on demand)."""
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def __del__(self) -> None:
        if getattr(self, "_prefetcher", None) is not None:
            self.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ lineage
    def _sources(self, step: int, lo: int, hi: int) -> list[SampleSource]:
        k = phase_index(self.phases, step)
        phase = self.phases[k]
        out = []
        for g, (bucket, j) in enumerate(self._samples(k, step, lo, hi), start=lo):
            rank, rest = divmod(g, self.grad_accum * phase.rows)
            micro, row = divmod(rest, phase.rows)
            spans = tuple(self._span(bucket, p) for p in self._pieces(k, bucket, j))
            out.append(
                SampleSource(step=step, rank=rank, micro=micro, row=row, phase=phase.name, bucket=bucket, sample=j, spans=spans)
            )
        return out

    def _span(self, bucket: str, p: Piece) -> DocSpan:
        stream = self._streams[bucket]
        si, doc = stream.locate(p.doc)
        shard = stream.shards[si]
        name = shard.prefix.relative_to(self.store.root).as_posix()
        return DocSpan(
            bucket=bucket,
            shard=name,
            doc=doc,
            doc_id=self._doc_ids.get(name, shard, doc),
            start=p.start,
            end=p.end,
            row_start=p.row_start,
            epoch=p.epoch,
        )

    def global_provenance(self, step: int) -> list[SampleSource]:
        """Every sequence of the global batch of `step` (all ranks, all micro-batches) with its documents."""
        k = phase_index(self.phases, step)
        return self._sources(step, 0, self._global_rows(self.phases[k]))

    def provenance(self, step: int, micro: int) -> list[SampleSource]:
        """The sequences of this rank's micro-batch (step, micro), row by row."""
        phase = self.phases[self._check(step, micro)]
        return self._sources(step, *self._local_rows(phase, micro))

    # ------------------------------------------------------------------ identity
    def fingerprint_parts(self) -> dict[str, str]:
        """{"store": hash of the token store, "order": hash of everything that fixes the data order}."""
        return dict(self._fingerprint_parts)

    def _compute_fingerprint_parts(self) -> dict[str, str]:
        order = {
            "version": LOADER_VERSION,
            "seed": self.seed,
            "split": self.split,
            "seq_len": self.seq_len,
            "global_rows": self.world_size * self.grad_accum * self.micro_batch,
            "max_steps": self.max_steps,
            "mixture": self.mixture.model_dump(mode="json", include=set(_ORDER_FIELDS)),
        }
        return {
            "store": store_fingerprint(self.store),
            "order": xxhash.xxh64_hexdigest(json.dumps(order, sort_keys=True).encode()),
        }

    def fingerprint(self) -> str:
        """ "<store hash>-<order hash>": equal iff a resumed run receives exactly the same data."""
        parts = self.fingerprint_parts()
        return f"{parts['store']}-{parts['order']}"

    def check_fingerprint(self, saved: str, where: str = "the checkpoint") -> None:
        """Raise a MixtureError naming what changed when `saved` differs from this loader's fingerprint."""
        mine = self.fingerprint()
        if saved == mine:
            return
        s_store, _, s_order = saved.partition("-")
        parts = self.fingerprint_parts()
        what = []
        if s_store != parts["store"]:
            what.append(f"the token store {self.store.root} changed (re-tokenized or edited)")
        if s_order != parts["order"]:
            what.append(
                "the data order changed (mixture weights/phases/packing/doc_masking, seed, seq_len, "
                "global batch size or max_steps)"
            )
        raise MixtureError(
            f"{where} was written with loader fingerprint {saved}, this run's is {mine}: "
            f"{'; '.join(what)}. Resuming would feed different data than the interrupted run; "
            f"restore the original data and config, or start a new run"
        )

    def cursor(self, step: int) -> dict:
        """The data cursor after optimizer step `step`, for a checkpoint's state."""
        return {
            "loader": LOADER_VERSION,
            "next_step": step + 1,
            "next_micro": 0,
            "seed": self.seed,
            "fingerprint": self.fingerprint(),
        }

    def plan(self) -> dict:
        """The mixture plan: budget, phases, per-bucket samples/tokens/epochs/effective tokens, warnings."""
        return self._plan

    @property
    def weights(self) -> dict[str, float]:
        """Realised bucket shares of the first phase (what the trainer logs as the mixture)."""
        return dict(self.phases[0].weights)
