"""Memorization audit: greedy continuation of training vs held-out document prefixes.

For each bucket, the first `docs_per_bucket` training documents and the first as many held-out
(val) documents, in store order, that hold at least prefix + suffix tokens are taken. The model
sees [EOS] + the document's first `prefix` tokens (EOS leads, as every document does in training
and in the perplexity eval) and greedily decodes `suffix` tokens. Reported per split: the
exact-match rate (every suffix token equal to the document's own) and the token match rate (the
share of suffix positions equal). A model that has memorized its training data continues
training prefixes verbatim far more often than held-out ones: the gap train - held-out is the
signal (per bucket and overall, documents pooled).

Decoding is batched: all selected documents of one split share the prefix length, so each step is
one forward of [batch, prefix + 1 + step] (no padding, no cache); a sequence longer than the model
context sees its last `max_context` tokens. Greedy argmax breaks ties by the lowest id, as
`torch.argmax` does, so results are deterministic for a given model and device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tokenmill.eval.generate import generate_batch
from tokenmill.tokens.store import TokenStore

SPLIT_NAMES = {"train": "train", "val": "heldout"}


def select_docs(store: TokenStore, bucket: str, split: str, count: int, min_tokens: int) -> list[np.ndarray]:
    """The first `count` documents of a bucket/split, in store order, with >= min_tokens tokens."""
    out: list[np.ndarray] = []
    if count <= 0:
        return out
    for shard in store.shards(bucket, split):
        lengths = np.diff(shard.offsets)
        for i in np.nonzero(lengths >= min_tokens)[0]:
            out.append(shard.doc(int(i)).astype(np.int64))
            if len(out) == count:
                return out
    return out


@torch.no_grad()
def greedy_continue(
    model: torch.nn.Module, prompts: torch.Tensor, steps: int, max_context: int, batch_size: int = 16
) -> torch.Tensor:
    """Greedy continuations [N, steps] of equal-length prompts [N, P] (long, on the model's device):
    `batch_size` rows at a time through the KV cache (one position's forward per new token, not
    the whole window again), recomputing the window only where the cache cannot follow the model."""
    outs = []
    for b in range(0, prompts.shape[0], batch_size):
        rows = prompts[b : b + batch_size]
        new = generate_batch(model, rows.tolist(), steps, max_context=max_context, temperature=0.0, device=rows.device)
        outs.append(torch.tensor(new, dtype=torch.long, device=rows.device))
    return torch.cat(outs) if outs else prompts.new_zeros((0, steps))


def _rates(exact: int, token: float, docs: int) -> dict[str, Any]:
    return {"docs": docs, "exact_match": exact / docs if docs else None, "token_match": token / docs if docs else None}


def _gap(train: dict, heldout: dict) -> dict[str, Any]:
    return {
        k: (train[k] - heldout[k] if train[k] is not None and heldout[k] is not None else None)
        for k in ("exact_match", "token_match")
    }


def memorization(
    model: torch.nn.Module,
    store: TokenStore,
    device: torch.device,
    docs_per_bucket: int,
    prefix: int,
    suffix: int,
    *,
    max_context: int | None = None,
    batch_size: int = 16,
    dtype: str = "auto",
) -> dict[str, Any]:
    """{"prefix", "suffix", "buckets": {bucket: {"train", "heldout", "gap"}}, "overall": {...}, "hits"};
    "train"/"heldout" are {"docs", "exact_match", "token_match"} (rates None with no documents),
    "gap" is train - heldout of both rates; "hits": the training documents continued exactly
    ({"bucket", "tokens": prefix + suffix ids})."""
    if prefix < 1 or suffix < 1:
        raise ValueError(f"memorization prefix and suffix must be >= 1, got {prefix} and {suffix}")
    if max_context is None:
        max_context = int(getattr(getattr(model, "config", None), "max_seq_len", prefix + suffix))
    from tokenmill.train.device import autocast

    was_training = model.training
    model.eval()
    totals = {name: [0, 0.0, 0] for name in SPLIT_NAMES.values()}  # exact, token-match sum, docs
    buckets: dict[str, dict] = {}
    hits: list[dict[str, Any]] = []
    try:
        for bucket in store.buckets:
            entry: dict[str, Any] = {}
            for split, name in SPLIT_NAMES.items():
                docs = select_docs(store, bucket, split, docs_per_bucket, prefix + suffix)
                exact, token = 0, 0.0
                if docs:
                    seqs = np.stack([np.concatenate([[store.eos_id], d[: prefix + suffix]]) for d in docs])
                    seqs_t = torch.as_tensor(seqs, dtype=torch.long, device=device)
                    with autocast(device, dtype):
                        gen = greedy_continue(model, seqs_t[:, : prefix + 1], suffix, max_context, batch_size)
                    match = (gen == seqs_t[:, prefix + 1 :]).cpu()
                    exact = int(match.all(dim=1).sum())
                    if split == "train":  # the memorized passages, for the report to trace back (eval/trace.py)
                        hits += [
                            {"bucket": bucket, "tokens": seqs[r, 1:].tolist()} for r in np.nonzero(match.all(dim=1).numpy())[0]
                        ]
                    token = float(match.float().mean(dim=1).sum())
                entry[name] = _rates(exact, token, len(docs))
                t = totals[name]
                t[0], t[1], t[2] = t[0] + exact, t[1] + token, t[2] + len(docs)
            entry["gap"] = _gap(entry["train"], entry["heldout"])
            buckets[bucket] = entry
    finally:
        model.train(was_training)
    overall: dict[str, Any] = {
        name: _rates(int(e), tok, int(d)) for name, (e, tok, d) in totals.items()
    }  # int(): the lists hold floats too
    overall["gap"] = _gap(overall["train"], overall["heldout"])
    return {"prefix": prefix, "suffix": suffix, "buckets": buckets, "overall": overall, "hits": hits}
