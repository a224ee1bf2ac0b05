"""A fast encoder for the trained tokenizer: `tiktoken` running the same merges and pre-tokenizer.

Why: HF `tokenizers` encodes about 2 MB/s of text per core; tiktoken's BPE core, given the same
byte-level ranks and the GPT-2 split pattern that HF's `ByteLevel(use_regex=True)` uses, is
several times faster. Its algorithm (repeatedly merge the adjacent pair whose concatenation has
the lowest rank) matches HF's merge-list BPE when ranks follow merge order, which is how HF
numbers trained tokens — but not provably for every input, so the tokenizer stage compares both on
every document of the training sample and records the result (`tokenizer/fast_encode.json`);
tokenize uses tiktoken only for a tokenizer verified identical and falls back to HF otherwise.

The Encoding is built here from tokenizer.json: nothing is downloaded, no named encoding loaded.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Protocol

import numpy as np
import tiktoken
from tokenizers import Tokenizer

from tokenmill import json_limits
from tokenmill.runs import atomic_write_text
from tokenmill.tokenizer.bpe import load_tokenizer, token_bytes, tokenizer_sha256

log = logging.getLogger(__name__)

# The split HF's ByteLevel pre-tokenizer applies when use_regex=True (GPT-2's pattern).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
RECORD_NAME = "fast_encode.json"


class FastEncodeUnsupported(ValueError):
    """The tokenizer is not a plain byte-level BPE that tiktoken can run with the same result."""


def _merge_pair(merge: str | list[str]) -> tuple[str, str]:
    # tokenizer.json writes merges as ["a", "b"] (tokenizers >= 0.20) or "a b" (older files).
    a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
    return a, b


def _check_supported(spec: dict[str, Any]) -> None:
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    problems = []
    if model.get("type") != "BPE":
        problems.append(f"model {model.get('type')}")
    if model.get("dropout") or model.get("ignore_merges") or model.get("byte_fallback"):
        problems.append("BPE dropout / ignore_merges / byte_fallback")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        problems.append("subword prefix/suffix")
    if spec.get("normalizer") is not None:
        problems.append("a normalizer")
    if (pre.get("type"), pre.get("add_prefix_space"), pre.get("use_regex")) != ("ByteLevel", False, True):
        problems.append(f"pre-tokenizer {pre}")
    if problems:
        raise FastEncodeUnsupported("not a plain byte-level BPE: " + ", ".join(problems))


def byte_level_encoding(tok: Tokenizer) -> tiktoken.Encoding:
    """A tiktoken Encoding with the tokenizer's ids: rank of a token's bytes = its id."""
    spec = json.loads(tok.to_str())
    _check_supported(spec)
    vocab: dict[str, int] = spec["model"]["vocab"]
    # tiktoken ranks a pair by the id of the token it forms; HF by the merge's position. They
    # agree only if merge results carry increasing ids in merge order.
    merged = [vocab.get(a + b, -1) for a, b in map(_merge_pair, spec["model"]["merges"])]
    if min(merged, default=0) < 0 or any(x >= y for x, y in zip(merged, merged[1:])):
        raise FastEncodeUnsupported("merge results do not carry increasing ids in merge order")
    pieces = token_bytes(tok)
    specials = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
    special_ids = set(specials.values())
    ranks = {pieces[i]: i for i in range(len(pieces)) if i not in special_ids}
    if len(ranks) + len(specials) != tok.get_vocab_size():
        raise FastEncodeUnsupported("two tokens have the same bytes")
    return tiktoken.Encoding(
        name="tokenmill-bpe",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=specials,
        explicit_n_vocab=tok.get_vocab_size(),
    )


class Encoder(Protocol):
    """Token ids of texts, special-token strings in the text encoded as ordinary text."""

    name: str

    def encode(self, texts: list[str]) -> list[np.ndarray]: ...


@dataclass
class HFEncoder:
    tok: Tokenizer
    name: str = "hf"

    def __post_init__(self) -> None:
        # Never turn `<|endoftext|>` in data into EOS. Set once here: setting it while another
        # thread encodes with the same tokenizer would fail.
        self.tok.encode_special_tokens = True

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.uint32) for e in self.tok.encode_batch(texts, add_special_tokens=False)]


@dataclass
class TiktokenEncoder:
    """tiktoken, optionally on several threads: its encode releases the GIL (measured 1.9x on 2
    threads), so one process uses several cores without paying for a process start."""

    enc: tiktoken.Encoding
    threads: int = 1
    name: str = "tiktoken"

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None

    def _one(self, text: str) -> np.ndarray:
        # allowed_special empty + disallowed_special empty: special strings are plain text.
        return self.enc.encode_to_numpy(text, allowed_special=set(), disallowed_special=())

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        if self._pool is None or len(texts) < 2:
            return [self._one(t) for t in texts]
        # Longest first, so one long document does not finish alone at the end of the batch.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out: list[np.ndarray] = [None] * len(texts)  # type: ignore[list-item]
        for i, ids in zip(order, self._pool.map(self._one, [texts[i] for i in order])):
            out[i] = ids
        return out


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for t in texts:
        batch.append(t)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def compare_encoders(reference: Encoder, candidate: Encoder, texts: Iterable[str], batch_docs: int = 256) -> dict[str, Any]:
    """Encode every text with both; count documents whose ids differ, locate the first."""
    docs = n_bytes = bad = 0
    first: dict[str, int] | None = None
    for batch in _batches(texts, batch_docs):
        for k, (a, b) in enumerate(zip(reference.encode(batch), candidate.encode(batch))):
            if a.shape != b.shape or not np.array_equal(a, b):
                bad += 1
                if first is None:
                    n = min(a.size, b.size)
                    diff = np.flatnonzero(a[:n] != b[:n])
                    first = {"doc": docs + k, "token": int(diff[0]) if diff.size else n}
        docs += len(batch)
        n_bytes += sum(len(t.encode("utf-8")) for t in batch)
    return {"docs": docs, "bytes": n_bytes, "mismatched_docs": bad, "first_mismatch": first}


def verify_fast_encoder(tok: Tokenizer, tokenizer_path: Path, texts: Iterable[str]) -> dict[str, Any]:
    """Compare tiktoken with HF on `texts`; the record tokenize reads to choose its encoder."""
    record: dict[str, Any] = {
        "tokenizer_sha256": tokenizer_sha256(tokenizer_path),
        "encoder": "tiktoken",
        "tiktoken_version": tiktoken.__version__,
        "identical": False,
    }
    try:
        fast = TiktokenEncoder(byte_level_encoding(tok))
    except FastEncodeUnsupported as exc:
        record["unsupported"] = str(exc)
        return record
    record.update(compare_encoders(HFEncoder(tok), fast, texts))
    record["identical"] = record["mismatched_docs"] == 0
    return record


def write_record(record: dict[str, Any], tokenizer_dir: Path) -> None:
    atomic_write_text(tokenizer_dir / RECORD_NAME, json.dumps(record, indent=1))


def choose_encoder(tokenizer_dir: Path, mode: str = "auto") -> tuple[str, str | None]:
    """("tiktoken" | "hf", why HF was chosen in auto mode, or None)."""
    if mode == "hf":
        return "hf", None
    path = tokenizer_dir / RECORD_NAME
    sha = tokenizer_sha256(tokenizer_dir / "tokenizer.json")
    try:
        record = json_limits.load_file(path)
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        why = f"{path} is missing or unreadable (rerun `tokenmill tokenizer train CONFIG`)"
    elif record.get("tokenizer_sha256") != sha:
        why = f"{path} was written for another tokenizer.json"
    elif not record.get("identical"):
        why = (
            f"tiktoken differs from HF on {record.get('mismatched_docs')} of {record.get('docs')} sample "
            f"documents (first: {record.get('first_mismatch')})"
            if "docs" in record
            else f"tiktoken cannot run this tokenizer: {record.get('unsupported')}"
        )
    else:
        return "tiktoken", None
    log.warning("tokenize: using HF tokenizers (slower): %s", why)
    return "hf", why


_CACHE: dict[tuple[str, str, str, int], Encoder] = {}
_CACHE_LOCK = threading.Lock()  # tokenize's runner threads share one encoder (and thread pool)


def load_encoder(tokenizer_path: Path, name: str, threads: int = 1) -> Encoder:
    """The named encoder for a tokenizer.json, built once per process (workers reuse it).
    `threads` applies to tiktoken; HF's encode_batch runs its own thread pool."""
    key = (str(tokenizer_path), tokenizer_sha256(tokenizer_path), name, threads if name == "tiktoken" else 1)
    with _CACHE_LOCK:
        if key not in _CACHE:
            tok = load_tokenizer(tokenizer_path)
            _CACHE[key] = TiktokenEncoder(byte_level_encoding(tok), threads) if name == "tiktoken" else HFEncoder(tok)
        return _CACHE[key]
