"""The tokenizer stage: sample the curated training text by bucket, train BPE, verify the fast
encoder against it, audit it on held-out text.

Writes tokenizer/tokenizer.json, tokenizer/fast_encode.json (tiktoken vs HF on the sample) and
tokenizer/audit.json (sample, hash, special ids, per-bucket audit, key-term splits).
"""

from __future__ import annotations

import json
import shutil
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from tokenmill.errors import UserError
from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.tokenizer.audit import audit_bucket, key_term_splits
from tokenmill.tokenizer.bpe import load_tokenizer, tokenizer_sha256, train_bpe
from tokenmill.tokenizer.fast_encode import verify_fast_encoder, write_record
from tokenmill.tokenizer.sample import BucketSample, bucket_budgets
from tokenmill.tokenizer.special import BOS_ID, EOS_ID, MASK_ID, PAD_ID, sentinel_ids, special_tokens
from tokenmill.data.curated import bucket_parts, iter_documents
from tokenmill.data.heldout_split import HeldoutCut, bucket_cuts


class TokenizerFileError(UserError, ValueError):
    """`tokenizer.file` names no usable tokenmill tokenizer."""


def _train_batches(curated: Path, bucket: str, cut: HeldoutCut) -> Iterator[tuple[list[str], pa.Array, np.ndarray]]:
    """(ids, text column, UTF-8 sizes) of a bucket's training documents, batch by batch in
    curated order. Texts stay in Arrow: sizing the corpus and picking the sample never turn
    unpicked texts into strings."""
    for part in bucket_parts(curated, bucket):
        for batch in pq.ParquetFile(part).iter_batches(batch_size=8192, columns=["id", "text"]):
            ids, text = batch.column("id").to_pylist(), batch.column("text")
            if text.null_count:
                raise ValueError(f"{part}: document {ids[text.to_pylist().index(None)]} has no text")
            train = np.array([not cut.holds(i) for i in ids], dtype=bool)
            sizes = pc.binary_length(text).to_numpy(zero_copy_only=False).astype(np.int64)
            yield [i for i, t in zip(ids, train) if t], text.filter(pa.array(train)), sizes[train]


def _sample(curated: Path, cuts: dict[str, HeldoutCut], samples: dict[str, BucketSample]) -> Iterator[str]:
    """The sampled training texts, bucket after bucket, in curated order."""
    for bucket, cut in cuts.items():
        for ids, text, sizes in _train_batches(curated, bucket, cut):
            picked = samples[bucket].chosen(ids, sizes)
            if picked.any():
                yield from text.filter(pa.array(picked)).to_pylist()


def _choose_samples(
    run: RunDir, curated: Path, cuts: dict[str, HeldoutCut], work: Path
) -> tuple[dict[str, BucketSample], dict[str, Any]]:
    """Which training documents of each bucket the sample takes, and what it amounts to."""
    samples = {}
    for bucket, cut in cuts.items():
        n_docs = sum(pq.ParquetFile(p).metadata.num_rows for p in bucket_parts(curated, bucket))
        samples[bucket] = BucketSample(work / bucket, bucket, run.config.seed, n_docs, run.config.tokenizer.sample_partition_docs)
        for ids, _, sizes in _train_batches(curated, bucket, cut):
            samples[bucket].add(ids, sizes)
    budgets = bucket_budgets({b: s.train_bytes for b, s in samples.items()}, run.config.tokenizer)
    for bucket, sample in samples.items():
        sample.choose(budgets[bucket])
    info = {
        b: {"train_docs": s.train_docs, "train_bytes": s.train_bytes, "budget": budgets[b], "docs": s.docs, "bytes": s.bytes}
        for b, s in samples.items()
    }
    return samples, info


def given_tokenizer(path: Path, n_sentinels: int) -> Tokenizer:
    """A tokenizer.json trained elsewhere (`tokenizer.file`), checked to carry tokenmill's special
    tokens at their ids: the token store, the loader and the objectives rely on them."""
    try:
        tok = load_tokenizer(path)
    except FileNotFoundError:
        raise TokenizerFileError(f"tokenizer.file {path}: not found") from None
    except Exception as exc:  # tokenizers raises its own exception type on malformed JSON
        raise TokenizerFileError(f"tokenizer.file {path}: not a tokenizer.json ({exc})") from exc
    for want, token in enumerate(special_tokens(n_sentinels)):
        got = tok.token_to_id(token)
        if got != want:
            raise TokenizerFileError(
                f"tokenizer.file {path}: special token {token!r} has id {got}, tokenmill needs "
                f"{want} (train it with tokenmill, with tokenizer.n_sentinels={n_sentinels})"
            )
    return tok


