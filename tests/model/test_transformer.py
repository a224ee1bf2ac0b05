import math

import pytest
import torch

from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer, apply_rope, resolve_ffn_hidden, rope_tables
from tokenmill.model.fused import split_tensors, unpack_qkv


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
    assert att.qkv_proj.weight.shape == ((4 + 2 + 2) * hd, 32)  # q, k, v in one matmul
    mha = model(n_kv_heads=None)
    sd = split_tensors(gqa.state_dict(), gqa.config)  # separate q/k/v: load_state_dict fuses them
    assert sd["layers.0.self_attn.k_proj.weight"].shape == (2 * hd, 32)
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
    assert blk.self_attn.qkv_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.embed_tokens.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.all(blk.input_layernorm.weight == 1) and torch.all(m.norm.weight == 1)
    assert blk.self_attn.qkv_proj.weight.mean().abs().item() < 0.002


def test_init_is_a_function_of_the_generator_seed():
    a, b, c = model(seed=3), model(seed=3), model(seed=4)
    for (n, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), n
        assert pa.ndim == 1 or not torch.equal(pa, pc), n  # norm gains are 1 whatever the seed


def test_rope_tables_are_not_in_the_state_dict():
    sd = model().state_dict()
    assert not any("rope" in k for k in sd)
    assert "layers.0.self_attn.qkv_proj.weight" in sd and "layers.1.mlp.gate_up_proj.weight" in sd
    assert "layers.0.input_layernorm.weight" in sd and "norm.weight" in sd


def test_bad_configs_are_rejected_with_the_field_name():
    with pytest.raises(ValueError, match="vocab_size"):
        Transformer(ModelConfig())
    with pytest.raises(ValueError, match="n_kv_heads"):
        Transformer(cfg(n_kv_heads=3))
    with pytest.raises(ValueError, match="n_heads"):
        Transformer(cfg(n_heads=5))


# --------------------------------------------------------------------------- document masking
import torch.nn.functional as F  # noqa: E402

from tokenmill.model import transformer as tr  # noqa: E402
from tokenmill.model.transformer import (  # noqa: E402
    document_causal_mask,
    document_positions,
    flex_available,
)

DOC_LENS = [5, 9, 6]  # one packed row of T = 20


