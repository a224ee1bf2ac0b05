"""The tokenizer stage: sample the curated training text, train BPE, audit it on held-out text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.tokenizer.audit import audit_bucket
from tokenmill.tokenizer.bpe import sample_texts, train_bpe
from tokenmill.tokens.curated import curated_buckets, document_ids, iter_documents
from tokenmill.tokens.split import heldout_ids

AUDIT_DOCS = 200  # held-out documents per bucket used for the audit


def _heldout_by_bucket(run: RunDir, curated: Path) -> dict[str, set[str]]:
    tcfg = run.config.tokenize
    return {b: heldout_ids(document_ids(curated, b), tcfg.val_fraction, tcfg.min_val_docs, run.config.seed)
            for b in curated_buckets(curated)}


def _train_texts(curated: Path, heldout: dict[str, set[str]]) -> Iterator[str]:
    for bucket, held in heldout.items():
        for doc_id, text in iter_documents(curated, bucket):
            if doc_id not in held:
                yield text


def run_tokenizer(run: RunDir) -> dict[str, Any]:
    cfg = run.config.tokenizer
    curated = run.sub("curated")
    heldout = _heldout_by_bucket(run, curated)
    total = sum(len(t.encode("utf-8")) for t in _train_texts(curated, heldout))
    if total == 0:
        raise ValueError(f"{curated}: no curated training text to train a tokenizer on")
    sample = sample_texts(_train_texts(curated, heldout), total, cfg.sample_bytes, run.config.seed)
    tok = train_bpe(sample, cfg)

    out = run.sub("tokenizer")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "tokenizer.json", tok.to_str())
    audit: dict[str, Any] = {"vocab_size": tok.get_vocab_size(), "train_bytes": total,
                             "sample_bytes": min(total, cfg.sample_bytes), "buckets": {}}
    for bucket, held in heldout.items():
        texts = [t for i, t in iter_documents(curated, bucket) if i in held][:AUDIT_DOCS]
        audit["buckets"][bucket] = audit_bucket(tok, texts)
    atomic_write_text(out / "audit.json", json.dumps(audit, indent=1))
    summary = {"vocab_size": audit["vocab_size"],
               "bytes_per_token": {b: round(a["bytes_per_token"], 3) for b, a in audit["buckets"].items()}}
    run.events.write("tokenizer", "audit", **audit)
    return summary
