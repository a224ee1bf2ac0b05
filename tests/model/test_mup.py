"""μP (seed 004): the coordinate check, and the pieces it rests on (init, LR groups, readout)."""

import pytest
import torch
import torch.nn.functional as F

from tokenmill.config import ModelConfig, TrainConfig
from tokenmill.model import mup
from tokenmill.model.transformer import Transformer
from tokenmill.train.optimizer import build_optimizer, param_groups, set_lr

WIDTHS = (64, 128, 256)


def cfg(width: int, use_mup: bool, **kw) -> ModelConfig:
    return ModelConfig(**{"vocab_size": 64, "d_model": width, "n_layers": 2, "n_heads": 4, "max_seq_len": 32,
                          "mup": use_mup, "mup_base_width": 64, "tie_embeddings": False, **kw})


def activation_scales(width: int, use_mup: bool, steps: int = 4, lr: float = 1e-2) -> list[float]:
    """mean |x| of every block's output and of the logits after `steps` Adam steps at the same LR."""
    m = Transformer(cfg(width, use_mup), generator=torch.Generator().manual_seed(0))
    tc = TrainConfig(lr=lr, warmup_steps=0, max_steps=100, min_lr_ratio=1.0, weight_decay=0.0)
    opt = build_optimizer(m, tc, torch.device("cpu"))
    data = torch.randint(0, 64, (8, 33), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(m(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten()).backward()
        opt.step()
    acts: list[float] = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: acts.append(out.abs().mean().item()))
             for layer in m.layers]
    with torch.no_grad():
        logits = m(data[:, :-1])
    for h in hooks:
        h.remove()
    return acts + [logits.abs().mean().item()]


def test_coordinate_check_mup_is_flat_across_widths_and_standard_grows():
    mu = torch.tensor([activation_scales(w, True) for w in WIDTHS])  # [width, coordinate]
    sp = torch.tensor([activation_scales(w, False) for w in WIDTHS])
    # at the base width μP *is* the standard parameterization
    torch.testing.assert_close(mu[0], sp[0])
    # μP: every coordinate within 1.5× of its base-width value at 2× and 4× the width
    ratio = mu / mu[0]
    assert ((ratio > 1 / 1.5) & (ratio < 1.5)).all(), ratio
    # standard parameterization: hidden activations blow up with width after the same steps
    assert (sp[1:, :-1] / sp[0, :-1] > 4).all() and (sp[2, :-1] > 2 * sp[1, :-1]).all(), sp


def test_mup_init_lr_groups_and_output_multiplier():
    c = cfg(256, True)
    m = Transformer(c, generator=torch.Generator().manual_seed(0))
    assert mup.width_mult(c) == 4.0 and m.output_mult == 0.25
    # hidden matrices: std 0.02 / sqrt(4); embeddings unchanged
    assert m.layers[0].self_attn.qkv_proj.weight.std().item() == pytest.approx(0.01, rel=0.05)
    assert m.embed_tokens.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.05)
    groups = {g["name"]: g for g in param_groups(m, 0.1)}
    names = {id(p): n for n, p in m.named_parameters()}
    hidden = {names[id(p)] for p in groups["mup_hidden"]["params"]}
    assert hidden == {n for n, p in m.named_parameters() if n.startswith("layers.") and p.ndim == 2}
    assert {names[id(p)] for p in groups["decay"]["params"]} == {"lm_head.weight"}
    assert groups["mup_hidden"]["lr_mult"] == 0.25 and groups["mup_hidden"]["weight_decay"] == 0.1
    opt = build_optimizer(m, TrainConfig(lr=1e-3, warmup_steps=0), torch.device("cpu"))
    set_lr(opt, 1e-3)
    assert sorted(g["lr"] for g in opt.param_groups) == [0.25e-3, 1e-3, 1e-3]
    # the readout is scaled: logits of the μP model are 1/4 of the same weights without μP
    plain = Transformer(cfg(256, False))
    plain.load_state_dict(m.state_dict())
    plain.layers.apply(lambda mod: setattr(mod, "scale", m.layers[0].self_attn.scale)
                       if hasattr(mod, "qkv_proj") else None)
    idx = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(m(idx), plain(idx) * 0.25)


def test_mup_off_changes_nothing():
    c = cfg(128, False)
    assert mup.width_mult(c) == 1.0 and mup.attention_scale(c) is None
    groups = param_groups(Transformer(c), 0.1)
    assert [g["name"] for g in groups] == ["decay", "no_decay"] and all("lr_mult" not in g for g in groups)
