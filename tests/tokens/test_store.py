import json

import numpy as np
import pytest

from tokenmill.tokens.store import ShardWriter, TokenStore, token_dtype


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
    with pytest.raises(ValueError, match="index"):
        TokenStore(tmp_path)


def test_missing_store_message(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenmill tokenize"):
        TokenStore(tmp_path)
