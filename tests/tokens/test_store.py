import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.tokens.store import ShardWriter, TokenStore, TokenStoreError, token_dtype


def _store(tmp_path, docs, vocab=1000):
    dtype = token_dtype(vocab)
    w = ShardWriter(tmp_path / "b" / "train-00000", dtype)
    for i, d in enumerate(docs):
        w.add(f"id{i}", d, n_bytes=3 * len(d))
    totals = w.close()
    meta = {"dtype": dtype.name, "vocab_size": vocab, "eos_id": 0, "bos_id": 1, "pad_id": 2,
            "buckets": {"b": {"train": totals, "val": {"docs": 0, "tokens": 0, "bytes": 0}}},
            "shards": ["b/train-00000"]}
    (tmp_path / "_meta.json").write_text(json.dumps(meta))
    return TokenStore(tmp_path), totals


def test_dtype_choice():
    assert token_dtype(65535) == np.uint16 and token_dtype(65536) == np.uint32


def test_roundtrip_offsets_and_doc_table(tmp_path):
    docs = [[5, 6, 7, 0], [8, 0], [9, 9, 9, 9, 9, 0]]
    store, totals = _store(tmp_path, docs)
    assert totals == {"docs": 3, "tokens": 12, "bytes": 36}
    (shard,) = store.shards("b", "train")
    assert shard.offsets.tolist() == [0, 4, 6, 12]
    assert [shard.doc(i).tolist() for i in range(3)] == docs
    assert shard.doc_table().column("id").to_pylist() == ["id0", "id1", "id2"]
    assert shard.locate(5) == (1, 1) and shard.locate(6) == (2, 0)
    with pytest.raises(IndexError):
        shard.locate(12)
    assert not list(tmp_path.rglob("*.tmp"))


def test_large_vocab_uses_uint32(tmp_path):
    store, _ = _store(tmp_path, [[70000, 0]], vocab=80000)
    assert store.shards("b", "train")[0].doc(0).tolist() == [70000, 0]


def test_truncated_bin_is_detected(tmp_path):
    _store(tmp_path, [[5, 6, 0]])
    binf = tmp_path / "b" / "train-00000.bin"
    binf.write_bytes(binf.read_bytes()[:-2])
    with pytest.raises(TokenStoreError, match=r"train-00000\.bin: 4 bytes, index .*train-00000\.idx says 6"):
        TokenStore(tmp_path)


def test_missing_store_message(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenmill tokenize"):
        TokenStore(tmp_path)


def _corrupt(tmp_path, fn):
    _store(tmp_path, [[5, 6, 0], [7, 0], [8, 8, 0]])
    fn(tmp_path / "b" / "train-00000")


def test_non_monotonic_index_is_named(tmp_path):
    def swap(prefix):
        np.array([0, 3, 1, 7], dtype=np.int64).tofile(prefix.with_suffix(".idx"))
    _corrupt(tmp_path, swap)
    with pytest.raises(TokenStoreError, match=r"train-00000\.idx: offsets decrease at document 1"):
        TokenStore(tmp_path)


def test_truncated_index_is_named(tmp_path):
    def cut(prefix):
        idx = prefix.with_suffix(".idx")
        idx.write_bytes(idx.read_bytes()[:-3])
    _corrupt(tmp_path, cut)
    with pytest.raises(TokenStoreError, match=r"train-00000\.idx: 29 bytes"):
        TokenStore(tmp_path)


def test_missing_or_short_doc_map_is_named(tmp_path):
    _corrupt(tmp_path, lambda prefix: prefix.with_name("train-00000.docs.parquet").unlink())
    with pytest.raises(TokenStoreError, match=r"train-00000\.docs\.parquet: missing"):
        TokenStore(tmp_path)
    def short(prefix):
        pq.write_table(pa.table({"id": ["x"]}), prefix.with_name("train-00000.docs.parquet"))
    _corrupt(tmp_path, short)
    with pytest.raises(TokenStoreError, match=r"docs\.parquet: 1 document rows, index .* has 3"):
        TokenStore(tmp_path)


def test_missing_bin_is_named(tmp_path):
    _corrupt(tmp_path, lambda prefix: prefix.with_suffix(".bin").unlink())
    with pytest.raises(TokenStoreError, match=r"train-00000\.bin: missing"):
        TokenStore(tmp_path)


def _with_hash(root, sha):
    meta = json.loads((root / "_meta.json").read_text())
    (root / "_meta.json").write_text(json.dumps({**meta, "tokenizer_sha256": sha}))


def test_store_of_another_tokenizer_is_refused(tmp_path):
    _store(tmp_path, [[5, 0]])
    _with_hash(tmp_path, "a" * 64)
    assert TokenStore(tmp_path, expected_tokenizer_hash="a" * 64).tokenizer_sha256 == "a" * 64
    with pytest.raises(TokenStoreError, match=f"{'a' * 64}.*{'b' * 64}.*tokenmill tokenize"):
        TokenStore(tmp_path, expected_tokenizer_hash="b" * 64)


def test_run_tokenizer_beside_the_store_is_checked(tmp_path):
    root = tmp_path / "tokens"
    _store(root, [[5, 0]])
    tok = tmp_path / "tokenizer" / "tokenizer.json"
    tok.parent.mkdir()
    tok.write_text("{}")
    TokenStore(root)  # no hash recorded: nothing to compare
    _with_hash(root, hashlib.sha256(b"{}").hexdigest())
    TokenStore(root)
    tok.write_text("{ }")
    with pytest.raises(TokenStoreError, match=r"tokenizer\.json has sha256 " + hashlib.sha256(b"{ }").hexdigest()):
        TokenStore(root)


def _poke(bin_path, position, value, dtype):
    """Overwrite the token at `position` of a .bin in place (the index and doc map stay valid)."""
    arr = np.memmap(bin_path, dtype=dtype, mode="r+")
    arr[position] = value
    arr.flush()
    del arr


def test_token_id_past_the_vocabulary_is_named_with_file_and_offset(tmp_path):
    docs = [[5, 6, 7, 0], [8, 0], [9, 9, 9, 9, 9, 0]]
    store, _ = _store(tmp_path, docs, vocab=1000)
    bin_path = tmp_path / "b" / "train-00000.bin"
    _poke(bin_path, 8, 1000, np.uint16)  # document 2, its third token: exactly the vocabulary size
    (shard,) = TokenStore(tmp_path).shards("b", "train")
    assert shard.doc(0).tolist() == docs[0] and shard.doc(1).tolist() == docs[1]  # other documents still read
    with pytest.raises(TokenStoreError) as err:
        shard.doc(2)
    assert str(err.value) == (
        f"{bin_path}: token id 1000 at token 8 (byte offset 16; document 2, token 2) is not below the vocabulary "
        f"size 1000 of {tmp_path / '_meta.json'}; the shard is corrupt: rerun `tokenmill tokenize CONFIG`"
    )
    _poke(bin_path, 8, 999, np.uint16)  # the largest id the vocabulary has is fine
    assert shard.doc(2).tolist() == [9, 9, 999, 9, 9, 0]
