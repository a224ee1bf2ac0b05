import pytest
import torch

from tokenmill.config import ModelConfig, TrainConfig
from tokenmill.model.transformer import Transformer
from tokenmill.train.optimizer import build_optimizer, lr_at, param_groups, set_lr


def test_warmup_then_cosine_to_the_floor():
    c = TrainConfig(lr=1e-3, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert lr_at(0, c) == 0.0
    assert lr_at(1, c) == pytest.approx(1e-4)
    assert lr_at(5, c) == pytest.approx(5e-4)
    assert lr_at(10, c) == pytest.approx(1e-3)
    assert lr_at(60, c) == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # halfway: cos(pi/2) = 0
    assert lr_at(35, c) == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + 2 ** -0.5))  # quarter: cos(pi/4)
    assert lr_at(110, c) == pytest.approx(1e-4)
    assert lr_at(500, c) == pytest.approx(1e-4)
    lrs = [lr_at(s, c) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_no_warmup_starts_at_peak():
    c = TrainConfig(lr=2e-3, warmup_steps=0, max_steps=100, min_lr_ratio=0.0)
    assert lr_at(0, c) == pytest.approx(2e-3)
    assert lr_at(100, c) == pytest.approx(0.0, abs=1e-12)


def _model(tied: bool) -> Transformer:
    return Transformer(ModelConfig(vocab_size=40, d_model=16, n_layers=2, n_heads=2, max_seq_len=8,
                                   tie_embeddings=tied))


@pytest.mark.parametrize("tied", [True, False])
def test_weight_decay_groups(tied):
    m = _model(tied)
    decay, no_decay = param_groups(m, 0.1)
    names = {id(p): n for n, p in m.named_parameters()}
    dn = {names[id(p)] for p in decay["params"]}
    nn_ = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    for n in dn:
        assert n.endswith(("qkv_proj.weight", "o_proj.weight", "gate_up_proj.weight", "down_proj.weight", "lm_head.weight"))
    assert ("lm_head.weight" in dn) == (not tied)
    assert "embed_tokens.weight" in nn_ and all(n == "embed_tokens.weight" or "norm" in n for n in nn_)
    assert len(dn) == 2 * 4 + (0 if tied else 1)  # per block: qkv, o, gate_up, down
    # every parameter exactly once
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == m.num_params()


def test_decay_is_decoupled_and_only_on_matrices():
    m = _model(tied=True)
    c = TrainConfig(lr=0.1, warmup_steps=0, max_steps=10, min_lr_ratio=1.0, weight_decay=0.5)
    opt = build_optimizer(m, c, torch.device("cpu"))
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    for p in m.parameters():
        p.grad = torch.zeros_like(p)  # zero gradient: Adam's update is 0, only decay acts
    opt.step()
    for n, p in m.named_parameters():
        factor = 1 - 0.1 * 0.5 if n.endswith("proj.weight") else 1.0
        torch.testing.assert_close(p.detach(), before[n] * factor)


def test_set_lr_applies_per_group_multipliers_and_defaults_have_none():
    m = _model(tied=True)
    c = TrainConfig(lr=0.1, warmup_steps=0, max_steps=10)
    opt = build_optimizer(m, c, torch.device("cpu"))
    assert all("lr_mult" not in g and g["lr"] == lr_at(1, c) for g in opt.param_groups)
    opt.param_groups[0]["lr_mult"] = 0.5
    set_lr(opt, 0.2)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.2]


def test_mup_model_gets_a_hidden_group_with_lr_over_width_mult():
    c = ModelConfig(vocab_size=64, d_model=128, n_layers=2, n_heads=4, max_seq_len=16, mup=True, mup_base_width=32)
    m = Transformer(c)
    groups = {g["name"]: g for g in param_groups(m, 0.1)}
    assert groups["mup_hidden"]["lr_mult"] == 0.25
    assert len(groups["mup_hidden"]["params"]) == 2 * 4 and groups["decay"]["params"] == []
    assert sum(p.numel() for g in groups.values() for p in g["params"]) == m.num_params()
    opt = build_optimizer(m, TrainConfig(lr=0.1, warmup_steps=0, max_steps=10, min_lr_ratio=1.0), torch.device("cpu"))
    assert {g["name"]: g["lr"] for g in opt.param_groups} == {"decay": 0.1, "no_decay": 0.1, "mup_hidden": 0.025}


def test_linear_and_wsd_schedules():
    from tokenmill.config import TrainConfig

    lin = TrainConfig(lr=1e-3, min_lr_ratio=0.1, warmup_steps=10, max_steps=110, schedule="linear")
    assert lr_at(10, lin) == pytest.approx(1e-3)
    assert lr_at(60, lin) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert lr_at(110, lin) == pytest.approx(1e-4)
    wsd = TrainConfig(lr=1e-3, min_lr_ratio=0.1, warmup_steps=10, max_steps=110, schedule="wsd", decay_fraction=0.2)
    assert lr_at(5, wsd) == pytest.approx(5e-4)
    assert all(lr_at(s, wsd) == pytest.approx(1e-3) for s in range(10, 89))  # stable until 110 - 22
    assert lr_at(99, wsd) == pytest.approx(1e-3 - 0.9e-3 * 11 / 22)
    assert lr_at(110, wsd) == pytest.approx(1e-4)


def test_decay_embeddings_moves_the_table_into_the_decayed_group():
    from tokenmill.config import ModelConfig
    from tokenmill.model.transformer import Transformer

    m = Transformer(ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, max_seq_len=16))
    emb = m.embed_tokens.weight
    default = {g["name"]: g for g in param_groups(m, 0.1)}
    assert any(p is emb for p in default["no_decay"]["params"])
    decayed = {g["name"]: g for g in param_groups(m, 0.1, decay_embeddings=True)}
    assert any(p is emb for p in decayed["decay"]["params"])