def packed_row(lens: list[int], seed: int = 2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """idx, positions, segments [1, sum(lens)] for documents of the given lengths."""
    idx = torch.randint(0, 97, (1, sum(lens)), generator=torch.Generator().manual_seed(seed))
    segments = torch.cat([torch.full((n,), i) for i, n in enumerate(lens)]).unsqueeze(0)
    positions = torch.cat([torch.arange(n) for n in lens]).unsqueeze(0)
    return idx, positions, segments


def spans(lens: list[int]) -> list[slice]:
    starts = [sum(lens[:i]) for i in range(len(lens))]
    return [slice(s, s + n) for s, n in zip(starts, lens)]


def backends() -> list[str]:
    return ["sdpa"] + (["flex"] if tr.flex_attention is not None else [])


def with_backend(m: Transformer, backend: str) -> Transformer:
    m.doc_mask_backend = backend  # "flex" on CPU runs FlexAttention eagerly: slow, exact, test-only
    return m


def reference_causal_forward(m: Transformer, idx: torch.Tensor, positions: list[list[int]] | None = None):
    """The forward as it was before document masking: is_causal SDPA, positions 0..T-1; or, given
    per-row positions, RoPE tables rebuilt row by row from `rope_tables` for those positions."""
    T = idx.shape[1]
    cos, sin = m.rope_cos[:T], m.rope_sin[:T]
    if positions is not None:
        c, s = rope_tables(m.config.d_model // m.config.n_heads, m.config.max_seq_len, m.config.rope_theta)
        cos = torch.stack([c[row] for row in positions]).unsqueeze(1)
        sin = torch.stack([s[row] for row in positions]).unsqueeze(1)
    x = m.embed_tokens(idx)
    for blk in m.layers:
        a = blk.self_attn
        h = blk.input_layernorm(x)
        B = h.shape[0]
        wq, wk, wv = unpack_qkv(a.qkv_proj.weight, a.n_heads, a.n_kv_heads, a.head_dim)
        q = (h @ wq.T).view(B, T, a.n_heads, a.head_dim).transpose(1, 2)
        k = (h @ wk.T).view(B, T, a.n_kv_heads, a.head_dim).transpose(1, 2)
        v = (h @ wv.T).view(B, T, a.n_kv_heads, a.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = a.n_heads // a.n_kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
        x = x + a.o_proj(y)
        x = x + blk.mlp(blk.post_attention_layernorm(x))
    return m.lm_head(m.norm(x))


@pytest.mark.parametrize("n_kv", [None, 2])
def test_without_segments_the_forward_is_bitwise_the_plain_causal_one(n_kv):
    m = model(n_kv_heads=n_kv)
    idx = torch.randint(0, 97, (3, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = reference_causal_forward(m, idx)
        assert torch.equal(m(idx), ref)
        # explicit 0..T-1 positions gather the very same table rows
        assert torch.equal(m(idx, positions=torch.arange(24).expand(3, 24)), ref)


def test_positions_set_the_rope_angle_of_each_token():
    m = model(n_kv_heads=2, init_std=0.3)  # sharp attention, so position effects are large
    idx, positions, _ = packed_row(DOC_LENS)
    idx2 = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(8))
    idx, positions = torch.cat([idx, idx2]), torch.cat([positions, torch.arange(3, 23).unsqueeze(0)])
    with torch.no_grad():
        out = m(idx, positions=positions)  # restarting positions, no document mask
        torch.testing.assert_close(out, reference_causal_forward(m, idx, positions.tolist()), rtol=0, atol=1e-5)
        # RoPE sees only position differences: a constant shift (row 1) is invisible, a restart is not
        torch.testing.assert_close(out[1], m(idx)[1], rtol=0, atol=1e-4)  # logits ~6 here
        assert not torch.allclose(out[0, 5:], m(idx)[0, 5:], atol=1e-3)


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("n_kv", [None, 2, 1])
@pytest.mark.filterwarnings("ignore::UserWarning")  # eager FlexAttention warns it is unfused
def test_packed_row_gives_each_document_its_standalone_logits(n_kv, backend):
    m = with_backend(model(n_kv_heads=n_kv), backend)
    idx, positions, segments = packed_row(DOC_LENS)
    with torch.no_grad():
        packed = m(idx, positions=positions, segments=segments)
        for sl in spans(DOC_LENS):
            alone = m(idx[:, sl])  # positions 0..n-1, nothing else in the row
            torch.testing.assert_close(packed[:, sl], alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", backends())
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_rows_of_a_batch_are_masked_independently(backend):
    """Two rows with different document layouts, run together, match each row run alone."""
    m = with_backend(model(n_kv_heads=2), backend)
    rows = [packed_row([3, 12, 5], seed=5), packed_row([20], seed=6)]
    idx, pos, seg = (torch.cat([r[i] for r in rows]) for i in range(3))
    with torch.no_grad():
        both = m(idx, positions=pos, segments=seg)
        for b, (i, p, s) in enumerate(rows):
            torch.testing.assert_close(both[b:b + 1], m(i, positions=p, segments=s), rtol=0, atol=1e-5)


def test_perturbing_one_document_changes_only_that_document():
    m = model()
    idx, positions, segments = packed_row(DOC_LENS)
    doc = spans(DOC_LENS)[1]
    changed = idx.clone()
    changed[:, doc.start + 2:doc.stop] = (changed[:, doc.start + 2:doc.stop] + 1) % 97
    with torch.no_grad():
        a = m(idx, positions=positions, segments=segments)
        b = m(changed, positions=positions, segments=segments)
        plain_a, plain_b = m(idx), m(changed)
    for i, sl in enumerate(spans(DOC_LENS)):
        if i != 1:
            torch.testing.assert_close(a[:, sl], b[:, sl], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, doc.start + 2:doc.stop], b[:, doc.start + 2:doc.stop])
    # ...and without segments the change does leak into the next document: the check can fail
    later = spans(DOC_LENS)[2]
    assert not torch.allclose(plain_a[:, later], plain_b[:, later])


def test_no_gradient_crosses_a_document_boundary():
    m = model()
    idx, positions, segments = packed_row(DOC_LENS)
    x = m.embed_tokens(idx).detach().requires_grad_(True)
    handle = m.embed_tokens.register_forward_hook(lambda mod, inp, out: x)  # differentiate w.r.t. x
    try:
        logits = m(idx, positions=positions, segments=segments)
    finally:
        handle.remove()
    first, second, _ = spans(DOC_LENS)
    logits[:, second].sum().backward()
    assert torch.count_nonzero(x.grad[:, first]) == 0  # doc 0 does not influence doc 1
    assert torch.count_nonzero(x.grad[:, second]) > 0


def test_document_positions_restart_at_every_boundary():
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [7, 3, 3, 3, 3, 3, 7, 7, 5]])
    expected = []
    for row in seg.tolist():
        out, p = [], 0
        for t, s in enumerate(row):
            p = 0 if t == 0 or s != row[t - 1] else p + 1
            out.append(p)
        expected.append(out)
    assert document_positions(seg).tolist() == expected


def test_document_mask_is_block_diagonal_causal_and_never_joins_separate_runs():
    seg = torch.tensor([[4, 4, 9, 9, 9, 4, 4]])  # label 4 reused for a separate, later span
    run = [0, 0, 1, 1, 1, 2, 2]
    mask = document_causal_mask(seg)
    assert mask.shape == (1, 1, 7, 7) and mask.dtype == torch.bool
    for q in range(7):
        for k in range(7):
            assert bool(mask[0, 0, q, k]) == (k <= q and run[k] == run[q]), (q, k)


def test_auto_backend_is_sdpa_on_cpu_and_works_without_flex(monkeypatch):
    m = model()
    seg = torch.tensor([[0, 0, 1]])
    assert not flex_available(torch.device("cpu"))
    assert isinstance(m.attention_mask(seg), torch.Tensor)
    monkeypatch.setattr(tr, "flex_attention", None)  # a torch without FlexAttention
    monkeypatch.setattr(tr, "create_block_mask", None)
    assert not flex_available(torch.device("cuda"))
    assert not flex_available(torch.device("cuda"), head_dim=8)
    idx, positions, segments = packed_row(DOC_LENS)
    with torch.no_grad():
        assert m(idx, positions=positions, segments=segments).shape == (1, 20, 97)
    with pytest.raises(RuntimeError, match="sdpa"):
        with_backend(m, "flex")(idx, segments=segments)
    with pytest.raises(ValueError, match="doc_mask_backend"):
        with_backend(m, "dense")(idx, segments=segments)


def test_positions_and_segments_are_validated():
    m = model()
    idx = torch.randint(0, 97, (2, 8))
    with pytest.raises(ValueError, match="positions must be an integer tensor of shape"):
        m(idx, positions=torch.arange(8))
    with pytest.raises(ValueError, match="segments"):
        m(idx, segments=torch.zeros(2, 8))  # float
    with pytest.raises(ValueError, match="max_seq_len"):
        m(idx, positions=torch.full((2, 8), 24))  # table covers 0..23
    with pytest.raises(ValueError, match="outside the RoPE table"):
        m(idx, positions=torch.full((2, 8), -1))


# --------------------------------------------------------------------------- architecture options
def test_gqa_with_n_kv_heads_equal_to_n_heads_is_mha():
    """n_kv_heads = n_heads builds the same modules and computes the same function as the default."""
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(3))
    a, b = model(n_kv_heads=4), model(n_kv_heads=None)
    assert a.state_dict().keys() == b.state_dict().keys()
    with torch.no_grad():
        assert torch.equal(a(idx), b(idx))


def test_mqa_shares_one_kv_head_and_stays_causal():
    m = model(n_kv_heads=1)
    assert m.layers[0].self_attn.qkv_proj.weight.shape == ((4 + 1 + 1) * 32 // 4, 32)
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(3))
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 97
    with torch.no_grad():
        torch.testing.assert_close(m(idx)[:, :10], m(changed)[:, :10], rtol=0, atol=1e-6)


@pytest.mark.parametrize("w", [1, 3, 5])
def test_sliding_window_blocks_keys_further_than_w(w):
    """With one layer, logits at t depend exactly on tokens t-w+1..t: changing token s changes
    position t iff 0 <= t - s < w."""
    m = model(n_layers=1, sliding_window=w, init_std=0.3)
    idx = torch.randint(0, 97, (1, 16), generator=torch.Generator().manual_seed(5))
    s = 6
    changed = idx.clone()
    changed[0, s] = (changed[0, s] + 1) % 97
    with torch.no_grad():
        diff = (m(idx) - m(changed)).abs().amax(-1)[0]
    for t in range(16):
        assert (bool(diff[t] > 1e-6)) == (0 <= t - s < w), (t, float(diff[t]))


def test_sliding_window_larger_than_the_row_is_plain_causal_and_combines_with_documents():
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(6))
    plain, wide = model(), model(sliding_window=16)
    with torch.no_grad():
        torch.testing.assert_close(plain(idx), wide(idx), rtol=1e-5, atol=1e-6)
    segs = torch.tensor([[0] * 5 + [1] * 11, [0] * 16])
    m = model(sliding_window=3)
    m.doc_mask_backend = "sdpa"
    with torch.no_grad():
        packed = m(idx, segments=segs)
        # doc 1 of row 0 alone, at the positions it has in the row: window and document masks AND
        shifted = m(idx[:1, 5:], positions=torch.arange(5, 16)[None])
        torch.testing.assert_close(packed[0, 5:], shifted[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(packed[0, :5], m(idx[:1, :5])[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(packed[1], m(idx[1:])[0], rtol=1e-5, atol=1e-5)


def test_explicit_attn_mask_replaces_the_causal_rule():
    m = model()
    idx = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(7))
    causal = torch.ones(12, 12, dtype=torch.bool).tril().expand(2, 12, 12)
    full = torch.ones(2, 12, 12, dtype=torch.bool)
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 97
    with torch.no_grad():
        torch.testing.assert_close(m(idx, attn_mask=causal), m(idx), rtol=1e-5, atol=1e-6)
        # bidirectional: the last token now changes the first position's logits
        assert not torch.allclose(m(idx, attn_mask=full)[:, 0], m(changed, attn_mask=full)[:, 0], atol=1e-6)
        # prefix LM: bidirectional over the first 4, causal after; segments still AND-ed in
        prefix = causal.clone()
        prefix[:, :4, :4] = True
        segs = torch.tensor([[0] * 6 + [1] * 6] * 2)
        a = m(idx, segments=segs, attn_mask=prefix)
        b = m(changed, segments=segs, attn_mask=prefix)
        torch.testing.assert_close(a[:, :11], b[:, :11], rtol=0, atol=1e-6)
        c = idx.clone()
        c[:, 3] = (c[:, 3] + 1) % 97
        assert not torch.allclose(m(c, segments=segs, attn_mask=prefix)[:, 0], a[:, 0], atol=1e-6)
        torch.testing.assert_close(m(c, segments=segs, attn_mask=prefix)[:, 6:], a[:, 6:], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="attn_mask"):
        m(idx, attn_mask=full.float())


@pytest.mark.parametrize("kw", [{"qk_norm": True}, {"norm": "layernorm"}, {"ffn": "gelu"},
                                {"position": "learned"}, {"rope_scaling": "linear", "rope_scaling_factor": 2.0},
                                {"rope_scaling": "ntk", "rope_scaling_factor": 4.0}])
def test_options_run_train_and_change_outputs(kw):
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(8))
    base, m = model(init_std=0.3), model(init_std=0.3, **kw)
    out = m(idx)
    assert out.shape == (2, 16, 97) and torch.isfinite(out).all()
    out.float().logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in m.parameters())
    with torch.no_grad():
        assert not torch.allclose(out, base(idx), atol=1e-4)
    if kw.get("position") == "learned":  # still causal without RoPE
        changed = idx.clone()
        changed[:, 12:] = (changed[:, 12:] + 1) % 97
        with torch.no_grad():
            torch.testing.assert_close(m(changed)[:, :12], out[:, :12].detach(), rtol=0, atol=1e-6)


def test_option_modules_and_param_counts():
    m = model(qk_norm=True, norm="layernorm", ffn="gelu", position="learned")
    att, blk = m.layers[0].self_attn, m.layers[0]
    assert att.q_norm.weight.shape == (8,) and isinstance(blk.input_layernorm, torch.nn.LayerNorm)
    assert blk.mlp.up_proj.weight.shape == (4 * 32, 32) and not hasattr(blk.mlp, "gate_proj")
    assert m.embed_positions.weight.shape == (24, 32)
    assert not hasattr(m, "rope_cos")
    from tokenmill.scaling.flops import param_count
    assert param_count(m.config)["total"] == m.num_params()


def test_rope_scaling_linear_and_ntk_tables():
    cos, sin = rope_tables(8, 16, 10_000.0)
    lcos, lsin = rope_tables(8, 32, 10_000.0, "linear", 2.0)
    torch.testing.assert_close(lcos[::2], cos)  # position 2t at factor 2 is position t
    ncos, _ = rope_tables(8, 16, 10_000.0, "ntk", 4.0)
    torch.testing.assert_close(ncos[:, 0], cos[:, 0])  # the fastest frequency is unchanged
    slow = 3  # the slowest frequency is stretched by the factor: angle at 4t equals the old one at t
    inv_slow_old = 10_000.0 ** (-2 * slow / 8)
    inv_slow_new = (10_000.0 * 4.0 ** (8 / 6)) ** (-2 * slow / 8)
    assert inv_slow_old / inv_slow_new == pytest.approx(4.0, rel=1e-6)


def test_z_loss_is_the_squared_log_partition():
    from tokenmill.model.transformer import z_loss
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), math.log(5.0)]]])
    assert float(z_loss(logits)) == pytest.approx((math.log(2) ** 2 + math.log(8) ** 2) / 2, rel=1e-6)
    keep = torch.tensor([[False, True]])
    assert float(z_loss(logits, keep)) == pytest.approx(math.log(8) ** 2, rel=1e-6)
    assert float(model().z_loss(logits)) == 0.0
    assert float(model(z_loss=1e-4).z_loss(logits)) == pytest.approx(1e-4 * float(z_loss(logits)))


