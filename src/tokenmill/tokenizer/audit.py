"""Audit a tokenizer on held-out text: compression (bytes/token) by bucket and exact round-trip."""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer


def audit_bucket(tok: Tokenizer, texts: Iterable[str]) -> dict[str, float | int]:
    """Bytes and characters per token, and the fraction of documents that decode to themselves."""
    texts = list(texts)
    if not texts:
        return {"docs": 0, "tokens": 0, "bytes": 0, "bytes_per_token": 0.0,
                "chars_per_token": 0.0, "roundtrip_exact": 1.0}
    encs = tok.encode_batch(texts, add_special_tokens=False)
    n_tokens = sum(len(e.ids) for e in encs)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_chars = sum(len(t) for t in texts)
    decoded = tok.decode_batch([e.ids for e in encs], skip_special_tokens=False)
    exact = sum(1 for t, d in zip(texts, decoded) if t == d)
    return {
        "docs": len(texts),
        "tokens": n_tokens,
        "bytes": n_bytes,
        "bytes_per_token": n_bytes / max(n_tokens, 1),
        "chars_per_token": n_chars / max(n_tokens, 1),
        "roundtrip_exact": exact / len(texts),
    }
