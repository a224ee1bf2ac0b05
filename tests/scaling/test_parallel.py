"""Per-device memory of a parallel layout: Korthikanti et al.'s activation formula exactly, the
ZeRO/TP/PP sharding invariants, checkpointing, the 1F1B in-flight count, the bubble formula, and
seed 004's worked example (70B on 64 H100, TP 8, PP 2, DP 4: ~62 GB per GPU)."""

import math

import pytest

from tokenmill.config import ModelConfig
from tokenmill.scaling.devices import GB
from tokenmill.scaling.flops import param_count
from tokenmill.scaling.parallel import (Layout, activation_bytes, bubble_fraction, checkpoint_bytes, device_memory,
                                        layer_activation_bytes)
from tokenmill.scaling.plan import ARCHS

GPT = ModelConfig(vocab_size=50_000, d_model=1024, n_layers=24, n_heads=16, ffn="gelu", norm="layernorm",
                  tie_embeddings=False)  # GPT-shaped: F = 4h, full heads
LLAMA70 = ARCHS["llama2-70b"]


def test_bubble_formula():
    assert bubble_fraction(1, 7) == 0.0
    assert bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert bubble_fraction(2, 1) == pytest.approx(0.5)  # one micro-batch: the stages take turns
    fractions = [bubble_fraction(8, m) for m in (1, 4, 16, 64, 256)]
    assert fractions == sorted(fractions, reverse=True) and fractions[-1] < 0.03
    with pytest.raises(ValueError):
        bubble_fraction(0, 4)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_layer_activations_are_korthikanti_eq(t):
    """With dropout, materialized scores, GELU 4h and full heads the count is the paper's: sbh(34 + 5as/h)
    with sequence parallelism (/t), sbh(10 + 24/t + 5as/(ht)) without."""
    s, b, h, a = 2048, 2, GPT.d_model, GPT.n_heads
    base = dict(seq_len=s, micro_batch=b, tp=t, dropout=True, flash_attention=False)
    with_sp = layer_activation_bytes(GPT, Layout(**base, sequence_parallel=True))
    without = layer_activation_bytes(GPT, Layout(**base, sequence_parallel=False))
    assert with_sp == pytest.approx(s * b * h * (34 + 5 * a * s / h) / t, rel=1e-12)
    assert without == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)


def test_flash_attention_drops_the_quadratic_term():
    lay = dict(seq_len=8192, micro_batch=1)
    flash = layer_activation_bytes(GPT, Layout(**lay, flash_attention=True))
    scores = layer_activation_bytes(GPT, Layout(**lay, flash_attention=False))
    a, s = GPT.n_heads, 8192
    assert scores - flash == pytest.approx(2 * a * s * s - 4 * s * a)  # softmax output minus the log-sum-exp


def test_zero_stages_shard_what_they_say():
    plain = device_memory(LLAMA70, Layout(tp=8, pp=2, dp=4, zero=0))
    z = {k: device_memory(LLAMA70, Layout(tp=8, pp=2, dp=4, zero=k)) for k in (1, 2, 3)}
    assert z[1].optimizer == pytest.approx(plain.optimizer / 4) and z[1].grads == plain.grads
    assert z[2].grads == pytest.approx(plain.grads / 4) and z[2].weights == plain.weights
    assert z[3].weights == pytest.approx(plain.weights / 4)
    assert z[3].gathered > 0 and plain.gathered == z[1].gathered == z[2].gathered == 0
    totals = [plain.total, z[1].total, z[2].total, z[3].total]
    assert totals == sorted(totals, reverse=True)
    assert len({m.activations for m in (plain, *z.values())}) == 1  # ZeRO does not touch activations