def tokenizer_file(run: RunDir) -> Path | None:
    """The tokenizer.json the stage takes instead of training one: `tokenizer.file`, else the one
    the model named by `train.init_from` was trained with (a continued model keeps its tokenizer)."""
    if run.config.tokenizer.file:
        return Path(run.config.tokenizer.file)
    if run.config.train.init_from:
        # The one import that runs against the data path (tokenizer -> train): where the parent
        # model's tokenizer lies is read from its checkpoint, whose format train owns. Lazy, so
        # the tokenizer stage loads without the trainer (tests/test_import_direction.py).
        from tokenmill.train.init_from import source_tokenizer

        return source_tokenizer(run.config.train.init_from)
    return None


def tokenizer_file_sha256(run: RunDir) -> str | None:
    """The identity of the given tokenizer file (a changed file makes the stage stale); None when training."""
    path = tokenizer_file(run)
    return tokenizer_sha256(path) if path is not None and path.is_file() else None


def run_tokenizer(run: RunDir) -> dict[str, Any]:
    curated = run.sub("curated")
    tcfg = run.config.tokenize
    cuts = bucket_cuts(curated, tcfg.val_fraction, tcfg.min_val_docs, run.config.seed)
    work = run.sub("tokenizer.sample")  # scratch: the sample's priority shuffle
    try:
        return _train_and_audit(run, curated, cuts, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _train_and_audit(run: RunDir, curated: Path, cuts: dict[str, HeldoutCut], work: Path) -> dict[str, Any]:
    cfg = run.config.tokenizer
    samples, sample_info = _choose_samples(run, curated, cuts, work)
    total = sum(s["train_bytes"] for s in sample_info.values())
    sampled = sum(s["bytes"] for s in sample_info.values())
    if total == 0:
        raise ValueError(f"{curated}: no curated training text to train a tokenizer on")
    if sampled == 0:
        raise ValueError(f"tokenizer: the sample is empty (tokenizer.bucket_bytes={cfg.bucket_bytes})")
    given = tokenizer_file(run)
    tok = given_tokenizer(given, cfg.n_sentinels) if given is not None else train_bpe(_sample(curated, cuts, samples), cfg)

    out = run.sub("tokenizer")
    out.mkdir(parents=True, exist_ok=True)
    tok_path = out / "tokenizer.json"
    atomic_write_text(tok_path, tok.to_str())
    fast = verify_fast_encoder(tok, tok_path, _sample(curated, cuts, samples))
    write_record(fast, out)

    audit: dict[str, Any] = {
        "given": str(given) if given is not None else None,
        "inherited_from": run.config.train.init_from if given is not None and not cfg.file else None,
        "vocab_size": tok.get_vocab_size(),
        "tokenizer_sha256": tokenizer_sha256(tok_path),
        "train_bytes": total,
        "sample_bytes": sampled,
        "sample": sample_info,
        "special_ids": {
            "eos": EOS_ID,
            "bos": BOS_ID,
            "pad": PAD_ID,
            "mask": MASK_ID,
            "sentinels": list(sentinel_ids(cfg.n_sentinels)),
        },
        "fast_encoder": fast,
        "key_terms": key_term_splits(tok, cfg.key_terms),
        "buckets": {},
    }
    for bucket, cut in cuts.items():
        texts = list(islice((t for i, t in iter_documents(curated, bucket) if cut.holds(i)), cfg.audit_docs))
        audit["buckets"][bucket] = audit_bucket(tok, texts)
    atomic_write_text(out / "audit.json", json.dumps(audit, indent=1, ensure_ascii=False))
    run.events.write("tokenizer", "audit", **audit)
    return {
        "vocab_size": audit["vocab_size"],
        "tokenizer_sha256": audit["tokenizer_sha256"],
        "fast_encoder_identical": fast["identical"],
        "bytes_per_token": {b: round(a["bytes_per_token"], 3) for b, a in audit["buckets"].items()},
    }
