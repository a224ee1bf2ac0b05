"""Sampling: every document seeded by (seed, index) alone — the same seed gives the same
documents for any batch size or count — and prompts taken from real documents."""

from __future__ import annotations

import pytest
import torch

from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.synth.sample import pick_prompts, sample_documents
from tokenmill.tokens.store import TokenStore

from tests.conftest import TINY_EOS, TINY_VOCAB, write_tiny_store

OPTIONS = {"temperature": 1.0, "top_k": None, "top_p": 0.95, "max_new_tokens": 12, "min_new_tokens": 0}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> TokenStore:
    root = tmp_path_factory.mktemp("store") / "tokens"
    write_tiny_store(root)
    return TokenStore(root)


@pytest.fixture(scope="module")
def model() -> Transformer:
    cfg = ModelConfig(vocab_size=TINY_VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=32)
    return Transformer(cfg, generator=torch.Generator().manual_seed(0)).eval()


def draw(model, store, n: int, seed: int, batch_size: int, k: int = 3) -> list[tuple[list[int], list[int], str]]:
    prompts = pick_prompts(store, n, k, ["a", "b"], "train", seed)
    docs = sample_documents(model, prompts, seed=seed, batch_size=batch_size, stop_id=TINY_EOS, max_context=32,
                            device=torch.device("cpu"), options=OPTIONS)
    return [(d.prompt.tokens, d.tokens, d.stop) for d in docs]


def test_same_seed_same_documents_for_any_batch_size_or_count(model, store):
    a = draw(model, store, 10, seed=5, batch_size=4)
    assert a == draw(model, store, 10, seed=5, batch_size=4)
    assert a == draw(model, store, 10, seed=5, batch_size=1) == draw(model, store, 10, seed=5, batch_size=10)
    assert a[:6] == draw(model, store, 6, seed=5, batch_size=3)  # document i does not depend on how many
    assert a != draw(model, store, 10, seed=6, batch_size=4)
    assert all(TINY_EOS not in toks for _, toks, _ in a)  # the stop token is not part of a document


def test_prompts_are_the_first_tokens_of_real_documents_with_their_ids(store):
    prompts = pick_prompts(store, 30, 4, ["b"], "train", seed=1)
    docs = {i: shard.doc(j)[:4].tolist() for shard in store.shards("b", "train")
            for j, i in enumerate(shard.doc_table()["id"].to_pylist())}
    assert all(p.bucket == "b" and p.tokens == docs[p.doc] for p in prompts)
    assert len({p.doc for p in prompts}) > 10  # spread over the pool, not one document
    assert prompts == pick_prompts(store, 30, 4, ["b"], "train", seed=1)
    assert pick_prompts(store, 3, 0, ["b"], "train", seed=1)[0].tokens == [TINY_EOS]  # unconditional
    with pytest.raises(ValueError, match="more than 500 tokens"):
        pick_prompts(store, 3, 500, ["b"], "train", seed=1)
