"""Memorization audit: a lookup model that memorized the training documents, and batched greedy
decoding checked against the one-document `generate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tokenmill.config import ModelConfig
from tokenmill.eval.generate import generate
from tokenmill.eval.memorization import greedy_continue, memorization, select_docs
from tokenmill.model.transformer import Transformer
from tokenmill.tokens.store import ShardWriter, TokenStore, token_dtype

VOCAB, EOS, K = 512, 0, 5


def _store(root: Path) -> TokenStore:
    """Random documents (ids 3..511), two buckets, train + val; some too short for the audit."""
    rng = np.random.default_rng(3)
    dtype = token_dtype(VOCAB)
    meta: dict = {"dtype": dtype.name, "vocab_size": VOCAB, "eos_id": EOS, "bos_id": 1, "pad_id": 2,
                  "buckets": {}, "shards": []}
    for bucket in ("a", "b"):
        meta["buckets"][bucket] = {}
        for split in ("train", "val"):
            rel = f"{bucket}/{split}-00000"
            w = ShardWriter(root / rel, dtype)
            for i in range(9):
                length = 6 if i % 3 == 0 else int(rng.integers(20, 30))
                w.add(f"{bucket}{split}{i}", [*rng.integers(3, VOCAB, size=length).tolist(), EOS], 1)
            meta["buckets"][bucket][split] = w.close()
            meta["shards"].append(rel)
    (root / "_meta.json").write_text(json.dumps(meta))
    return TokenStore(root)


class LookupModel(torch.nn.Module):
    """Predicts the token that followed the last K tokens in a training document ([EOS] + doc);
    unseen contexts predict id 3. A memorizer by construction."""

    def __init__(self, store: TokenStore):
        super().__init__()
        self.table: dict[tuple[int, ...], int] = {}
        for bucket in store.buckets:
            for shard, i in store.docs(bucket, "train"):
                seq = [EOS, *shard.doc(i).tolist()]
                for j in range(K, len(seq)):
                    self.table.setdefault(tuple(seq[j - K: j]), seq[j])
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        out = torch.zeros(B, T, VOCAB)
        rows = idx.tolist()
        for b in range(B):
            for t in range(T):
                nxt = self.table.get(tuple(rows[b][max(0, t + 1 - K): t + 1]), 3)
                out[b, t, nxt] = 5.0
        return out


def _reference(model, store, docs_per_bucket, prefix, suffix, max_context):
    """Independent per-document computation with `generate` (greedy, temperature 0)."""
    per = {}
    for bucket in store.buckets:
        for split in ("train", "val"):
            docs = [d for s, i in store.docs(bucket, split) if len(d := s.doc(i).tolist()) >= prefix + suffix]
            docs = docs[:docs_per_bucket]
            res = []
            for d in docs:
                new = generate(model, [EOS, *d[:prefix]], suffix, max_context=max_context, temperature=0)
                res.append([a == b for a, b in zip(new, d[prefix: prefix + suffix])])
            per[bucket, split] = res
    return per


def test_memorizer_exact_on_train_not_on_heldout(tmp_path):
    store = _store(tmp_path / "tokens")
    model = LookupModel(store)
    out = memorization(model, store, torch.device("cpu"), docs_per_bucket=4, prefix=8, suffix=10,
                       max_context=64)
    ref = _reference(model, store, 4, 8, 10, 64)
    for bucket in ("a", "b"):
        b = out["buckets"][bucket]
        assert b["train"]["docs"] == b["heldout"]["docs"] == 4
        assert b["train"]["exact_match"] == 1.0 and b["train"]["token_match"] == 1.0
        assert b["heldout"]["exact_match"] == 0.0 and b["heldout"]["token_match"] < 0.2
        for split, name in (("train", "train"), ("val", "heldout")):
            rows = ref[bucket, split]
            assert b[name]["exact_match"] == pytest.approx(np.mean([all(r) for r in rows]))
            assert b[name]["token_match"] == pytest.approx(np.mean([np.mean(r) for r in rows]))
        assert b["gap"]["exact_match"] == pytest.approx(1.0)
    assert out["overall"]["train"] == {"docs": 8, "exact_match": 1.0, "token_match": 1.0}
    assert out["overall"]["gap"]["exact_match"] == pytest.approx(1.0)
    assert memorization(model, store, torch.device("cpu"), 4, 8, 10, max_context=64) == out  # deterministic
    assert model.training  # the mode it came in with is restored


def test_selection_skips_short_docs_and_empty_buckets(tmp_path):
    store = _store(tmp_path / "tokens")
    docs = select_docs(store, "a", "train", 100, 18)
    assert len(docs) == 6 and all(len(d) >= 18 for d in docs)
    out = memorization(LookupModel(store), store, torch.device("cpu"), 2, prefix=40, suffix=5)
    assert out["overall"]["train"] == {"docs": 0, "exact_match": None, "token_match": None}
    assert out["overall"]["gap"] == {"exact_match": None, "token_match": None}
    with pytest.raises(ValueError):
        memorization(LookupModel(store), store, torch.device("cpu"), 2, prefix=0, suffix=5)


@pytest.mark.parametrize("max_context", [24, 12])
def test_batched_greedy_matches_generate(max_context):
    cfg = ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=24)
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0)).eval()
    prompts = torch.randint(3, VOCAB, (5, 9), generator=torch.Generator().manual_seed(1))
    got = greedy_continue(model, prompts, 10, max_context=max_context, batch_size=2)
    want = [generate(model, p.tolist(), 10, max_context=max_context, temperature=0) for p in prompts]
    assert got.tolist() == want


def test_transformer_trained_on_one_document_memorizes_it(tmp_path):
    """A real Transformer fitted to one training document continues its prefix verbatim; on a
    held-out random document it does not."""
    rng = np.random.default_rng(7)
    root = tmp_path / "tokens"
    dtype = token_dtype(VOCAB)
    meta: dict = {"dtype": dtype.name, "vocab_size": VOCAB, "eos_id": EOS, "bos_id": 1, "pad_id": 2,
                  "buckets": {"a": {}}, "shards": []}
    docs = {}
    for split in ("train", "val"):
        w = ShardWriter(root / f"a/{split}-00000", dtype)
        docs[split] = [*rng.integers(3, VOCAB, size=27).tolist(), EOS]
        w.add(split, docs[split], 1)
        meta["buckets"]["a"][split] = w.close()
        meta["shards"].append(f"a/{split}-00000")
    (root / "_meta.json").write_text(json.dumps(meta))
    store = TokenStore(root)

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32)
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
    seq = torch.tensor([[EOS, *docs["train"]]])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = torch.nn.functional.cross_entropy(model(seq[:, :-1])[0], seq[0, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = memorization(model, store, torch.device("cpu"), docs_per_bucket=1, prefix=8, suffix=16)
    assert out["overall"]["train"] == {"docs": 1, "exact_match": 1.0, "token_match": 1.0}
    assert out["overall"]["heldout"]["exact_match"] == 0.0
    assert out["overall"]["gap"]["token_match"] > 0.8
