"""The tokenize stage: curated documents -> token shards per bucket and split, EOS after each.

Output is built in `tokens.tmp/` and renamed to `tokens/` when complete, so a killed stage never
leaves a store that looks finished.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from rich.progress import Progress
from tokenizers import Tokenizer

from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokenizer.special import BOS_ID, EOS_ID, PAD_ID
from tokenmill.tokens.curated import curated_buckets, document_ids, iter_documents
from tokenmill.tokens.split import heldout_ids
from tokenmill.tokens.store import ShardWriter, token_dtype


def _batches(docs: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    batch: list[tuple[str, str]] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _SplitWriter:
    """Writes one bucket/split as a sequence of shards of at most ~shard_tokens tokens."""

    def __init__(self, root: Path, bucket: str, split: str, dtype: np.dtype, shard_tokens: int):
        self.root, self.bucket, self.split = root, bucket, split
        self.dtype, self.shard_tokens = dtype, shard_tokens
        self.shards: list[str] = []
        self.totals = {"docs": 0, "tokens": 0, "bytes": 0}
        self._writer: ShardWriter | None = None

    def add(self, doc_id: str, ids: np.ndarray, n_bytes: int) -> None:
        if self._writer is None:
            name = f"{self.split}-{len(self.shards):05d}"
            self._writer = ShardWriter(self.root / self.bucket / name, self.dtype)
            self.shards.append(f"{self.bucket}/{name}")
        self._writer.add(doc_id, ids, n_bytes)
        if self._writer.n_tokens >= self.shard_tokens:
            self._close_shard()

    def _close_shard(self) -> None:
        assert self._writer is not None
        for k, v in self._writer.close().items():
            self.totals[k] += v
        self._writer = None

    def close(self) -> None:
        if self._writer is not None:
            self._close_shard()


def encode_documents(tok: Tokenizer, texts: list[str], dtype: np.dtype) -> list[np.ndarray]:
    """Token ids of each text with EOS appended (EOS closes every document)."""
    encs = tok.encode_batch(texts, add_special_tokens=False)
    return [np.asarray([*e.ids, EOS_ID], dtype=dtype) for e in encs]


def run_tokenize(run: RunDir) -> dict[str, Any]:
    cfg = run.config.tokenize
    curated = run.sub("curated")
    tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
    vocab = tok.get_vocab_size()
    dtype = token_dtype(vocab)
    final, tmp = run.sub("tokens"), run.sub("tokens.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    meta: dict[str, Any] = {"dtype": dtype.name, "vocab_size": vocab, "eos_id": EOS_ID,
                            "bos_id": BOS_ID, "pad_id": PAD_ID, "seed": run.config.seed,
                            "val_fraction": cfg.val_fraction, "buckets": {}, "shards": []}
    buckets = curated_buckets(curated)
    with Progress(transient=True) as progress:
        for bucket in buckets:
            ids = document_ids(curated, bucket)
            held = heldout_ids(ids, cfg.val_fraction, cfg.min_val_docs, run.config.seed)
            task = progress.add_task(f"tokenize {bucket}", total=len(ids))
            writers = {s: _SplitWriter(tmp, bucket, s, dtype, cfg.shard_tokens) for s in ("train", "val")}
            for batch in _batches(iter_documents(curated, bucket), cfg.batch_docs):
                texts = [t for _, t in batch]
                for (doc_id, text), arr in zip(batch, encode_documents(tok, texts, dtype)):
                    split = "val" if doc_id in held else "train"
                    writers[split].add(doc_id, arr, len(text.encode("utf-8")))
                progress.advance(task, len(batch))
            for w in writers.values():
                w.close()
                meta["shards"].extend(w.shards)
            meta["buckets"][bucket] = {s: w.totals for s, w in writers.items()}
            run.events.write("tokenize", "bucket", bucket=bucket, **{s: w.totals for s, w in writers.items()})

    atomic_write_text(tmp / "_meta.json", json.dumps(meta, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return {b: {s: v["tokens"] for s, v in d.items()} for b, d in meta["buckets"].items()}
