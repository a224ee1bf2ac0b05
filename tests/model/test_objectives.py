import math

import pytest
import torch

from tokenmill.config import ModelConfig
from tokenmill.model.objectives import clm_loss, token_nll
from tokenmill.model.transformer import Transformer


class Bigram(torch.nn.Module):
    """logits[b, t] = W[idx[b, t]]: a model whose output is a known function of its input.
    It also records what it was fed, to check the model never sees the last token."""

    def __init__(self, V: int, seed: int = 0, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.W = torch.randn(V, V, generator=torch.Generator().manual_seed(seed)) * 2
        self.dtype = dtype
        self.seen: list[torch.Tensor] = []

    def forward(self, idx):
        self.seen.append(idx.clone())
        return self.W[idx].to(self.dtype)


def by_hand(W: torch.Tensor, tokens: list[list[int]]) -> list[list[float]]:
    """-log softmax(W[x_t])[x_{t+1}] with plain Python math."""
    out = []
    for row in tokens:
        nll = []
        for t in range(len(row) - 1):
            logits = [float(v) for v in W[row[t]]]
            m = max(logits)
            logz = m + math.log(sum(math.exp(v - m) for v in logits))
            nll.append(logz - logits[row[t + 1]])
        out.append(nll)
    return out


def test_clm_loss_and_token_nll_equal_the_hand_computed_values():
    V = 11
    model = Bigram(V)
    tokens = torch.tensor([[1, 4, 4, 9, 0, 3], [7, 2, 10, 5, 5, 6]])
    expected = by_hand(model.W, tokens.tolist())
    nll = token_nll(model, tokens)
    assert nll.shape == (2, 5) and nll.dtype == torch.float32
    for b in range(2):
        for t in range(5):
            assert float(nll[b, t]) == pytest.approx(expected[b][t], rel=1e-5)
    mean = sum(sum(r) for r in expected) / 10
    assert float(clm_loss(model, tokens)) == pytest.approx(mean, rel=1e-5)
    # an off-by-one (targets = inputs, or targets shifted twice) gives a different value
    wrong = by_hand(model.W, [[r[0]] + r[:-1] for r in tokens.tolist()])
    assert sum(sum(r) for r in wrong) / 10 != pytest.approx(mean, rel=1e-3)
    # the model saw tokens[:, :-1] and nothing else
    assert all(torch.equal(s, tokens[:, :-1]) for s in model.seen)


def test_loss_is_fp32_even_for_bf16_logits():
    model = Bigram(7, dtype=torch.bfloat16)
    tokens = torch.tensor([[1, 2, 3, 4]])
    assert clm_loss(model, tokens).dtype == torch.float32
    assert token_nll(model, tokens).dtype == torch.float32


def test_token_nll_mean_is_clm_loss_on_a_transformer():
    m = Transformer(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=2, max_seq_len=16),
                    generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 50, (3, 17), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(token_nll(m, tokens).mean(), clm_loss(m, tokens))
    with torch.no_grad():
        assert float(clm_loss(m, tokens)) == pytest.approx(math.log(50), rel=0.05)  # untrained ≈ uniform


def test_rejects_batches_without_a_target():
    with pytest.raises(ValueError, match=r"\[B, T\+1\]"):
        clm_loss(Bigram(5), torch.tensor([[1]]))
    with pytest.raises(ValueError):
        token_nll(Bigram(5), torch.tensor([1, 2, 3]))
