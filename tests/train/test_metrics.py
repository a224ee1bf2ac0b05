import resource

import pytest
import torch

from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.train.metrics import (UpdateRatio, embedding_spectrum, grad_norms_by_group, layer_group,
                                     memory_bytes)


def _model() -> Transformer:
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
    return Transformer(cfg, generator=torch.Generator().manual_seed(0))


def test_layer_groups_strip_wrappers():
    assert layer_group("layers.3.attn.q.weight") == "layers.3"
    assert layer_group("module._orig_mod.layers.12.ffn.up.weight") == "layers.12"
    assert layer_group("embed_tokens.weight") == "embed_tokens"
    assert layer_group("norm.weight") == "norm"


def test_group_norms_combine_to_the_global_norm():
    m = _model()
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    m(idx).logsumexp(-1).mean().backward()
    groups = grad_norms_by_group(m)
    assert list(groups)[:3] == ["embed_tokens", "layers.0", "layers.1"]
    total = torch.nn.utils.get_total_norm([p.grad for p in m.parameters() if p.grad is not None]).item()
    assert sum(v * v for v in groups.values()) ** 0.5 == pytest.approx(total, rel=1e-5)


def test_update_ratio_equals_the_independent_computation():
    m = _model()
    ratio = UpdateRatio(m)
    before = [p.detach().clone() for p in m.parameters()]
    ratio.before()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(1.01)
    expected = (sum(((p - b) ** 2).sum() for p, b in zip(m.parameters(), before)) ** 0.5
                / sum((b ** 2).sum() for b in before) ** 0.5).item()
    assert ratio.after() == pytest.approx(expected, rel=1e-6) and expected == pytest.approx(0.01, rel=1e-4)


def test_update_ratio_reusing_its_buffer_measures_each_step_afresh():
    """keep_buffer (the trainer's choice when measuring every step): the copy taken by the next
    before() replaces the in-place difference of the previous after()."""
    m = _model()
    ratio = UpdateRatio(m, keep_buffer=True)
    for factor in (1.01, 1.03, 1.0):
        ratio.before()
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(factor)
        assert ratio.after() == pytest.approx(factor - 1.0, rel=1e-4, abs=1e-12)
    with pytest.raises(AssertionError, match="before"):
        ratio.after()


def test_embedding_spectrum_of_a_known_matrix():
    w = torch.diag(torch.tensor([6.0, 2.0, 1.0]))
    s = embedding_spectrum(torch.cat([w, torch.zeros(5, 3)]))
    assert (s["sv1"], s["sv2"]) == pytest.approx((6.0, 2.0)) and s["sv_ratio"] == pytest.approx(3.0)
    collapsed = torch.ones(10, 4) + 1e-3 * torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    assert embedding_spectrum(collapsed)["sv_ratio"] > 100  # rows all pointing one way


def test_cpu_memory_is_the_peak_rss():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    got = memory_bytes(torch.device("cpu"))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert before <= got["peak"] and 0 < got["rss"] <= got["peak"]
    assert got["peak"] <= max(after, got["rss"])
