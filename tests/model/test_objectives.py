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


# --------------------------------------------------------------------------- packed batches
from dataclasses import dataclass  # noqa: E402

from tokenmill.model.objectives import clm_loss_batch, token_nll_batch  # noqa: E402
from tokenmill.model.transformer import document_positions  # noqa: E402


@dataclass
class Packed:
    """Stands in for the loader's Batch: the objectives only read these attributes."""
    tokens: torch.Tensor
    positions: torch.Tensor | None = None
    segments: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None


class PackedBigram(Bigram):
    """A Bigram that accepts (and records) the packing arguments."""

    def __init__(self, V: int, seed: int = 0):
        super().__init__(V, seed)
        self.kwargs: list[dict] = []

    def forward(self, idx, positions=None, segments=None):
        self.kwargs.append({"positions": positions, "segments": segments})
        return super().forward(idx)


class PerPositionLogits(torch.nn.Module):
    """logits[b, t] = P[t]: target t's loss depends on row t of P and nothing else."""

    def __init__(self, T: int, V: int):
        super().__init__()
        self.P = torch.nn.Parameter(torch.randn(T, V, generator=torch.Generator().manual_seed(0)))

    def forward(self, idx, positions=None, segments=None):
        return self.P.unsqueeze(0).expand(idx.shape[0], -1, -1)


TOKENS = torch.tensor([[1, 4, 4, 9, 0, 3], [7, 2, 10, 5, 5, 6]])
MASK = torch.tensor([[True, False, True, True, False], [False, True, True, True, True]])


def test_loss_mask_counts_exactly_the_masked_in_targets():
    model = PackedBigram(11)
    expected = by_hand(model.W, TOKENS.tolist())
    nll = token_nll_batch(model, Packed(TOKENS, loss_mask=MASK))
    assert nll.shape == (2, 5) and nll.dtype == torch.float32
    for b in range(2):
        for t in range(5):
            want = expected[b][t] if MASK[b, t] else 0.0
            assert float(nll[b, t]) == pytest.approx(want, rel=1e-5, abs=0)
    counted = [expected[b][t] for b in range(2) for t in range(5) if MASK[b, t]]
    loss = clm_loss_batch(model, Packed(TOKENS, loss_mask=MASK))
    assert float(loss) == pytest.approx(sum(counted) / len(counted), rel=1e-5)
    # the all-counted mean differs, so a mask that is silently ignored would be caught
    assert float(loss) != pytest.approx(float(clm_loss(model, TOKENS)), rel=1e-3)


def test_masked_out_targets_can_be_anything():
    model = PerPositionLogits(5, 11)  # inputs do not matter, so only the targets change below
    other = TOKENS.clone()
    other[:, 1:][~MASK] = (other[:, 1:][~MASK] + 3) % 11  # change only uncounted targets
    a = clm_loss_batch(model, Packed(TOKENS, loss_mask=MASK))
    assert torch.equal(a, clm_loss_batch(model, Packed(other, loss_mask=MASK)))
    counted = TOKENS.clone()
    counted[0, 1] = (counted[0, 1] + 3) % 11  # target 0 of row 0 counts
    assert not torch.equal(a, clm_loss_batch(model, Packed(counted, loss_mask=MASK)))


def test_model_reads_the_shifted_inputs_with_the_batch_positions_and_segments():
    model = PackedBigram(11)
    seg = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
    pos = document_positions(seg)
    clm_loss_batch(model, Packed(TOKENS, pos, seg, MASK))
    assert torch.equal(model.seen[-1], TOKENS[:, :-1])
    assert model.kwargs[-1]["positions"] is pos and model.kwargs[-1]["segments"] is seg
    # an unpacked batch calls model(inputs) alone and equals clm_loss
    assert float(clm_loss_batch(Bigram(11), Packed(TOKENS))) == pytest.approx(float(clm_loss(Bigram(11), TOKENS)))


def test_gradients_come_only_from_counted_targets():
    model = PerPositionLogits(5, 11)
    clm_loss_batch(model, Packed(TOKENS, loss_mask=MASK)).backward()
    grad_rows = model.P.grad.abs().sum(-1) > 0
    assert torch.equal(grad_rows, MASK.any(0))  # position 0..4: [T, T, T, T, T] from the union
    model.P.grad = None
    one_row = Packed(TOKENS[:1], loss_mask=MASK[:1])
    clm_loss_batch(model, one_row).backward()
    assert torch.equal(model.P.grad.abs().sum(-1) > 0, MASK[0])
    assert torch.count_nonzero(model.P.grad[~MASK[0]]) == 0


def test_an_all_masked_batch_gives_zero_loss_and_zero_gradients():
    model = PerPositionLogits(5, 11)
    loss = clm_loss_batch(model, Packed(TOKENS, loss_mask=torch.zeros(2, 5, dtype=torch.bool)))
    loss.backward()
    assert loss.item() == 0.0 and torch.count_nonzero(model.P.grad) == 0


