import math

import pytest
import torch

from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer, apply_rope, resolve_ffn_hidden, rope_tables


def cfg(**kw) -> ModelConfig:
    base = {"vocab_size": 97, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 24}
    return ModelConfig(**{**base, **kw})


def model(seed: int = 0, **kw) -> Transformer:
    return Transformer(cfg(**kw), generator=torch.Generator().manual_seed(seed)).eval()


def test_forward_shape_and_length_limit():
    m = model()
    idx = torch.randint(0, 97, (3, 24))
    assert m(idx).shape == (3, 24, 97)
    with pytest.raises(ValueError, match="max_seq_len"):
        m(torch.randint(0, 97, (1, 25)))


@pytest.mark.parametrize("n_kv", [None, 2, 1])
def test_causal_future_tokens_do_not_change_past_logits(n_kv):
    m = model(n_kv_heads=n_kv)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 97, (2, 20), generator=g)
    t = 9
    changed = idx.clone()
    changed[:, t + 1:] = torch.randint(0, 97, (2, 20 - t - 1), generator=g)
    with torch.no_grad():
        a, b = m(idx), m(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])  # ...while later positions do see them


def test_rope_scores_depend_only_on_relative_position():
    hd = 16
    cos, sin = rope_tables(hd, 64, 10_000.0)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(hd, generator=g), torch.randn(hd, generator=g)

    def score(m: int, n: int) -> float:
        qm = apply_rope(q.view(1, 1, 1, hd), cos[m:m + 1], sin[m:m + 1]).flatten()
        kn = apply_rope(k.view(1, 1, 1, hd), cos[n:n + 1], sin[n:n + 1]).flatten()
        return float(qm @ kn)

    for m, n in [(5, 2), (20, 17), (60, 57)]:
        assert score(m, n) == pytest.approx(score(3, 0), abs=1e-4)
    assert score(10, 2) != pytest.approx(score(3, 0), abs=1e-3)
    # a rotation: norms are preserved
    rotated = apply_rope(q.view(1, 1, 1, hd), cos[7:8], sin[7:8]).flatten()
    assert float(rotated.norm()) == pytest.approx(float(q.norm()), rel=1e-6)


def test_rope_is_the_rotate_half_convention():
    """Channel i pairs with channel i + hd/2 (HF Llama), rotated by angle t / theta^(2i/hd)."""
    hd, t, theta = 8, 5, 10_000.0
    cos, sin = rope_tables(hd, 8, theta)
    x = torch.arange(1.0, hd + 1)
    out = apply_rope(x.view(1, 1, 1, hd), cos[t:t + 1], sin[t:t + 1]).flatten()
    for i in range(hd // 2):
        ang = t / theta ** (2 * i / hd)
        a, b = float(x[i]), float(x[i + hd // 2])
        assert float(out[i]) == pytest.approx(a * math.cos(ang) - b * math.sin(ang), abs=1e-5)
        assert float(out[i + hd // 2]) == pytest.approx(b * math.cos(ang) + a * math.sin(ang), abs=1e-5)


def test_gqa_shapes_and_equivalence_to_mha_with_repeated_kv_heads():
    gqa = model(n_kv_heads=2)
    att = gqa.layers[0].self_attn
    hd = 32 // 4
    assert att.q_proj.weight.shape == (4 * hd, 32)
    assert att.k_proj.weight.shape == (2 * hd, 32) and att.v_proj.weight.shape == (2 * hd, 32)
    mha = model(n_kv_heads=None)
    sd = gqa.state_dict()
    for key, w in list(sd.items()):
        if key.endswith(("k_proj.weight", "v_proj.weight")):  # query head i uses kv head i // 2
            sd[key] = w.view(2, hd, 32).repeat_interleave(2, dim=0).reshape(4 * hd, 32)
    mha.load_state_dict(sd)
    idx = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(gqa(idx), mha(idx), rtol=1e-5, atol=1e-5)


def expected_params(V, d, L, H, kv, ffn, tied):
    hd = d // H
    attn = d * H * hd + 2 * d * kv * hd + H * hd * d
    return V * d + L * (attn + 3 * d * ffn + 2 * d) + d + (0 if tied else V * d)


@pytest.mark.parametrize("kw,ffn", [
    ({}, 128),  # int(8/3 * 32) = 85 -> 128
    ({"n_kv_heads": 1, "tie_embeddings": False}, 128),
    ({"d_model": 48, "n_heads": 3, "ffn_hidden": 100}, 100),
    ({"d_model": 96, "n_heads": 6, "n_kv_heads": 2, "n_layers": 3}, 256),  # 256 = ceil(256/64)*64
])
def test_param_count_matches_formula(kw, ffn):
    c = cfg(**kw)
    assert resolve_ffn_hidden(c) == ffn
    m = Transformer(c)
    n = expected_params(97, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads or c.n_heads, ffn, c.tie_embeddings)
    assert m.num_params() == n
    assert m.num_params(exclude_embeddings=True) == n - 97 * c.d_model


def test_ffn_hidden_default_rounding():
    assert resolve_ffn_hidden(ModelConfig(d_model=256)) == 704  # int(682.67) = 682 -> 704
    assert resolve_ffn_hidden(ModelConfig(d_model=768)) == 2048


def test_tied_head_shares_the_embedding_and_untied_does_not():
    tied = model()
    assert tied.lm_head.weight is tied.embed_tokens.weight
    untied = model(tie_embeddings=False)
    assert untied.lm_head.weight.data_ptr() != untied.embed_tokens.weight.data_ptr()


def test_init_std_and_scaled_residual_projections():
    c = ModelConfig(vocab_size=512, d_model=128, n_layers=8, n_heads=4, max_seq_len=16, init_std=0.02)
    m = Transformer(c, generator=torch.Generator().manual_seed(0))
    resid = 0.02 / math.sqrt(2 * 8)
    blk = m.layers[3]
    assert blk.self_attn.o_proj.weight.std().item() == pytest.approx(resid, rel=0.05)
    assert blk.mlp.down_proj.weight.std().item() == pytest.approx(resid, rel=0.05)
    assert blk.self_attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.embed_tokens.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.all(blk.input_layernorm.weight == 1) and torch.all(m.norm.weight == 1)
    assert blk.self_attn.q_proj.weight.mean().abs().item() < 0.002


def test_init_is_a_function_of_the_generator_seed():
    a, b, c = model(seed=3), model(seed=3), model(seed=4)
    for (n, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), n
        assert pa.ndim == 1 or not torch.equal(pa, pc), n  # norm gains are 1 whatever the seed


def test_rope_tables_are_not_in_the_state_dict():
    sd = model().state_dict()
    assert not any("rope" in k for k in sd)
    assert "layers.0.self_attn.q_proj.weight" in sd and "layers.1.mlp.gate_proj.weight" in sd
    assert "layers.0.input_layernorm.weight" in sd and "norm.weight" in sd


def test_bad_configs_are_rejected_with_the_field_name():
    with pytest.raises(ValueError, match="vocab_size"):
        Transformer(ModelConfig())
    with pytest.raises(ValueError, match="n_kv_heads"):
        Transformer(cfg(n_kv_heads=3))
    with pytest.raises(ValueError, match="n_heads"):
        Transformer(cfg(n_heads=5))
