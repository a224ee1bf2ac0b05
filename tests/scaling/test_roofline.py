"""The roofline of a training step: its model FLOPs equal flops.py's count, intensities follow the
matmul formula, elementwise work is memory-bound on an H100 and big matmuls compute-bound."""

from __future__ import annotations

import pytest

from tokenmill.config import ModelConfig
from tokenmill.scaling.devices import get_device
from tokenmill.scaling.flops import flops_per_token
from tokenmill.scaling.plan import make_plan
from tokenmill.scaling.roofline import _matmul, op_classes, roofline, roofline_summary

CFG = ModelConfig(vocab_size=32000, d_model=768, n_layers=12, n_heads=12, n_kv_heads=4, max_seq_len=1024)


@pytest.mark.parametrize("tied", [True, False])
def test_model_flops_of_the_classes_are_flops_per_token_times_tokens(tied):
    cfg = CFG.model_copy(update={"tie_embeddings": tied})
    b, s = 8, 1024
    model = sum(oc.flops for oc in op_classes(cfg, b, s) if oc.model_flops)
    norm_gains = (2 * cfg.n_layers + 1) * cfg.d_model  # in flops.py's 6·N, elementwise work here
    assert model == pytest.approx((flops_per_token(cfg, s) - 6 * norm_gains) * b * s, rel=1e-12)


def test_matmul_intensity_and_tensor_parallel_split():
    flops, traffic = _matmul(4096, 4096, 4096, 2)
    assert flops / traffic == pytest.approx(2 * 4096 / (3 * 2))
    one, two = op_classes(CFG, 8, 1024), op_classes(CFG, 8, 1024, tp=2)
    for a, b in zip(one, two):
        if a.name.startswith(("attention projections", "FFN", "attention scores")):
            assert b.flops == pytest.approx(a.flops / 2)
    half = op_classes(CFG, 8, 1024, pp=2, last_stage=False)
    assert [oc.name for oc in half if "head" in oc.name or "loss" in oc.name] == []


def test_h100_bounds_and_ceiling():
    h100 = get_device("h100")
    rows = {r.name: r for r in roofline(op_classes(CFG, 8, 1024), h100.peak_flops, h100.memory_bandwidth)}
    assert rows["FFN matmuls"].bound == "compute" and rows["norms, activation, residuals, RoPE"].bound == "memory"
    assert rows["optimizer (AdamW, fp32; per micro-batch)"].bound == "memory"
    assert sum(r.share for r in rows.values()) == pytest.approx(1.0)
    r = rows["norms, activation, residuals, RoPE"]
    assert r.seconds == pytest.approx(r.bytes / h100.memory_bandwidth)  # memory-bound: traffic over bandwidth
    summary = roofline_summary(list(rows.values()), h100.peak_flops, h100.memory_bandwidth)
    assert summary["ridge_flops_per_byte"] == pytest.approx(989e12 / 3.35e12)
    assert 0 < summary["mfu_ceiling"] < 1


def test_the_plan_carries_the_roofline_of_its_layout():
    plan = make_plan(CFG, 2.5e9, 1, get_device("h100"), seq_len=1024, micro_batch=8)
    names = [r["name"] for r in plan.roofline["rows"]]
    assert names[0] == "attention projections (q, k, v, o)" and "optimizer (AdamW, fp32; per micro-batch)" in names
    no_bw = get_device("h100").model_copy(update={"memory_bandwidth": None})
    assert make_plan(CFG, 2.5e9, 1, no_bw, seq_len=1024).roofline is None


def test_one_optimizer_step_is_shared_by_the_micro_batches_and_the_zero_shards():
    """A step of m micro-batches runs AdamW once: each micro-batch carries 1/m of it, and ZeRO over
    dp ranks leaves each device 1/dp of the parameters to update."""
    def opt(**kw):
        return [oc for oc in op_classes(CFG, 8, 1024, **kw) if oc.name.startswith("optimizer")][0]
    whole = opt()
    assert opt(micro_batches=4).flops == pytest.approx(whole.flops / 4)
    assert opt(micro_batches=4, optimizer_shards=8).bytes == pytest.approx(whole.bytes / 32)
    # the plan passes its layout's m and ZeRO shards (2.5e9 tokens on 8 H100s: DP with many micro-batches)
    plan = make_plan(CFG, 2.5e9, 8, get_device("h100"), seq_len=1024, micro_batch=8)
    lay = plan.layout["layout"]
    row = [r for r in plan.roofline["rows"] if r["name"].startswith("optimizer")][0]
    want = opt(tp=lay["tp"], pp=lay["pp"], micro_batches=lay["micro_batches"],
               optimizer_shards=lay["dp"] if lay["zero"] >= 1 else 1)
    assert lay["micro_batches"] * lay["dp"] > 1 and row["flops"] == pytest.approx(want.flops)
