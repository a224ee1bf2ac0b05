import time

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tokenmill.config import ModelConfig
from tokenmill.model.objectives import clm_loss
from tokenmill.model.transformer import Transformer
from tokenmill.scaling.flops import flops_per_token, gpu_peak_from_table, param_count, peak_flops


@pytest.mark.parametrize("kw", [{}, {"tie_embeddings": False, "n_kv_heads": 2}, {"ffn_hidden": 96, "n_layers": 3}])
def test_param_count_from_config_matches_the_model(kw):
    c = ModelConfig(**{"vocab_size": 101, "d_model": 64, "n_layers": 2, "n_heads": 4, "max_seq_len": 16, **kw})
    counts, m = param_count(c), Transformer(c)
    assert counts["total"] == m.num_params()
    assert counts["non_embedding"] == m.num_params(exclude_embeddings=True)


def test_flops_per_token_demo_model_by_hand():
    c = ModelConfig(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, max_seq_len=256)
    d, L, V, h, T = 256, 4, 4096, 704, 256
    per_layer = 4 * d * d + 3 * d * h + 2 * d
    n = L * per_layer + d + V * d  # blocks + final norm + (tied) lm head; no embedding lookup
    assert flops_per_token(c, T) == 6 * n + 12 * L * d * T


def test_flops_per_token_matches_torch_flop_counter():
    """torch's FlopCounterMode counts the matmul FLOPs of a real forward + backward; the math SDPA
    backend spells attention out as matmuls (the fused CPU kernel is not counted)."""
    c = ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64,
                    tie_embeddings=False)
    m = Transformer(c)
    B, T = 2, 64
    tokens = torch.randint(0, 512, (B, T + 1))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        clm_loss(m, tokens).backward()
    counted = counter.get_total_flops()
    # the formula's only extra is 6 FLOPs per norm gain (0.2 % here); elementwise ops count in neither
    assert counted == pytest.approx(flops_per_token(c, T) * B * T, rel=0.005)
    attention = 12 * 2 * 64 * T * B * T
    assert counted - attention == pytest.approx(6 * (param_count(c)["non_embedding"]) * B * T, rel=0.005)


def test_gpu_peak_table():
    assert gpu_peak_from_table("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_peak_from_table("NVIDIA H100 PCIe") == 756e12
    assert gpu_peak_from_table("NVIDIA H200") == 989e12
    assert gpu_peak_from_table("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_peak_from_table("NVIDIA A100-SXM4-80GB", torch.float32) == 156e12
    assert gpu_peak_from_table("Some Future GPU") is None


def test_cpu_peak_is_measured_once_and_cached():
    first = peak_flops("cpu")
    assert 1e8 < first < 1e14
    t0 = time.perf_counter()
    assert peak_flops("cpu") == first
    assert time.perf_counter() - t0 < 0.05


def test_param_count_and_flops_by_hand_for_moe_window_and_options():
    """A small MoE + sliding-window + QK-norm + GELU config counted by hand."""
    c = ModelConfig(vocab_size=100, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64,
                    ffn="gelu", ffn_hidden=64, qk_norm=True, n_experts=4, top_k=2, sliding_window=16,
                    tie_embeddings=False)
    d, hd, V, L, T = 32, 8, 100, 2, 64
    attn = d * 32 + 2 * d * 16 + 32 * d + 2 * hd  # q, k, v (2 kv heads), o, q/k-norm gains
    expert = 2 * d * 64  # GELU: up + down
    per_layer = attn + (d * 4 + 4 * expert) + 2 * d  # router + 4 experts + 2 norms
    active_layer = attn + (d * 4 + 2 * expert) + 2 * d
    counts = param_count(c)
    assert counts["per_layer"] == per_layer and counts["active_per_layer"] == active_layer
    assert counts["total"] == V * d + L * per_layer + d + V * d == Transformer(c).num_params()
    n_active = L * active_layer + d + V * d
    assert flops_per_token(c, T) == 6 * n_active + 12 * L * d * 16  # each query sees 16 keys, not 64
    # a window wider than the sequence changes nothing
    wide = c.model_copy(update={"sliding_window": 1024})
    assert flops_per_token(wide, T) == 6 * n_active + 12 * L * d * T


def test_learned_positions_are_embedding_not_compute():
    c = ModelConfig(vocab_size=100, d_model=32, n_layers=1, n_heads=4, max_seq_len=64, position="learned")
    base = c.model_copy(update={"position": "rope"})
    assert param_count(c)["embedding"] == param_count(base)["embedding"] + 64 * 32
    assert param_count(c)["total"] == Transformer(c).num_params()
    assert flops_per_token(c, 64) == flops_per_token(base, 64)


def test_moe_flops_match_torch_flop_counter():
    """Active-parameter FLOPs: the counter sees exactly top_k experts' matmuls per token."""
    c = ModelConfig(vocab_size=128, d_model=32, n_layers=1, n_heads=4, max_seq_len=32, ffn_hidden=64,
                    n_experts=4, top_k=2, tie_embeddings=False)
    m = Transformer(c)
    B, T = 2, 32
    tokens = torch.randint(0, 128, (B, T + 1))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        clm_loss(m, tokens).backward()
    assert counter.get_total_flops() == pytest.approx(flops_per_token(c, T) * B * T, rel=0.01)