def test_packed_transformer_loss_equals_the_documents_scored_alone():
    """A packed row, with cross-document targets masked, scores each document as if alone."""
    m = Transformer(ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=16),
                    generator=torch.Generator().manual_seed(0)).eval()
    g = torch.Generator().manual_seed(3)
    docs = [torch.randint(0, 50, (n,), generator=g) for n in (4, 7, 5)]
    tokens = torch.cat(docs).unsqueeze(0)  # [1, 16] = T + 1 with T = 15
    seg = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)]).unsqueeze(0)[:, :-1]
    loss_mask = torch.ones(1, 15, dtype=torch.bool)
    for end in (4, 11):  # the last token of a document does not predict the next one's first
        loss_mask[0, end - 1] = False
    batch = Packed(tokens, document_positions(seg), seg, loss_mask)
    with torch.no_grad():
        nll = token_nll_batch(m, batch)
        alone = torch.cat([token_nll(m, d.unsqueeze(0)).flatten() for d in docs])
        torch.testing.assert_close(nll[loss_mask], alone, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(clm_loss_batch(m, batch), alone.mean(), rtol=1e-5, atol=1e-6)


def test_batch_fields_are_validated():
    model = PackedBigram(11)
    with pytest.raises(ValueError, match="loss_mask must have shape"):
        clm_loss_batch(model, Packed(TOKENS, loss_mask=torch.ones(2, 6, dtype=torch.bool)))
    with pytest.raises(ValueError, match="bool"):
        clm_loss_batch(model, Packed(TOKENS, loss_mask=MASK.long()))
    with pytest.raises(ValueError, match="segments must have shape"):
        clm_loss_batch(model, Packed(TOKENS, segments=torch.zeros(2, 6, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"\[B, T\+1\]"):
        clm_loss_batch(model, Packed(torch.tensor([[1]])))


# --------------------------------------------------------------------------- objective dispatch
from types import SimpleNamespace  # noqa: E402

from tokenmill.config import TrainConfig  # noqa: E402
from tokenmill.model.objectives import IGNORE, objective_loss  # noqa: E402
from tokenmill.train.trainer import step_loss  # noqa: E402


class MaskedBigram(Bigram):
    """A Bigram that takes (and records) an attention mask; its logits ignore it."""

    def __init__(self, V: int, seed: int = 0):
        super().__init__(V, seed)
        self.config = SimpleNamespace(vocab_size=V)
        self.masks: list[torch.Tensor] = []

    def forward(self, idx, positions=None, segments=None, attn_mask=None):
        self.masks.append(attn_mask)
        return super().forward(idx)


def _packed(B: int = 3, T1: int = 41, V: int = 60) -> Packed:
    tokens = torch.randint(36, V, (B, T1), generator=torch.Generator().manual_seed(1))
    return Packed(tokens, loss_mask=torch.ones(B, T1 - 1, dtype=torch.bool))


def test_clm_objective_is_exactly_clm_loss_batch():
    model, batch = PackedBigram(60), _packed()
    assert torch.equal(objective_loss(model, batch, TrainConfig(), 0, 1, 0), clm_loss_batch(model, batch))


def test_prefix_lm_objective_scores_exactly_the_suffix_by_hand():
    model, batch = MaskedBigram(60), _packed(B=2, T1=9)
    tc = TrainConfig(objective="prefix_lm", prefix_fraction=0.5)  # P = 4 of T = 8
    loss = objective_loss(model, batch, tc, seed=0, step=0, micro=0)
    hand = by_hand(model.W, batch.tokens.tolist())
    scored = [v for row in hand for v in row[3:]]  # targets t >= P-1
    assert math.isclose(float(loss), sum(scored) / len(scored), rel_tol=1e-5)
    assert model.masks[-1].shape == (2, 8, 8) and model.masks[-1].dtype == torch.bool


def test_mlm_objective_is_deterministic_per_seed_step_micro():
    model, batch = MaskedBigram(60), _packed()
    tc = TrainConfig(objective="mlm")
    a = objective_loss(model, batch, tc, seed=3, step=5, micro=1)
    assert torch.equal(a, objective_loss(model, batch, tc, seed=3, step=5, micro=1))
    assert not torch.equal(a, objective_loss(model, batch, tc, seed=3, step=6, micro=1))
    assert model.masks[-1].all()  # no segments: fully bidirectional


class _FakeLoader:
    world_size = 1  # one process: step_loss reduces nothing across ranks

    def __init__(self, batches):
        self.batches = batches

    def batch(self, step, micro):
        from tokenmill.mixture.packing import Batch
        b = self.batches[micro]
        return Batch(b.tokens, None, None, b.loss_mask, step, micro)

    def n_targets(self, step):
        return sum(int(b.loss_mask.sum()) for b in self.batches)


def test_step_loss_routes_by_objective_and_keeps_clm():
    model = MaskedBigram(60)
    batches = [_packed(B=2, T1=17), _packed(B=2, T1=17)]
    batches[1].tokens = batches[1].tokens.flip(1)
    loader = _FakeLoader(batches)
    cpu = torch.device("cpu")
    clm, _ = step_loss(model, loader, 1, 2, cpu, torch.float32, backward=False)
    assert clm == step_loss(model, loader, 1, 2, cpu, torch.float32, backward=False, tc=TrainConfig())[0]
    assert math.isclose(clm, float(sum(token_nll_batch(model, b).sum() for b in batches)) / 64, rel_tol=1e-6)
    tc = TrainConfig(objective="span")
    span, _ = step_loss(model, loader, 1, 2, cpu, torch.float32, backward=False, tc=tc, seed=4)
    want = sum(float(objective_loss(model, loader.batch(1, m), tc, 4, 1, m)) for m in range(2)) / 2
    assert math.isclose(span, want, rel_tol=1e-6)
    assert IGNORE == -100
