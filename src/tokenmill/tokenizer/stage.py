"""The tokenizer stage: sample the curated training text by bucket, train BPE, verify the fast
encoder against it, audit it on held-out text.

Writes tokenizer/tokenizer.json, tokenizer/fast_encode.json (tiktoken vs HF on the sample) and
tokenizer/audit.json (sample, hash, special ids, per-bucket audit, key-term splits).
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.tokenizer.audit import audit_bucket, key_term_splits
from tokenmill.tokenizer.bpe import tokenizer_sha256, train_bpe
from tokenmill.tokenizer.fast_encode import verify_fast_encoder, write_record
from tokenmill.tokenizer.sample import bucket_budgets, select_documents
from tokenmill.tokenizer.special import BOS_ID, EOS_ID, MASK_ID, PAD_ID, sentinel_ids
from tokenmill.data.curated import bucket_parts, curated_buckets, document_ids, iter_documents
from tokenmill.data.heldout_split import heldout_ids


def _heldout_by_bucket(run: RunDir, curated: Path) -> dict[str, set[str]]:
    tcfg = run.config.tokenize
    return {b: heldout_ids(document_ids(curated, b), tcfg.val_fraction, tcfg.min_val_docs, run.config.seed)
            for b in curated_buckets(curated)}


def _train_batches(curated: Path, bucket: str, held: set[str]) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """(text column, is-training mask) of a bucket's Parquet batches, in curated order. Texts stay
    in Arrow: sizing the corpus and picking the sample never turn unpicked texts into strings."""
    for part in bucket_parts(curated, bucket):
        for batch in pq.ParquetFile(part).iter_batches(batch_size=8192, columns=["id", "text"]):
            ids, text = batch.column("id").to_pylist(), batch.column("text")
            if text.null_count:
                raise ValueError(f"{part}: document {ids[text.to_pylist().index(None)]} has no text")
            yield text, np.array([i not in held for i in ids], dtype=bool)


def _train_sizes(curated: Path, bucket: str, held: set[str]) -> np.ndarray:
    """UTF-8 bytes of each training document of a bucket, in curated order."""
    out = [pc.binary_length(text).to_numpy(zero_copy_only=False)[train].astype(np.int64)
           for text, train in _train_batches(curated, bucket, held)]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _sample(curated: Path, heldout: dict[str, set[str]], masks: dict[str, np.ndarray]) -> Iterator[str]:
    """The sampled training texts, bucket after bucket, in curated order."""
    for bucket, held in heldout.items():
        keep, k = masks[bucket], 0
        for text, train in _train_batches(curated, bucket, held):
            picked = np.zeros(train.size, dtype=bool)
            picked[train] = keep[k: k + int(train.sum())]
            k += int(train.sum())
            if picked.any():
                yield from text.filter(pa.array(picked)).to_pylist()


def _sample_masks(run: RunDir, curated: Path, heldout: dict[str, set[str]]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Which training documents of each bucket the sample takes, and what it amounts to."""
    sizes = {b: _train_sizes(curated, b, held) for b, held in heldout.items()}
    budgets = bucket_budgets({b: int(s.sum()) for b, s in sizes.items()}, run.config.tokenizer)
    masks = {b: select_documents(sizes[b], budgets[b], run.config.seed, b) for b in sizes}
    info = {b: {"train_docs": int(sizes[b].size), "train_bytes": int(sizes[b].sum()), "budget": budgets[b],
                "docs": int(masks[b].sum()), "bytes": int(sizes[b][masks[b]].sum())} for b in sizes}
    return masks, info


def run_tokenizer(run: RunDir) -> dict[str, Any]:
    cfg = run.config.tokenizer
    curated = run.sub("curated")
    heldout = _heldout_by_bucket(run, curated)
    masks, sample_info = _sample_masks(run, curated, heldout)
    total = sum(s["train_bytes"] for s in sample_info.values())
    sampled = sum(s["bytes"] for s in sample_info.values())
    if total == 0:
        raise ValueError(f"{curated}: no curated training text to train a tokenizer on")
    if sampled == 0:
        raise ValueError(f"tokenizer: the sample is empty (tokenizer.bucket_bytes={cfg.bucket_bytes})")
    tok = train_bpe(_sample(curated, heldout, masks), cfg)

    out = run.sub("tokenizer")
    out.mkdir(parents=True, exist_ok=True)
    tok_path = out / "tokenizer.json"
    atomic_write_text(tok_path, tok.to_str())
    fast = verify_fast_encoder(tok, tok_path, _sample(curated, heldout, masks))
    write_record(fast, out)

    audit: dict[str, Any] = {
        "vocab_size": tok.get_vocab_size(), "tokenizer_sha256": tokenizer_sha256(tok_path),
        "train_bytes": total, "sample_bytes": sampled, "sample": sample_info,
        "special_ids": {"eos": EOS_ID, "bos": BOS_ID, "pad": PAD_ID, "mask": MASK_ID,
                        "sentinels": list(sentinel_ids(cfg.n_sentinels))},
        "fast_encoder": fast, "key_terms": key_term_splits(tok, cfg.key_terms), "buckets": {}}
    for bucket, held in heldout.items():
        texts = list(islice((t for i, t in iter_documents(curated, bucket) if i in held), cfg.audit_docs))
        audit["buckets"][bucket] = audit_bucket(tok, texts)
    atomic_write_text(out / "audit.json", json.dumps(audit, indent=1, ensure_ascii=False))
    run.events.write("tokenizer", "audit", **audit)
    return {"vocab_size": audit["vocab_size"], "tokenizer_sha256": audit["tokenizer_sha256"],
            "fast_encoder_identical": fast["identical"],
            "bytes_per_token": {b: round(a["bytes_per_token"], 3) for b, a in audit["buckets"].items()}}
