"""Long-context evaluation (eval/long_context.py): loss by position against an independent
computation, and the passkey probe against models whose reach is known."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from tokenmill.eval.long_context import (answer_logits, bucket_edges, long_documents, passkey, passkey_trial,
                                         position_bpb)
from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.tokens.store import TokenStore

from tests.conftest import TINY_VOCAB, write_tiny_store


def test_bucket_edges_split_at_the_trained_length():
    assert bucket_edges(1024, 4) == [0, 256, 512, 768, 1024]
    assert bucket_edges(1024, 3, trained=256) == [0, 256, 341, 683, 1024]
    assert bucket_edges(1024, 4, trained=2048) == [0, 256, 512, 768, 1024]


def test_position_bpb_equals_the_log_softmax_of_each_window(tmp_path):
    write_tiny_store(tmp_path / "tokens")
    store = TokenStore(tmp_path / "tokens")
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=TINY_VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=32)).eval()
    pieces = np.arange(TINY_VOCAB) % 3 + 1  # bytes per token id, uneven on purpose
    seq, edges = 16, [0, 4, 10, 16]
    got = position_bpb(model, store, pieces, seq, edges, max_docs=6, batch_size=4, device=torch.device("cpu"))
    rows = long_documents(store, seq, 6)
    assert got["docs"] == len(rows) == 6 and all(len(r) == seq + 1 for r in rows)
    assert {int(r[0]) for r in rows} == {store.eos_id}
    with torch.no_grad():
        x = torch.from_numpy(np.stack(rows))
        logp = model(x[:, :-1]).double().log_softmax(-1).gather(2, x[:, 1:, None]).squeeze(2).numpy()
    for b in got["buckets"]:
        nll = -logp[:, b["from"]:b["to"]].sum()
        nbytes = pieces[np.stack(rows)[:, 1 + b["from"]: 1 + b["to"]]].sum()
        assert b["tokens"] == 6 * (b["to"] - b["from"]) and b["bytes"] == nbytes
        # fp32 logits from batches of 4 (position_bpb) vs one batch of 6 here: the kernels block the
        # sums differently, so the two agree to fp32 rounding (~1e-5 seen on an AVX2 EPYC), not bitwise
        assert b["bpb"] == pytest.approx(nll / (math.log(2) * nbytes), rel=1e-4)


class _Words:
    """A word-level encoder (words and punctuation apart, as a byte-level pre-tokenizer splits
    them): one id each, given in the order first seen."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, text: str) -> list[int]:
        return [self.ids.setdefault(w, len(self.ids) + 1) for w in re.findall(r"\w+|[^\w\s]", text)]


class _Copier(nn.Module):
    """Predicts the token that followed the longest earlier match of the current suffix (an
    induction head), looking back at most `reach` tokens: the passkey's answer is right exactly
    when the key is within reach."""

    def __init__(self, vocab: int, reach: int) -> None:
        super().__init__()
        self.vocab, self.reach = vocab, reach

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        seq = idx[0].tolist()
        out = torch.zeros(1, len(seq), self.vocab)
        for t in range(len(seq)):
            best, nxt = 0, 0
            for j in range(max(0, t - self.reach), t):
                k = 0
                while k <= j and seq[j - k] == seq[t - k] and k < 8:
                    k += 1
                if k > best or (k == best and k > 0):
                    best, nxt = k, seq[j + 1]
            out[0, t, nxt] = 10.0
        return out


def test_passkey_accuracy_follows_the_models_reach():
    enc = _Words()
    ids, at, distance = passkey_trial(enc, 0, 200, 0.5, "12345")
    assert 190 < len(ids) <= 201 and ids[at] == enc.ids["12345"] and ids[at:] == [enc.ids["12345"]]
    assert ids[at - 1] == enc.ids["is"] and 0 < distance < 200 and ids[at - distance] == ids[at]
    edges = [0, 80, 201]
    vocab = 200
    for model in (_Copier(vocab, reach=80), _Copier(vocab, reach=1000)):
        got = passkey(model, enc, 0, 200, trials=8, edges=edges, device=torch.device("cpu"), seed=3)
        near = next(b for b in got["by_distance"] if b["from"] == 0)
        far = next(b for b in got["by_distance"] if b["from"] == 80)
        assert near["trials"] + far["trials"] == 8 and near["trials"] > 0 and far["trials"] > 0
        assert near["accuracy"] == 1.0
        assert far["accuracy"] == (1.0 if model.reach > 200 else 0.0)
    blind = passkey(_Copier(vocab, reach=0), enc, 0, 200, trials=4, edges=edges, device=torch.device("cpu"))
    assert blind["accuracy"] == 0.0


def test_a_length_without_room_for_filler_is_refused():
    with pytest.raises(ValueError, match="no room for filler"):
        passkey_trial(_Words(), 0, 40, 0.5, "12345")


def test_answer_logits_are_the_full_forwards_last_rows():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=TINY_VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=64)).eval()
    x = torch.randint(0, TINY_VOCAB, (1, 50), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(answer_logits(model, x, 44), model(x)[0, 44:])
    assert answer_logits(_Copier(TINY_VOCAB, 10), x, 44).shape == (6, TINY_VOCAB)
