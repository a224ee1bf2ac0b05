"""Token shard store: flat memmapped token ids + int64 document offsets, per bucket and split.

Layout under `tokens/`:
  _meta.json                          dtype, vocab size, special ids, per-bucket totals, shards
  <bucket>/<split>-<k>.bin            token ids, uint16 when vocab <= 65535 else uint32
  <bucket>/<split>-<k>.idx            int64 offsets, n_docs + 1 entries; doc i is [idx[i], idx[i+1])
  <bucket>/<split>-<k>.docs.parquet   doc_index, id (curated row id), n_tokens, n_bytes

EOS closes every document, so a position in a shard maps back to (shard, document, offset) and
from the document's id to its curated row.

`_meta.json` records the sha256 of the tokenizer.json that made the store; a store opened for
another tokenizer is refused, and a shard whose files disagree (a truncated .bin, an index that is
not monotonic, a missing doc map) is refused naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import json_limits
from tokenmill.errors import UserError

SPLITS = ("train", "val")


class TokenStoreError(UserError, ValueError):
    """A token store that cannot be used as it is: corrupt, truncated or made with another tokenizer."""


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


class ShardWriter:
    """Streams documents into one shard; files appear under their final names only on close."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.prefix = prefix
        self.dtype = dtype
        prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin_tmp = prefix.with_name(prefix.name + ".bin.tmp")
        self._bin = open(self._bin_tmp, "wb")
        self._offsets: list[int] = [0]
        self._ids: list[str] = []
        self._bytes: list[int] = []

    @property
    def n_tokens(self) -> int:
        return self._offsets[-1]

    def add(self, doc_id: str, tokens: np.ndarray | list[int], n_bytes: int) -> None:
        arr = np.asarray(tokens, dtype=self.dtype)
        self._bin.write(arr.tobytes())
        self._offsets.append(self._offsets[-1] + int(arr.size))
        self._ids.append(doc_id)
        self._bytes.append(int(n_bytes))

    def close(self) -> dict[str, int]:
        self._bin.flush()
        os.fsync(self._bin.fileno())
        self._bin.close()
        offsets = np.asarray(self._offsets, dtype=np.int64)
        idx_tmp = self.prefix.with_name(self.prefix.name + ".idx.tmp")
        offsets.tofile(idx_tmp)
        lengths = np.diff(offsets)
        table = pa.table(
            {
                "doc_index": pa.array(np.arange(len(self._ids), dtype=np.int64)),
                "id": pa.array(self._ids, type=pa.string()),
                "n_tokens": pa.array(lengths, type=pa.int64()),
                "n_bytes": pa.array(self._bytes, type=pa.int64()),
            }
        )
        docs_tmp = self.prefix.with_name(self.prefix.name + ".docs.parquet.tmp")
        pq.write_table(table, docs_tmp)
        # Data before index: a reader that sees the .idx sees a complete .bin.
        os.replace(self._bin_tmp, self.prefix.with_suffix(".bin"))
        os.replace(docs_tmp, self.prefix.with_name(self.prefix.name + ".docs.parquet"))
        os.replace(idx_tmp, self.prefix.with_suffix(".idx"))
        return {"docs": len(self._ids), "tokens": int(offsets[-1]), "bytes": int(sum(self._bytes))}