def test_model_parallel_divides_the_states():
    one = device_memory(LLAMA70, Layout(zero=0, master_weights=True))
    n = param_count(LLAMA70)["total"]
    assert one.weights == pytest.approx(2 * n) and one.grads == pytest.approx(2 * n)
    assert one.optimizer == pytest.approx(12 * n)  # m, v and the master copy: 16 B/param in all (ZeRO paper)
    split = device_memory(LLAMA70, Layout(tp=4, pp=2, zero=0))
    for part in ("weights", "grads", "optimizer"):
        assert getattr(split, part) == pytest.approx(getattr(one, part) / 8)
    no_master = device_memory(LLAMA70, Layout(zero=0, master_weights=False))
    assert no_master.optimizer == pytest.approx(8 * n)


def test_checkpointing_keeps_layer_inputs_only():
    lay = Layout(seq_len=4096, micro_batch=2, sequence_parallel=False, checkpointing=True)
    full = layer_activation_bytes(GPT, lay)
    s, b, h, L, V = 4096, 2, GPT.d_model, GPT.n_layers, GPT.vocab_size
    assert checkpoint_bytes(GPT, lay) == 2 * s * b * h
    # one stage: L layer inputs, one layer recomputed, and the fp32 logits
    assert activation_bytes(GPT, lay) == pytest.approx(L * 2 * s * b * h + full + 4 * s * b * V)
    assert activation_bytes(GPT, lay) < activation_bytes(GPT, lay.model_copy(update={"checkpointing": False}))


def test_first_pipeline_stage_holds_p_micro_batches():
    lay = Layout(pp=4, micro_batches=32, seq_len=2048)
    per_layer = layer_activation_bytes(GPT, lay)
    assert activation_bytes(GPT, lay) == pytest.approx(4 * (GPT.n_layers // 4) * per_layer)
    # with fewer micro-batches than stages, only m are ever in flight
    two = lay.model_copy(update={"micro_batches": 2})
    first = 2 * (GPT.n_layers // 4) * per_layer
    last = (GPT.n_layers // 4) * per_layer + 4 * 2048 * GPT.vocab_size  # one micro-batch and the fp32 logits
    assert activation_bytes(GPT, two) == pytest.approx(max(first, last))


def test_more_micro_batch_more_memory_more_devices_less():
    small = device_memory(LLAMA70, Layout(tp=8, pp=2, dp=4, micro_batch=1, seq_len=8192)).total
    big = device_memory(LLAMA70, Layout(tp=8, pp=2, dp=4, micro_batch=2, seq_len=8192)).total
    wider = device_memory(LLAMA70, Layout(tp=8, pp=2, dp=8, micro_batch=1, seq_len=8192)).total
    assert small < big and wider < small


def test_seed_004_worked_example_70b_on_64_h100():
    """Seed 004: weights 8.75 + grads 8.75 + Adam (8 B/param over 64) 8.75 + activations with checkpointing
    "30-50 GB at seqlen 8K" + ~5 GB scratch = ~62 GB. Assumptions that reproduce it: Llama-2-70B's shape,
    ZeRO-1 over DP 4, no fp32 master copy (the seed counts Adam at 8 B/param), full activation checkpointing
    without sequence parallelism, micro-batch 3 × 8192 tokens, 1F1B with 2 micro-batches in flight, flash
    attention. Tolerance: the states within 2% of 8.75 GB (Llama-2-70B has 68.98B parameters, not 70B),
    activations inside the seed's own 30-50 GB range, the total within 10% of 62 GB."""
    lay = Layout(tp=8, pp=2, dp=4, zero=1, seq_len=8192, micro_batch=3, micro_batches=43, checkpointing=True,
                 sequence_parallel=False, master_weights=False, reserve_bytes=5 * GB)
    mem = device_memory(LLAMA70, lay)
    for part in (mem.weights, mem.grads, mem.optimizer):
        assert part / GB == pytest.approx(8.75, rel=0.02)
    assert 30 * GB <= mem.activations <= 50 * GB
    assert mem.total / GB == pytest.approx(62, rel=0.10)
    assert mem.total < 80 * GB  # it fits an H100, "tight but works"
    assert math.isclose(mem.total, sum(v for k, v in mem.as_dict().items() if k != "total"))