def test_defaults_are_the_llama_recipe():
    c = cfg()
    assert (c.norm, c.ffn, c.position, c.rope_scaling, c.qk_norm, c.sliding_window, c.z_loss,
            c.n_experts, c.mup) == ("rmsnorm", "swiglu", "rope", "none", False, None, 0.0, 0, False)
    m = model()
    assert m.aux_loss() == 0 and m.moe_stats() == {}
    assert m.layers[0].self_attn.q_norm is None and m.layers[0].self_attn.scale is None


def test_activation_checkpointing_gives_the_same_gradients_bitwise():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=4, max_seq_len=16)
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(3))
    grads = []
    for ckpt in (False, True):
        m = Transformer(cfg, generator=torch.Generator().manual_seed(0))
        m.activation_checkpointing = ckpt
        m.train()
        m(idx).logsumexp(-1).mean().backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])


# --------------------------------------------------------------------------- explicit attention
from tokenmill.model.transformer import (  # noqa: E402
    EXPLICIT_MAX_T,
    attention_kernel,
    causal_bias,
    explicit_attention,
)

SEGMENTS = torch.tensor([[0] * 7 + [1] * 13, [0] * 20, [0] * 3 + [1] * 3 + [2] * 14])


@pytest.mark.parametrize("segments", [None, SEGMENTS])
def test_explicit_attention_equals_sdpa_forward_and_backward_in_fp64(segments):
    """Same function as SDPA (plain causal and block-diagonal causal), its hand-written backward
    equal to autograd's through SDPA, and a second backward (retain_graph) unchanged."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, 20, 16, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    mask = causal_bias(20, q.device, segments)
    y = explicit_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=segments is None,
                                         attn_mask=None if segments is None else document_causal_mask(segments))
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-12)
    dy = torch.randn(y.shape, dtype=y.dtype, generator=g)
    ours = torch.autograd.grad(y, (q, k, v), dy, retain_graph=True)
    again = torch.autograd.grad(y, (q, k, v), dy)
    for a, b, c in zip(ours, torch.autograd.grad(ref, (q, k, v), dy), again):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
        assert torch.equal(a, c)
    # numerical Jacobian: one forward per input element, so a smaller batch, head count and width
    small = tuple(torch.randn(3, 1, 20, 4, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: explicit_attention(q, k, v, mask, 0.3), small)


def test_attention_kernel_rule():
    """Explicit only for short rows on CPU in bf16; SDPA elsewhere; forced choices pass through."""
    bf, f32 = torch.bfloat16, torch.float32
    assert attention_kernel("cpu", bf, EXPLICIT_MAX_T) == "explicit"
    assert attention_kernel("cpu", bf, EXPLICIT_MAX_T + 1) == "sdpa"
    assert attention_kernel("cpu", f32, 64) == "sdpa"
    assert attention_kernel("cuda", bf, 64) == "sdpa"
    assert attention_kernel("cuda", bf, 64, "explicit") == "explicit"
    with pytest.raises(ValueError, match="attn_kernel"):
        attention_kernel("cpu", bf, 64, "naive")  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [{}, {"n_kv_heads": 2}, {"qk_norm": True}])
def test_model_with_the_explicit_kernel_equals_sdpa(kw):
    """Whole model, packed documents: fp64 logits and gradients agree to 1e-10 between kernels;
    under bf16 autocast (where "auto" picks explicit) the logits agree to bf16 precision."""
    m = model(**kw).double()
    idx = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(5))
    kwargs = {"segments": SEGMENTS, "positions": document_positions(SEGMENTS)}
    out = {}
    for kernel in ("sdpa", "explicit"):
        m.attn_kernel = kernel
        m.zero_grad()
        logits = m(idx, **kwargs)
        logits.square().mean().backward()
        out[kernel] = (logits.detach(), [p.grad.clone() for p in m.parameters()])
    torch.testing.assert_close(out["explicit"][0], out["sdpa"][0], rtol=0, atol=1e-10)
    for a, b in zip(out["explicit"][1], out["sdpa"][1]):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    m = m.float()
    m.attn_kernel = "auto"
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        assert m.uses_explicit_attention(20, idx.device)
        auto = m(idx, **kwargs).float()
        m.attn_kernel = "sdpa"
        sdpa = m(idx, **kwargs).float()
    assert not m.uses_explicit_attention(20, idx.device)  # fp32 parameters, no autocast
    torch.testing.assert_close(auto, sdpa, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_selective_checkpointing_gives_the_same_loss_and_gradients(kernel, dtype):
    """Selective checkpointing recomputes only elementwise ops from the same inputs and the kept
    matmul outputs, so loss and gradients equal no checkpointing's bitwise, in fp32 and under bf16
    autocast, with document masking (GQA, QK-norm: every recomputed op on the path)."""
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, qk_norm=True, max_seq_len=16)
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(3))
    seg = torch.tensor([[0] * 5 + [1] * 11, [0] * 16])
    results = []
    for mode in (False, "selective"):
        m = Transformer(cfg, generator=torch.Generator().manual_seed(0))
        m.activation_checkpointing = mode
        m.attn_kernel = kernel
        m.train()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = m(idx, document_positions(seg), seg).float().logsumexp(-1).mean()
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}))
    (loss0, g0), (loss1, g1) = results
    assert torch.equal(loss0, loss1)
    assert g0.keys() == g1.keys() and all(torch.equal(g0[n], g1[n]) for n in g0)
