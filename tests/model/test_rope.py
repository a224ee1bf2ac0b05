"""RoPE tables and context extension (model/rope.py): YaRN against transformers' own implementation,
what each method does to the frequencies, phase model configs and the warnings."""

from __future__ import annotations

import math

import pytest
import torch

from tokenmill.model.config import ModelConfig
from tokenmill.model.rope import (phase_model_configs, recommended_theta, rope_tables, rope_warnings,
                                  slowest_wavelength, yarn_attention_scale, yarn_inv_freq)
from tokenmill.model.transformer import Transformer

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("hd,theta,factor,original", [(64, 10_000.0, 4.0, 256), (32, 500.0, 8.0, 128),
                                                      (128, 500_000.0, 2.0, 4096), (16, 10_000.0, 4.0, 64)])
def test_yarn_frequencies_and_scale_equal_transformers(hd, theta, factor, original):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    conf = transformers.LlamaConfig(hidden_size=hd * 4, num_attention_heads=4,
                                    max_position_embeddings=int(original * factor),
                                    rope_parameters={"rope_type": "yarn", "factor": factor, "rope_theta": theta,
                                                     "original_max_position_embeddings": original})
    want, scale = ROPE_INIT_FUNCTIONS["yarn"](conf, "cpu")
    torch.testing.assert_close(yarn_inv_freq(hd, theta, factor, original), want.float(), rtol=1e-6, atol=0)
    assert yarn_attention_scale(factor) == pytest.approx(scale)


def test_yarn_keeps_fast_frequencies_and_interpolates_slow_ones():
    hd, theta, factor, original = 64, 10_000.0, 4.0, 256
    base = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
    got = yarn_inv_freq(hd, theta, factor, original)
    turns = original * base / (2 * math.pi)  # rotations of each frequency over the trained length
    fast, slow = turns > 32, turns < 1
    assert fast.any() and slow.any()
    torch.testing.assert_close(got[fast], base[fast])
    torch.testing.assert_close(got[slow], base[slow] / factor)
    mid = ~fast & ~slow
    assert ((got[mid] <= base[mid]) & (got[mid] >= base[mid] / factor)).all()


def test_each_method_brings_the_new_positions_back_into_the_trained_angle_range():
    """At 4x the trained length, the slowest frequency's largest angle is ≤ its trained maximum
    (linear, ntk, yarn), where plain RoPE goes 4x past it."""
    hd, trained, factor = 32, 64, 4.0
    cos, sin = rope_tables(hd, trained, 10_000.0)
    trained_angle = torch.atan2(sin[-1, hd // 2 - 1], cos[-1, hd // 2 - 1]).item()
    for scaling in ("linear", "ntk", "yarn"):
        c, s = rope_tables(hd, int(trained * factor), 10_000.0, scaling, factor)
        angle = torch.atan2(s[-1, hd // 2 - 1], c[-1, hd // 2 - 1]).item()
        assert angle <= trained_angle * 1.05, scaling
    c, s = rope_tables(hd, int(trained * factor), 10_000.0)
    assert torch.atan2(s[-1, hd // 2 - 1], c[-1, hd // 2 - 1]).item() > 3 * trained_angle
    c, s = rope_tables(hd, 256, 10_000.0, "yarn", 4.0)
    assert (c.square() + s.square()).sqrt().mean().item() == pytest.approx(1 + 0.1 * math.log(4))


def _cfg(**kw) -> ModelConfig:
    base = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=2, max_seq_len=64)
    return ModelConfig(**{**base, **kw})


def test_phase_configs_carry_rope_forward_and_cover_the_longest_sequence():
    cfg = _cfg()
    models = phase_model_configs(cfg, [(64, None), (256, {"rope_scaling": "yarn", "rope_scaling_factor": 4.0}),
                                       (128, None)])
    assert models[0] == cfg
    assert (models[1].max_seq_len, models[1].rope_scaling, models[1].rope_scaling_factor) == (256, "yarn", 4.0)
    assert models[2] == models[1]  # a later phase keeps the extension (and the longer tables)
    with pytest.raises(ValueError, match="learned positions"):
        phase_model_configs(_cfg(position="learned"), [(64, None), (128, None)])


def test_warnings_name_an_unchanged_rope_and_a_small_base():
    cfg = _cfg()
    same = phase_model_configs(cfg, [(64, None), (256, None)])
    warned = rope_warnings(cfg, [("short", 64, same[0]), ("long", 256, same[1])])
    assert len(warned) == 1 and "'long' raises seq_len from 64 to 256 with RoPE unchanged" in warned[0]
    staged = _cfg(max_seq_len=256)  # short sequences first inside the configured tables: planned, not warned
    inside = phase_model_configs(staged, [(64, None), (256, None)])
    assert rope_warnings(staged, [("short", 64, inside[0]), ("long", 256, inside[1])]) == []
    for rope in ({"rope_scaling": "yarn", "rope_scaling_factor": 4.0}, {"rope_theta": 40_000.0},
                 {"rope_scaling": "linear", "rope_scaling_factor": 4.0}):
        ext = phase_model_configs(cfg, [(64, None), (256, rope)])
        assert rope_warnings(cfg, [("short", 64, ext[0]), ("long", 256, ext[1])]) == [], rope
    # seed 004 pitfall 2: theta 10000 is set for 2048 tokens; at 32k with hd 64 it should be ~190k
    big = _cfg(d_model=256, n_heads=4, max_seq_len=32_768)
    assert recommended_theta(32_768, 64) == pytest.approx(10_000 * 16 ** (64 / 62))
    warned = rope_warnings(big, [("main", 32_768, big)])
    assert any("rope_theta 10000 is small for 32768-token" in w for w in warned)
    assert rope_warnings(big.model_copy(update={"rope_theta": 500_000.0}), [("main", 32_768, big.model_copy(
        update={"rope_theta": 500_000.0}))]) == []
    tiny = _cfg(rope_theta=10.0, max_seq_len=64)  # slowest wave 2π·10^(15/16) ≈ 54 tokens < 64
    assert slowest_wavelength(tiny) < 64
    assert any("alias" in w for w in rope_warnings(tiny, [("main", 64, tiny)]))


def test_set_rope_changes_the_tables_not_the_weights():
    torch.manual_seed(0)
    short = _cfg()
    model = Transformer(short).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    long = phase_model_configs(short, [(256, {"rope_scaling": "yarn", "rope_scaling_factor": 4.0})])[0]
    model.set_rope(long)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    fresh = Transformer(long).eval()
    fresh.load_state_dict(before)
    ids = torch.randint(0, 64, (2, 200), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), fresh(ids))
    assert model.config == long and model.rope_cos.shape[0] == 256