@dataclass
class Shard:
    """One memmapped shard of one bucket and split."""

    bucket: str
    split: str
    prefix: Path
    dtype: np.dtype
    # ids must be below it (None: unchecked); the embedding would raise an IndexError deep in a
    # forward pass instead. Checked per document or per batch read, never by a scan at open: a
    # max over a memmapped multi-GB shard is a full read of it.
    vocab_size: int | None = None
    tokens: np.memmap = field(init=False, repr=False)
    offsets: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        bin_path, idx_path, docs_path = self.paths
        for path in (bin_path, idx_path, docs_path):
            if not path.exists():
                raise TokenStoreError(f"{path}: missing; the token store is incomplete (rerun `tokenmill tokenize CONFIG`)")
        self.offsets = _read_offsets(idx_path)
        n = int(self.offsets[-1])
        expected = n * self.dtype.itemsize
        actual = bin_path.stat().st_size
        if actual != expected:
            raise TokenStoreError(
                f"{bin_path}: {actual} bytes, index {idx_path} says {expected} "
                f"({n} tokens of {self.dtype.itemsize} bytes); the shard is truncated or corrupt"
            )
        rows = _parquet_rows(docs_path)
        if rows != self.n_docs:
            raise TokenStoreError(f"{docs_path}: {rows} document rows, index {idx_path} has {self.n_docs} documents")
        # np.memmap refuses empty files; an empty shard is a valid zero-length array.
        self.tokens = np.memmap(bin_path, dtype=self.dtype, mode="r") if n else np.zeros(0, dtype=self.dtype)  # type: ignore[assignment]

    @property
    def paths(self) -> tuple[Path, Path, Path]:
        """(.bin, .idx, .docs.parquet)."""
        return (
            self.prefix.with_suffix(".bin"),
            self.prefix.with_suffix(".idx"),
            self.prefix.with_name(self.prefix.name + ".docs.parquet"),
        )

    @property
    def n_docs(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def doc(self, i: int) -> np.ndarray:
        """Document i's tokens, every id checked against the vocabulary (one max over them)."""
        start = int(self.offsets[i])
        tokens = np.asarray(self.tokens[start : self.offsets[i + 1]])
        self.check_ids(tokens, start)
        return tokens

    def check_ids(self, tokens: np.ndarray, start: int) -> None:
        """Refuse, naming this shard and the offset, an id >= vocab_size in `tokens` (this shard's
        tokens from position `start` on)."""
        if self.vocab_size is None or not tokens.size or int(tokens.max()) < self.vocab_size:
            return
        k = int(np.argmax(tokens >= self.vocab_size))
        raise self.out_of_vocab(start + k, int(tokens[k]))

    def out_of_vocab(self, position: int, token_id: int) -> TokenStoreError:
        doc, offset = self.locate(position)
        return TokenStoreError(
            f"{self.paths[0]}: token id {token_id} at token {position} (byte offset {position * self.dtype.itemsize}; "
            f"document {doc}, token {offset}) is not below the vocabulary size {self.vocab_size} of "
            f"{self.prefix.parent.parent / '_meta.json'}; the shard is corrupt: rerun `tokenmill tokenize CONFIG`"
        )

    def doc_table(self) -> pa.Table:
        return pq.read_table(self.paths[2])

    def locate(self, position: int) -> tuple[int, int]:
        """Token position in this shard -> (document index, offset inside the document)."""
        if not 0 <= position < self.n_tokens:
            raise IndexError(f"position {position} outside shard of {self.n_tokens} tokens")
        doc = int(np.searchsorted(self.offsets, position, side="right") - 1)
        return doc, int(position - self.offsets[doc])


def _read_offsets(idx_path: Path) -> np.ndarray:
    size = idx_path.stat().st_size
    if size == 0 or size % 8:
        raise TokenStoreError(
            f"{idx_path}: {size} bytes, not a whole number (>= 1) of int64 offsets; the index is truncated or corrupt"
        )
    offsets = np.fromfile(idx_path, dtype=np.int64)
    if offsets[0] != 0:
        raise TokenStoreError(f"{idx_path}: first offset is {offsets[0]}, not 0; the index is corrupt")
    steps = np.diff(offsets)
    if steps.size and steps.min() < 0:
        doc = int(np.argmax(steps < 0))
        raise TokenStoreError(
            f"{idx_path}: offsets decrease at document {doc} ({offsets[doc]} -> {offsets[doc + 1]}); the index is corrupt"
        )
    return offsets


def _parquet_rows(path: Path) -> int:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise TokenStoreError(f"{path}: unreadable document map ({exc})") from exc


def _sibling_tokenizer_hash(root: Path) -> str | None:
    """sha256 of the run's tokenizer/tokenizer.json when the store sits in a run directory."""
    path = root.parent / "tokenizer" / "tokenizer.json"
    if not path.exists():
        return None
    from tokenmill.tokenizer.bpe import tokenizer_sha256

    return tokenizer_sha256(path)


class TokenStore:
    """Read side of `tokens/`: the meta file plus every shard, grouped by bucket and split.

    `expected_tokenizer_hash`: the sha256 of the tokenizer.json the caller encodes/decodes with;
    a store made with another one is refused. None: check against the run's own
    `tokenizer/tokenizer.json` when there is one beside `tokens/`.
    """

    def __init__(self, root: Path, expected_tokenizer_hash: str | None = None):
        self.root = Path(root)
        meta_path = self.root / "_meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{meta_path}: no token store here (run `tokenmill tokenize CONFIG`)")
        try:
            self.meta = json_limits.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON, or too deep
            raise TokenStoreError(f"{meta_path}: not valid JSON ({exc}); rerun `tokenmill tokenize CONFIG`") from exc
        self.tokenizer_sha256: str | None = self.meta.get("tokenizer_sha256")
        self._check_tokenizer(meta_path, expected_tokenizer_hash)
        self.dtype = np.dtype(self.meta["dtype"])
        self.vocab_size: int = int(self.meta["vocab_size"])
        self.eos_id: int = int(self.meta["eos_id"])
        self.bos_id: int = int(self.meta["bos_id"])
        self.pad_id: int = int(self.meta["pad_id"])
        self._shards: dict[tuple[str, str], list[Shard]] = {}
        for rel in self.meta["shards"]:
            prefix = self.root / rel
            bucket, name = prefix.parent.name, prefix.name
            split = name.split("-", 1)[0]
            shard = Shard(bucket, split, prefix, self.dtype, self.vocab_size)
            self._shards.setdefault((bucket, split), []).append(shard)

    def _check_tokenizer(self, meta_path: Path, expected: str | None) -> None:
        implicit = expected is None
        if implicit:
            expected = _sibling_tokenizer_hash(self.root)
            if expected is None or self.tokenizer_sha256 is None:
                return  # no run tokenizer to compare with, or a store that predates hashes
        if self.tokenizer_sha256 != expected:
            made = self.tokenizer_sha256 or "(not recorded)"
            using = f"{self.root.parent / 'tokenizer' / 'tokenizer.json'} has" if implicit else "expected"
            raise TokenStoreError(
                f"{meta_path}: this token store was made with tokenizer sha256 {made}, but {using} sha256 "
                f"{expected}; its token ids mean other strings. Rerun `tokenmill tokenize CONFIG` "
                "to re-encode the curated data with the current tokenizer."
            )

    @property
    def buckets(self) -> list[str]:
        return sorted(self.meta["buckets"])

    def shards(self, bucket: str, split: str) -> list[Shard]:
        return self._shards.get((bucket, split), [])

    def n_tokens(self, bucket: str, split: str) -> int:
        return sum(s.n_tokens for s in self.shards(bucket, split))

    def docs(self, bucket: str, split: str) -> list[tuple[Shard, int]]:
        """Every (shard, doc index) of a bucket and split, in store order."""
        return [(s, i) for s in self.shards(bucket, split) for i in range(s.n_docs)]
