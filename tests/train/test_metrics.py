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


def test_group_norms_equal_a_float64_computation_per_group():
    m = _model()
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(2))
    m(idx).logsumexp(-1).mean().backward()
    expected: dict[str, float] = {}
    for name, p in m.named_parameters():
        g = layer_group(name)
        expected[g] = expected.get(g, 0.0) + float(p.grad.double().pow(2).sum())
    got = grad_norms_by_group(m)
    assert list(got) == list(expected)
    assert [got[g] for g in got] == pytest.approx([v ** 0.5 for v in expected.values()], rel=1e-6)


VIEWS = {"aten::detach", "aten::alias", "aten::view", "aten::as_strided", "aten::unsqueeze"}  # no kernel


def _aten_ops(fn) -> int:
    """Top-level ATen ops `fn` calls that launch work (on a CPU a foreach op or a stack runs per
    tensor inside, on a GPU as one kernel: only the outermost call counts)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()

    def top(e) -> bool:
        parent = e.cpu_parent
        return parent is None or not parent.name.startswith("aten::")
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and e.name not in VIEWS and top(e))


def test_metrics_launch_a_fixed_number_of_ops_whatever_the_depth():
    """Per-tensor kernels would be hundreds of launches per step on a deep model (on a GPU they
    cost more than the pass over the gradients: 7% of a compiled H100 step, BENCHMARKS.md). The
    number of ops must not grow with the number of parameters."""
    counts = []
    for layers in (2, 8):
        cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=layers, n_heads=4, max_seq_len=16)
        m = Transformer(cfg, generator=torch.Generator().manual_seed(0))
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        ratio = UpdateRatio(m, keep_buffer=True)
        ratio.before()  # the first copy allocates its buffer: not the steady state
        ratio.after()

        def measured(m=m, ratio=ratio) -> None:
            grad_norms_by_group(m)
            ratio.before()
            ratio.after()
        counts.append(_aten_ops(measured))
    assert counts[0] == counts[1], counts


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
