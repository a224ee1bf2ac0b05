"""Crafted token stores: documents of chosen lengths whose tokens say which document they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenmill.tokens.store import ShardWriter, TokenStore, token_dtype

EOS, BOS, PAD = 0, 1, 2
VOCAB = 512


def crafted_doc(bucket_no: int, i: int, length: int) -> list[int]:
    """length-1 body tokens naming (bucket, doc) — never EOS/BOS/PAD — then EOS."""
    tok = 3 + (bucket_no * 97 + i) % (VOCAB - 3)
    return [tok] * (length - 1) + [EOS]


def write_store(root: Path, layout: dict[str, list[list[int]]]) -> TokenStore:
    """layout: bucket -> train shards -> document lengths (each >= 1, EOS included)."""
    dtype = token_dtype(VOCAB)
    meta: dict = {"dtype": dtype.name, "vocab_size": VOCAB, "eos_id": EOS, "bos_id": BOS, "pad_id": PAD,
                  "buckets": {}, "shards": []}
    for bn, (bucket, shards) in enumerate(sorted(layout.items())):
        total = {"docs": 0, "tokens": 0, "bytes": 0}
        for k, lengths in enumerate(shards):
            rel = f"{bucket}/train-{k:05d}"
            w = ShardWriter(root / rel, dtype)
            for i, n in enumerate(lengths):
                w.add(f"{bucket}:{k}:{i}", crafted_doc(bn, 1000 * k + i, n), n_bytes=n)
            for key, v in w.close().items():
                total[key] += v
            meta["shards"].append(rel)
        meta["buckets"][bucket] = {"train": total}
    root.mkdir(parents=True, exist_ok=True)
    (root / "_meta.json").write_text(json.dumps(meta))
    return TokenStore(root)


@pytest.fixture()
def crafted(tmp_path: Path) -> TokenStore:
    """Buckets x (two shards) and y (one shard), 1- to 70-token documents, EOS only at document ends."""
    lengths_x = [[(7 * i) % 70 + 1 for i in range(40)], [(11 * i) % 50 + 1 for i in range(25)]]
    lengths_y = [[(5 * i) % 30 + 2 for i in range(30)]]
    return write_store(tmp_path / "tokens", {"x": lengths_x, "y": lengths_y})
