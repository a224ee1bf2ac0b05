import numpy as np

from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokenizer.special import EOS_ID
from tokenmill.tokenizer.stage import run_tokenizer
from tokenmill.tokens.curated import iter_documents
from tokenmill.tokens.split import heldout_ids
from tokenmill.tokens.store import TokenStore
from tokenmill.tokens.tokenize import run_tokenize


def test_every_document_lands_once_decodes_back_and_ends_with_eos(curated_run):
    run_tokenizer(curated_run)
    run_tokenize(curated_run)
    store = TokenStore(curated_run.sub("tokens"))
    tok = load_tokenizer(curated_run.sub("tokenizer", "tokenizer.json"))
    assert store.dtype == np.uint16 and store.eos_id == EOS_ID
    assert not curated_run.sub("tokens.tmp").exists()
    for bucket in ("code", "prose"):
        source = dict(iter_documents(curated_run.sub("curated"), bucket))
        held = heldout_ids(list(source), 0.1, 1, curated_run.config.seed)
        seen = {}
        for split in ("train", "val"):
            for shard in store.shards(bucket, split):
                table = shard.doc_table().to_pylist()
                for i in range(shard.n_docs):
                    ids = shard.doc(i)
                    assert ids[-1] == EOS_ID and EOS_ID not in ids[:-1]
                    doc_id = table[i]["id"]
                    assert (split == "val") == (doc_id in held)
                    seen[doc_id] = tok.decode(ids[:-1].tolist())
                    assert table[i]["n_bytes"] == len(source[doc_id].encode())
        assert seen == source
        meta = store.meta["buckets"][bucket]
        assert meta["train"]["tokens"] + meta["val"]["tokens"] == sum(
            len(tok.encode(t, add_special_tokens=False).ids) + 1 for t in source.values())


def test_small_shards_rotate_and_locate_maps_back(curated_run):
    curated_run.config.tokenize.shard_tokens = 2000
    run_tokenizer(curated_run)
    run_tokenize(curated_run)
    store = TokenStore(curated_run.sub("tokens"))
    shards = store.shards("prose", "train")
    assert len(shards) > 1
    s = max(shards, key=lambda sh: sh.n_docs)
    last = s.n_docs - 1
    pos = int(s.offsets[last]) + 5
    assert s.locate(pos) == (last, 5)
    assert s.tokens[pos] == s.doc(last)[5]
    assert s.locate(0) == (0, 0)
