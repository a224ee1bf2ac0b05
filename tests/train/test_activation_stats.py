"""The activation probe: act_rms equals the blocks' outputs recomputed without hooks, and
attn_logit_max equals the maximum of the scores the attention kernel itself received (captured
from SDPA and from the explicit kernel), over the allowed pairs only, for causal, document-masked,
sliding-window and GQA/QK-norm/μP models; the hooks are gone afterwards and nothing trains."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import tokenmill.model.transformer as T
from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer, document_causal_mask
from tokenmill.train.activation_stats import ActivationProbe, allowed_pairs, query_rows


def model(**kw) -> Transformer:
    cfg = ModelConfig(**{"vocab_size": 64, "d_model": 32, "n_layers": 3, "n_heads": 4, "max_seq_len": 32, **kw})
    return Transformer(cfg, generator=torch.Generator().manual_seed(0))


def batch(B: int = 3, L: int = 24, docs: bool = False) -> SimpleNamespace:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (B, L + 1), generator=g)
    if not docs:
        return SimpleNamespace(tokens=tokens, positions=None, segments=None)
    segments = torch.tensor([[0] * 10 + [1] * 9 + [2] * (L - 19)] * B, dtype=torch.int32)
    segments[1] = 0  # one row is a single document
    return SimpleNamespace(tokens=tokens, positions=T.document_positions(segments), segments=segments)


def captured_max(monkeypatch: pytest.MonkeyPatch, m: Transformer, b: SimpleNamespace, rows: int) -> list[float]:
    """Per layer, max over allowed pairs of the scores the kernel gets, all queries: computed from the
    q, k and mask handed to SDPA / explicit_attention (nothing shared with the probe's own q and k)."""
    seen: list[float] = []
    sdpa, explicit = F.scaled_dot_product_attention, T.explicit_attention

    def fake_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, **kw):
        s = (q.double() @ k.double().transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
        Tq = q.shape[-2]
        allowed = torch.ones(Tq, Tq, dtype=torch.bool).tril() if is_causal else attn_mask
        seen.append(float(s.masked_fill(~allowed, -math.inf).max()))
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, **kw)

    def fake_explicit(q, k, v, mask, scale):
        s = (q.double() @ k.double().transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
        seen.append(float((s + mask.bias.double()).max()))
        return explicit(q, k, v, mask, scale)

    monkeypatch.setattr(F, "scaled_dot_product_attention", fake_sdpa)
    monkeypatch.setattr(T, "explicit_attention", fake_explicit)
    kw = {n: getattr(b, n)[:rows] for n in ("positions", "segments") if getattr(b, n) is not None}
    with torch.no_grad():
        m(b.tokens[:rows, :-1], **kw)
    monkeypatch.undo()
    return seen


@pytest.mark.parametrize("kw,docs,kernel", [
    ({}, False, "auto"),                                      # SDPA, is_causal
    ({}, True, "auto"),                                       # SDPA, document mask
    ({}, True, "explicit"),                                   # additive document mask
    ({}, False, "explicit"),                                  # additive causal mask
    ({"n_kv_heads": 2, "qk_norm": True}, True, "auto"),       # GQA, QK-norm
    ({"sliding_window": 5}, False, "auto"),                   # dense window mask
    ({"mup": True, "mup_base_width": 16}, False, "auto"),     # μP attention scale
])
def test_logit_max_equals_the_kernels_scores(monkeypatch, kw, docs, kernel):
    m, b = model(**kw), batch(docs=docs)
    m.attn_kernel = kernel
    with torch.no_grad():  # grow the weights so the logits are far from 0
        for layer in m.layers:
            layer.self_attn.qkv_proj.weight.mul_(8)  # q and k (and v)
    want = captured_max(monkeypatch, m, b, rows=2)
    got = ActivationProbe(m, rows=2, queries=64).measure(b)["attn_logit_max"]  # 64 >= T: every query
    assert len(got) == 3 and got == pytest.approx(want, rel=1e-5)
    assert max(want) > 1.0
    sub = ActivationProbe(m, rows=2, queries=5).measure(b)["attn_logit_max"]  # a subsample: never above
    assert all(s <= w * (1 + 1e-6) for s, w in zip(sub, want))


def test_act_rms_equals_the_blocks_outputs_recomputed_without_hooks():
    m, b = model(), batch(docs=True)
    got = ActivationProbe(m, rows=2).measure(b)["act_rms"]
    idx, seg, pos = b.tokens[:2, :-1], b.segments[:2], b.positions[:2]
    with torch.no_grad():
        x = m.embed(idx, pos)
        cos, sin, mask = m.block_inputs(idx.shape[1], idx.device, pos, seg)
        want = []
        for layer in m.layers:
            x = layer(x, cos, sin, mask)
            want.append(float(x.double().pow(2).mean().sqrt()))
    assert got == pytest.approx(want, rel=1e-6)


def test_the_hooks_are_removed_and_nothing_is_trained():
    m, b = model(), batch()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    ActivationProbe(m).measure(b)
    assert all(not mod._forward_hooks for mod in m.modules())
    assert all(p.grad is None for p in m.parameters())
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())


def test_query_rows_and_a_flex_mask_rebuilt_from_segments():
    assert query_rows(8, 64).tolist() == list(range(8))
    rows = query_rows(256, 64)
    assert len(rows) == 64 and rows[0] == 0 and rows[-1] == 255 and bool((rows.diff() > 0).all())
    seg = batch(docs=True).segments
    block_mask = object()  # stands for a FlexAttention BlockMask: not a tensor
    rows = query_rows(24, 6)
    got = allowed_pairs(block_mask, rows, 24, seg, torch.device("cpu"))
    assert torch.equal(got, document_causal_mask(seg)[:, :, rows])
    with pytest.raises(ValueError, match="segments"):
        allowed_pairs(block_mask, rows, 24, None, torch.device("cpu"))
