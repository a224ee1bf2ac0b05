import math

import pytest
import torch

from tokenmill.config import ModelConfig
from tokenmill.model.moe import MoE, load_balancing_loss
from tokenmill.model.transformer import MLP, Transformer
from tokenmill.scaling.flops import param_count


def cfg(**kw) -> ModelConfig:
    base = {"vocab_size": 97, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 24,
            "n_experts": 4, "top_k": 2, "ffn_hidden": 48}
    return ModelConfig(**{**base, **kw})


def model(**kw) -> Transformer:
    return Transformer(cfg(**kw), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_token_goes_to_exactly_k_distinct_experts(k):
    moe = MoE(cfg(top_k=k), MLP)
    x = torch.randn(3, 10, 32, generator=torch.Generator().manual_seed(1))
    out = moe(x)
    assert out.shape == x.shape
    idx = moe.last_topk
    assert idx.shape == (30, k)
    assert all(len(set(row.tolist())) == k for row in idx)
    # the output is exactly the gate-weighted sum of the k chosen experts
    flat = x.reshape(-1, 32)
    probs = moe.router(flat).float().softmax(-1)
    for t in (0, 17, 29):
        chosen = idx[t].tolist()
        g = probs[t, chosen] / probs[t, chosen].sum()
        ref = sum(g[j] * moe.experts[e](flat[t]) for j, e in enumerate(chosen))
        torch.testing.assert_close(out.reshape(-1, 32)[t], ref, rtol=1e-5, atol=1e-6)
    assert float(moe.last_utilization.sum()) == pytest.approx(1.0)


def test_aux_loss_is_one_when_balanced_and_larger_for_an_imbalanced_router():
    n, N = 4, 64
    uniform = torch.full((N, n), 1.0 / n)
    balanced_idx = torch.arange(N).remainder(n)[:, None]
    assert float(load_balancing_loss(uniform, balanced_idx, n)) == pytest.approx(1.0)
    skewed = torch.tensor([0.7, 0.1, 0.1, 0.1]).expand(N, n)
    collapsed_idx = torch.zeros(N, 1, dtype=torch.long)
    assert float(load_balancing_loss(skewed, collapsed_idx, n)) == pytest.approx(4 * 0.7)
    # a real router: biasing its weights toward expert 0 raises the aux loss
    moe = MoE(cfg(), MLP)
    x = torch.randn(256, 32, generator=torch.Generator().manual_seed(2)) + 1.0
    with torch.no_grad():
        moe.router.weight.mul_(0.01)  # a near-uniform router
    moe(x)
    fair = moe.last_aux.item()
    assert fair == pytest.approx(1.0, abs=0.1)
    with torch.no_grad():
        moe.router.weight[0] = 2.0  # every token (mean coordinate 1) now scores expert 0 highest
    moe(x)
    assert moe.last_aux.item() > fair + 0.5
    assert float(moe.last_utilization[0]) == pytest.approx(0.5)  # top-2: expert 0 takes one slot each


def test_aux_loss_gradient_pushes_probability_away_from_the_busy_expert():
    """f is a count (no gradient); the gradient through P lowers the busy expert's probability."""
    moe = MoE(cfg(top_k=1), MLP)
    x = torch.randn(128, 32, generator=torch.Generator().manual_seed(3)) + 1.0
    with torch.no_grad():
        moe.router.weight.mul_(0.01)
        moe.router.weight[0] = 0.05  # expert 0 is favoured but not yet saturated
    moe(x)
    p0_before = moe.router(x).softmax(-1)[:, 0].mean().item()
    assert moe.last_utilization[0].item() > 0.5
    aux_before = moe.last_aux.item()
    opt = torch.optim.SGD(moe.router.parameters(), lr=0.01)
    moe.last_aux.backward()
    opt.step()
    moe(x)
    assert moe.router(x).softmax(-1)[:, 0].mean().item() < p0_before
    assert moe.last_aux.item() <= aux_before


def test_model_aux_loss_stats_and_param_counts():
    m = model(moe_aux_coef=0.01, moe_z_coef=0.001)
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(4))
    logits = m(idx)
    aux = m.aux_loss()
    layers = m.moe_layers()
    expected = sum(0.01 * l.last_aux + 0.001 * l.last_z for l in layers)
    torch.testing.assert_close(aux, expected)
    (logits.logsumexp(-1).mean() + aux).backward()
    assert m.layers[0].mlp.router.weight.grad is not None
    stats = m.moe_stats()
    assert len(stats["expert_utilization"]) == 2 and all(len(u) == 4 for u in stats["expert_utilization"])
    assert all(sum(u) == pytest.approx(1.0) for u in stats["expert_utilization"])
    assert math.isfinite(stats["moe_aux"])
    counts = param_count(m.config)
    assert counts["total"] == m.num_params()
    expert = 3 * 32 * 48
    assert counts["per_layer"] - counts["active_per_layer"] == 2 * expert  # 4 experts held, 2 active


def test_moe_model_is_causal_and_rejects_bad_top_k():
    m = model().eval()
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(5))
    changed = idx.clone()
    changed[:, 9:] = (changed[:, 9:] + 1) % 97
    with torch.no_grad():
        torch.testing.assert_close(m(idx)[:, :9], m(changed)[:, :9], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        model(top_k=5)
