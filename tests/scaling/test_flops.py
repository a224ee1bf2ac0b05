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
