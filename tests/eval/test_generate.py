import torch

from tokenmill.eval.generate import generate

from tests.conftest import ContextFreeModel


def test_greedy_picks_argmax_and_stops_at_eos():
    logp = torch.full((10,), -10.0)
    logp[7] = 0.0
    model = ContextFreeModel(logp)
    assert generate(model, [1, 2], 5, max_context=4, temperature=0) == [7] * 5
    assert generate(model, [1], 5, max_context=4, temperature=0, stop_id=7) == [7]


def test_sampling_is_seeded_and_respects_top_k():
    model = ContextFreeModel(torch.zeros(50))
    a = generate(model, [1], 40, max_context=8, temperature=1.0, top_k=50,
                 generator=torch.Generator().manual_seed(3))
    b = generate(model, [1], 40, max_context=8, temperature=1.0, top_k=50,
                 generator=torch.Generator().manual_seed(3))
    assert a == b and len(set(a)) > 5
    logits = torch.arange(50, dtype=torch.float32)
    top = generate(ContextFreeModel(logits), [1], 200, max_context=8, temperature=5.0, top_k=3,
                   generator=torch.Generator().manual_seed(0))
    assert set(top) <= {47, 48, 49} and len(set(top)) == 3
