import json

import numpy as np

from tokenmill.mixture.provenance import DocIds, DocSpan, SampleSource
from tokenmill.tokens.store import ShardWriter, TokenStore


def test_doc_ids_read_the_shard_map_and_spans_serialise(tmp_path):
    w = ShardWriter(tmp_path / "b" / "train-00000", np.dtype("uint16"))
    for i in range(3):
        w.add(f"doc-{i}", [5 + i, 0], n_bytes=2)
    totals = w.close()
    (tmp_path / "_meta.json").write_text(json.dumps({
        "dtype": "uint16", "vocab_size": 300, "eos_id": 0, "bos_id": 1, "pad_id": 2,
        "buckets": {"b": {"train": totals, "val": {"docs": 0, "tokens": 0, "bytes": 0}}},
        "shards": ["b/train-00000"]}))
    shard = TokenStore(tmp_path).shards("b", "train")[0]
    ids = DocIds()
    assert [ids.get("b/train-00000", shard, i) for i in (2, 0)] == ["doc-2", "doc-0"]
    span = DocSpan("b", "b/train-00000", 1, "doc-1", 0, 2, 0, 0)
    src = SampleSource(step=1, rank=0, micro=0, row=0, phase="main", bucket="b", sample=0, spans=(span,))
    assert src.to_dict()["spans"][0]["doc_id"] == "doc-1"
