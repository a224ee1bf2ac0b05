"""The fused q/k/v and gate/up projections (model/fused.py): old separate-projection state dicts
load into them exactly, the layouts give each tensor-parallel row block whole heads, and the
compiled forward (with the fused loss) has no graph break, document-masked (the mask built in the
graph or prebuilt) or plain causal, and a RoPE phase boundary recompiles once."""

import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tokenmill.model.config import ModelConfig
from tokenmill.model.fused import fuse_tensors, pack_gate_up, pack_qkv, split_tensors, unpack_gate_up, unpack_qkv
from tokenmill.model.transformer import Transformer, apply_rope, document_positions
from tokenmill.train.checkpoint import CheckpointError, fused_layout, load_model_tensors


def cfg(**kw) -> ModelConfig:
    base = dict(vocab_size=61, d_model=48, n_layers=2, n_heads=6, n_kv_heads=2, max_seq_len=32)
    return ModelConfig(**{**base, **kw})


def old_layout(c: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """A state dict as the separate-projection model wrote it (random fp64 weights, HF's names)."""
    g = torch.Generator().manual_seed(seed)
    sd = split_tensors(Transformer(c).double().state_dict(), c)
    if c.tie_embeddings:  # the file holds a tied tensor once
        del sd["lm_head.weight"]
    return {k: (0.2 * (v.ndim == 2) + 0.1 * (v.ndim == 1)) * torch.randn(v.shape, generator=g, dtype=torch.float64) + (v.ndim == 1)
            for k, v in sd.items()}


def separate_forward(sd: dict[str, torch.Tensor], c: ModelConfig, m: Transformer, idx: torch.Tensor, positions, segments) -> torch.Tensor:
    """The old computation by hand: three matmuls for q, k, v and two for gate, up, from `sd`."""
    B, T = idx.shape
    H, KV, hd = c.n_heads, c.n_kv_heads or c.n_heads, c.d_model // c.n_heads
    cos, sin = m.rope_cos[positions].unsqueeze(1), m.rope_sin[positions].unsqueeze(1)
    runs = segments
    allowed = (runs[:, :, None] == runs[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
    x = sd["embed_tokens.weight"][idx]
    for i in range(c.n_layers):
        p = f"layers.{i}."
        h = m.layers[i].input_layernorm(x)
        q = (h @ sd[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ sd[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ sd[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed.unsqueeze(1))
        x = x + y.transpose(1, 2).reshape(B, T, -1) @ sd[p + "self_attn.o_proj.weight"].T
        h = m.layers[i].post_attention_layernorm(x)
        gate, up = h @ sd[p + "mlp.gate_proj.weight"].T, h @ sd[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ sd[p + "mlp.down_proj.weight"].T
    return m.norm(x) @ sd["embed_tokens.weight" if c.tie_embeddings else "lm_head.weight"].T


@pytest.mark.parametrize("n_kv", [2, 6, 1])
def test_old_state_dict_loads_into_the_fused_model_and_computes_the_same_function(n_kv):
    c = cfg(n_kv_heads=n_kv)
    sd = old_layout(c, seed=n_kv)
    m = Transformer(c).double()
    load_model_tensors(m, sd, Path("old-checkpoint"))  # how a checkpoint's model.safetensors loads
    assert not any(k.endswith(("q_proj.weight", "gate_proj.weight")) for k in m.state_dict())
    segments = torch.tensor([[0] * 5 + [1] * 9 + [2] * 6, [0] * 20])
    idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(1))
    positions = document_positions(segments)
    with torch.no_grad():
        ours = m(idx, positions, segments)
        ref = separate_forward(sd, c, m, idx, positions, segments)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    # and back: splitting the fused weights gives the old matrices bit for bit
    back = split_tensors(m.state_dict(), c)
    assert set(back) - {"lm_head.weight"} == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    assert set(fuse_tensors(sd, c)) == set(m.state_dict()) - {"lm_head.weight"}


def test_layouts_give_each_tensor_parallel_block_whole_heads():
    hd, d, H, KV = 4, 8, 6, 2
    q = torch.arange(H * hd).repeat_interleave(d).view(H * hd, d).float()  # row r of q holds r
    k, v = 100 + q[: KV * hd], 200 + q[: KV * hd]
    w = pack_qkv(q, k, v, hd)
    for tp in (1, 2):  # rank r's rows: kv groups r·KV/tp ..; their q heads are those that use them
        for r, block in enumerate(w.chunk(tp)):
            groups = KV // tp
            rq, rk, rv = unpack_qkv(block, H // tp, groups, hd)
            assert torch.equal(rq, q.view(tp, -1, d)[r]) and torch.equal(rk, k.view(tp, -1, d)[r]) and torch.equal(rv, v.view(tp, -1, d)[r])
    gate, up = torch.randn(6, d), torch.randn(6, d)
    for r, block in enumerate(pack_gate_up(gate, up).chunk(3)):
        g, u = unpack_gate_up(block)
        assert torch.equal(g, gate.chunk(3)[r]) and torch.equal(u, up.chunk(3)[r])


def test_init_draws_the_numbers_of_the_separate_projections():
    c = cfg()
    m = Transformer(c, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    # the separate layout's draw order: embed, then per block q, k, v, o, gate, up, down (norms are 1)
    draws = {"embed_tokens.weight": (61, 48)}
    for i in range(2):
        p = f"layers.{i}."
        hidden = m.layers[i].mlp.down_proj.in_features
        for n, shape in (("self_attn.q_proj", (48, 48)), ("self_attn.k_proj", (16, 48)), ("self_attn.v_proj", (16, 48)),
                         ("self_attn.o_proj", (48, 48)), ("mlp.gate_proj", (hidden, 48)), ("mlp.up_proj", (hidden, 48)),
                         ("mlp.down_proj", (48, hidden))):
            draws[p + n + ".weight"] = shape
    split = split_tensors(m.state_dict(), c)
    for name, shape in draws.items():
        std = m.init_std_of(name)
        assert torch.equal(split[name], torch.empty(shape).normal_(0.0, std, generator=g)), name


@pytest.mark.parametrize("masking", ["document", "document-prebuilt", "causal"])
def test_compiled_training_forward_has_no_graph_break(masking):
    """What the trainer compiles: the model called with targets (the fused loss on a CPU), in
    training mode with gradients, under bf16 autocast; document masking is the default recipe's,
    its mask built in the graph or, as the trainer stages it, passed in prebuilt. RoPE (per-token
    positions gathered from the rope_cos/rope_sin buffers) is traced into the same one graph."""
    m = Transformer(cfg(n_layers=1)).train()
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(0))
    kw = {}
    if masking.startswith("document"):
        segments = torch.tensor([[0] * 6 + [1] * 10, [0] * 16])
        kw = {"positions": document_positions(segments), "segments": segments}
    start = time.perf_counter()
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        if masking == "document-prebuilt":
            kw["prebuilt_mask"] = m.mask_for(16, idx.device, kw["segments"])
        explained = torch._dynamo.explain(m)(idx, targets=idx, **kw)
    assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
    assert explained.graph_count == 1
    assert time.perf_counter() - start < 30


def test_flex_prebuilt_block_masks_compile_into_one_graph_once():
    """FlexAttention's path (CUDA's default), its BlockMask passed in as the trainer stages it: one
    graph (a break would hand the backend a second), and a new batch's BlockMask, whose mask_mod is
    a new closure over new segments, does not recompile. Forward only: a CPU has no flex backward."""
    from torch._dynamo.testing import CompileCounter

    m = Transformer(cfg(n_layers=1, max_seq_len=16)).eval()
    m.doc_mask_backend = "flex"
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(m, backend=counter)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        segments = (torch.rand(2, 16, generator=g) < 0.2).long().cumsum(1)
        idx = torch.randint(0, 61, (2, 16), generator=g)
        with torch.no_grad():
            mask = m.mask_for(16, idx.device, segments)
            kw = {"positions": document_positions(segments), "segments": segments}
            assert torch.equal(compiled(idx, targets=idx, prebuilt_mask=mask, **kw), m(idx, targets=idx, **kw))
    assert counter.frame_count == 1


def test_a_rope_phase_boundary_recompiles_once_not_every_step():
    """Context extension (train/trainer.py _enter_phase -> set_rope) swaps the RoPE buffers: the
    compiled model recompiles once for the longer rows and tables, not on every step after; a
    phase that changes only rope_theta keeps its graph, and the graph reads the new tables."""
    from torch._dynamo.testing import CompileCounter

    m = Transformer(cfg(n_layers=1, max_seq_len=16), generator=torch.Generator().manual_seed(0)).train()
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(m, backend=counter)
    g = torch.Generator().manual_seed(1)

    def step(T: int) -> int:
        segments = (torch.rand(2, T, generator=g) < 0.2).long().cumsum(1)
        idx = torch.randint(0, 61, (2, T), generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            kw = {"positions": document_positions(segments), "segments": segments}
            nll = compiled(idx, targets=idx, prebuilt_mask=m.mask_for(T, idx.device, segments), **kw)
            nll.sum().backward()
            assert torch.equal(nll, m(idx, targets=idx, **kw))  # the graph reads the current tables
        return counter.frame_count

    assert [step(16), step(16)] == [1, 1]
    m.set_rope(m.config.model_copy(update={"max_seq_len": 64, "rope_theta": 40_000.0}))
    assert [step(64), step(64)] == [2, 2]
    m.set_rope(m.config.model_copy(update={"rope_theta": 90_000.0}))
    assert [step(64), step(64)] == [2, 2]


def test_an_old_checkpoints_optimizer_state_is_refused_with_one_line():
    c = cfg()
    m = Transformer(c)
    with pytest.raises(CheckpointError, match="old-checkpoint: written with separate q/k/v") as err:
        fused_layout(m, split_tensors(m.state_dict(), c), Path("old-checkpoint"), optimizer=True)
    assert "\n" not in str(err.value)
