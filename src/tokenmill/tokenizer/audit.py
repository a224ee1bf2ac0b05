"""Audit a tokenizer on held-out text (how it splits terms, bytes per token, unknowns).

Per bucket:
  bytes_per_token, chars_per_token   compression (UTF-8 bytes, characters per token)
  tokens_per_word                    fertility: tokens per whitespace-separated word
  byte_fallback_rate                 share of tokens that are one raw byte >= 0x80 on its own: a
                                     piece of a multi-byte character the vocabulary has no merge
                                     for (the byte-level BPE counterpart of SentencePiece's
                                     <0xNN> byte fallback); ASCII single bytes are whole
                                     characters and do not count
  partial_char_rate                  share of tokens whose bytes are not valid UTF-8 on their own
                                     (fallback bytes plus merged pieces of a character)
  roundtrip_exact                    share of documents that decode back to exactly themselves
And for the whole tokenizer, how each key term is split: its tokens alone and after a space
(the form a word takes inside a sentence).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from tokenizers import Tokenizer

from tokenmill.tokenizer.bpe import token_bytes


def _is_valid_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def token_classes(tok: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """Per id: (is a lone non-ASCII byte, is not valid UTF-8 alone)."""
    pieces = token_bytes(tok)
    fallback = np.array([len(p) == 1 and p[0] >= 0x80 for p in pieces], dtype=bool)
    partial = np.array([not _is_valid_utf8(p) for p in pieces], dtype=bool)
    return fallback, partial


def audit_bucket(tok: Tokenizer, texts: Iterable[str]) -> dict[str, float | int]:
    """Compression, fertility, byte fallback and exact round-trip of a bucket's texts."""
    texts = list(texts)
    if not texts:
        return {
            "docs": 0,
            "tokens": 0,
            "bytes": 0,
            "words": 0,
            "bytes_per_token": 0.0,
            "chars_per_token": 0.0,
            "tokens_per_word": 0.0,
            "byte_fallback_rate": 0.0,
            "partial_char_rate": 0.0,
            "roundtrip_exact": 1.0,
        }
    tok.encode_special_tokens = True
    encs = tok.encode_batch(texts, add_special_tokens=False)
    ids = np.fromiter((i for e in encs for i in e.ids), dtype=np.int64)
    counts = np.bincount(ids, minlength=tok.get_vocab_size())
    fallback, partial = token_classes(tok)
    n_tokens = int(ids.size)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_chars = sum(len(t) for t in texts)
    n_words = sum(len(t.split()) for t in texts)
    decoded = tok.decode_batch([e.ids for e in encs], skip_special_tokens=False)
    exact = sum(1 for t, d in zip(texts, decoded) if t == d)
    return {
        "docs": len(texts),
        "tokens": n_tokens,
        "bytes": n_bytes,
        "words": n_words,
        "bytes_per_token": n_bytes / max(n_tokens, 1),
        "chars_per_token": n_chars / max(n_tokens, 1),
        "tokens_per_word": n_tokens / max(n_words, 1),
        "byte_fallback_rate": int(counts[fallback].sum()) / max(n_tokens, 1),
        "partial_char_rate": int(counts[partial].sum()) / max(n_tokens, 1),
        "roundtrip_exact": exact / len(texts),
    }


def _pieces(tok: Tokenizer, text: str, pieces: list[bytes]) -> list[str]:
    # A piece that is part of a character shows its bytes escaped, e.g. '\xe6'.
    return [pieces[i].decode("utf-8", errors="backslashreplace") for i in tok.encode(text, add_special_tokens=False).ids]


def key_term_splits(tok: Tokenizer, terms: Iterable[str]) -> dict[str, dict[str, list[str]]]:
    """term -> {"tokens": pieces of the term alone, "spaced": pieces of ' ' + term}."""
    tok.encode_special_tokens = True
    pieces = token_bytes(tok)
    return {t: {"tokens": _pieces(tok, t, pieces), "spaced": _pieces(tok, " " + t, pieces)} for t in terms}
