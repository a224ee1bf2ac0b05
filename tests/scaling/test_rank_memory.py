"""Memory of one rank of a dp × tp × pp job: with no split it is scaling/memory.py's one-process
estimate exactly; the split parameters add up to the model; pipeline stages hold the micro-batches
1F1B and GPipe keep in flight; the plan reports it for a run config. (The comparison with real
ranks' measured peaks is benchmarks/bench_parallel_memory.py: within 1.121× on 42 ranks.)"""

from __future__ import annotations

import pytest

from tokenmill.config import ModelConfig, RunConfig, TrainConfig
from tokenmill.scaling.devices import get_device
from tokenmill.scaling.flops import param_count
from tokenmill.scaling.memory import estimate_train_memory, layer_activation_bytes
from tokenmill.scaling.plan import make_plan, resolve_inputs
from tokenmill.scaling.rank_memory import estimate_rank_memory, in_flight, stage_params

CFG = ModelConfig(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=256)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("accum,ckpt,doc", [(1, False, True), (2, False, True), (2, True, False), (1, True, True)])
def test_no_split_is_the_one_process_estimate(dtype, accum, ckpt, doc):
    tc = TrainConfig(micro_batch=8, seq_len=128, grad_accum=accum, activation_checkpointing=ckpt)
    ours = estimate_rank_memory(CFG, tc, dtype, doc_masking=doc)
    theirs = estimate_train_memory(CFG, tc, dtype, doc_masking=doc)
    assert {k: ours[k] for k in theirs if k in ours} == {k: theirs[k] for k in theirs if k in ours}


def test_fsdp_over_dp_alone_is_the_one_process_fsdp_estimate():
    tc = TrainConfig(micro_batch=8, seq_len=128, grad_accum=2)
    ours = estimate_rank_memory(CFG, tc, "bfloat16", dp=2, doc_masking=True)
    theirs = estimate_train_memory(CFG, tc, "bfloat16", world_size=2, mode="fsdp", doc_masking=True)
    assert ours["peak"] == theirs["peak"] and ours["fsdp_unsharded"] == theirs["fsdp_unsharded"]


@pytest.mark.parametrize("tied", [True, False])
def test_split_parameters_add_up_to_the_model(tied):
    cfg = CFG.model_copy(update={"tie_embeddings": tied})
    total = param_count(cfg)["total"]
    for tp, pp in ((1, 2), (2, 1), (2, 2), (1, 4)):
        stages = [stage_params(cfg, tp, pp, s) for s in range(pp)]
        norms = 2 * cfg.d_model * cfg.n_layers  # per-block gains: whole on every tp rank
        # tp ranks of a stage together hold each block matrix once and the rest tp times
        held = sum(tp * st["total"] for st in stages) - (tp - 1) * (sum(st["root"] for st in stages) + norms)
        copy = cfg.vocab_size * cfg.d_model if tied and pp > 1 else 0  # the last stage's tied head
        assert held == total + copy, (tp, pp)


def test_in_flight_micro_batches_per_schedule():
    assert [in_flight(4, s, 8) for s in range(4)] == [4, 3, 2, 1]
    assert [in_flight(4, s, 2) for s in range(4)] == [2, 2, 2, 1]
    assert [in_flight(2, s, 4, "gpipe") for s in range(2)] == [4, 4]
    assert in_flight(1, 0, 8) == 1


def test_tensor_parallel_shards_the_heads_and_columns_not_the_residual_stream():
    whole = layer_activation_bytes(CFG, 8, 128, "bfloat16", True)
    half = layer_activation_bytes(CFG, 8, 128, "bfloat16", True, tp=2)
    assert whole / 2 < half < whole
    one = estimate_rank_memory(CFG, TrainConfig(micro_batch=8, seq_len=128), "bfloat16", tp=2)
    assert one["params"] < estimate_rank_memory(CFG, TrainConfig(micro_batch=8, seq_len=128), "bfloat16")["params"]


def test_1f1b_holds_fewer_micro_batches_than_gpipe_on_the_first_stage():
    tc = TrainConfig(micro_batch=8, seq_len=128, grad_accum=8)
    f1b = estimate_rank_memory(CFG, tc, "float32", pp=2, stage=0)
    gpipe = estimate_rank_memory(CFG, tc, "float32", pp=2, stage=0, schedule="gpipe")
    assert (f1b["in_flight"], gpipe["in_flight"]) == (2, 8) and f1b["peak"] < gpipe["peak"]


def test_plan_with_a_run_config_reports_the_trainer_per_rank():
    run = RunConfig.model_validate({"model": CFG.model_dump(), "train": {"micro_batch": 8, "seq_len": 128}})
    inputs = resolve_inputs(run_cfg=run, devices=2)
    plan = make_plan(inputs.cfg, inputs.tokens, 2, get_device("h100"), 0.4, inputs.n_params, inputs.seq_len,
                     inputs.micro_batch, inputs.global_batch_tokens, {"tp": 1, "pp": 2, "dp": 1}, run_cfg=run)
    tm = plan.trainer_memory
    tc = run.train.model_copy(update={"grad_accum": plan.layout["layout"]["micro_batches"]})
    assert tm["peak"] == estimate_rank_memory(CFG, tc, "bfloat16", pp=2, doc_masking=run.mixture.doc_masking,
                                              device="cuda")["peak"]
    busiest = max(range(2), key=lambda st: estimate_rank_memory(CFG, tc, "bfloat16", pp=2, stage=st, device="cuda",
                                                               doc_masking=run.mixture.doc_masking)["peak"])
    assert tm["dtype"] == "bfloat16" and tm["stage"] == busiest
