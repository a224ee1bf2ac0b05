"""ZeRO-1/2 and FSDP2 inside pipeline stages with real processes (gloo, CPU, torchrun).

One launch per layout, each checked for everything at once: the one-process losses of the same
global batch, the placements and local sizes each rank logs in train_start, the optimizer-state
and gradient bytes each rank measured from its tensors (train_done's `zero`) against the memory
model, and a resume onto another layout (another ZeRO stage and world size) from its checkpoint.

- 8 ranks, dp 2 × tp 2 × pp 2 with ZeRO-1; its step-8 checkpoint resumed on 4 ranks, dp 2 × pp 2
  with FSDP2 (ZeRO-3) inside each stage.
- 2 ranks, ZeRO-1 over DDP; its step-8 checkpoint resumed under ZeRO-2 on 2 ranks and in one process.

Process start dominates each launch, so the runs stay short where that keeps the property: the
resumes start at step 8 (4 steps still run after the checkpoint), and the MFU peak is configured
(train.peak_tflops) rather than measured on every rank, which nothing here asserts.
"""

from __future__ import annotations

import pytest

from tokenmill.scaling.rank_memory import estimate_rank_memory
from tokenmill.train.trainer import run_train

from tests.train.dist_helpers import copy_run, events, fp32_order_rtol, make_run, max_rel_diff, reconfigure, run_ok, series

pytestmark = pytest.mark.slow  # multi-process: `make test-slow` and CI run it, `make test` does not

# the tolerance of the pipeline tests (another summation order for the norm and the tied gradient)
RTOL = fp32_order_rtol()
F32 = 4
# MFU is not asserted here: a configured peak skips each rank's start-up matmul measurement
FAST = {"metrics_every": 0, "peak_tflops": 1.0}


def _tail(run, after: int) -> dict[int, float]:
    return {s: v for s, v in series(run).items() if s > after}


def _estimate(run, dp: int, tp: int = 1, pp: int = 1, stage: int = 0, zero: int = 0) -> dict:
    tc = run.config.train.model_copy(update={"grad_accum": 2})
    return estimate_rank_memory(run.config.model.model_copy(update={"vocab_size": _vocab(run)}), tc, "float32",
                                dp=dp, tp=tp, pp=pp, stage=stage, zero=zero)


def _vocab(run) -> int:
    (start,) = events(run, "train_start")[:1]
    return start["sharding"]["params"]["embed_tokens.weight"]["global"][0]


@pytest.fixture(scope="module")
def zero1_3d(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("z1") / "run", parallel={"dp": 2, "tp": 2, "pp": 2, "zero": 1},
                   micro_batch=4, **FAST)
    run_ok(run, nproc=8)
    return run


def test_zero1_on_dp2_tp2_pp2_gives_the_one_process_losses_with_sharded_optimizer_state(single, zero1_3d):
    start = events(zero1_3d, "train_start")[0]
    assert start["layout"] == "dp=2 × tp=2 × pp=2" and start["parallel"] == "ddp"
    assert max_rel_diff(series(zero1_3d), series(single)) <= RTOL
    assert max_rel_diff(series(zero1_3d, "grad_norm"), series(single, "grad_norm")) <= RTOL
    params = start["sharding"]["params"]
    qkv = params["layers.*.self_attn.qkv_proj.weight"]
    assert qkv["placements"] == ["Shard(dim=0)"] and qkv["local"][0] * 2 == qkv["global"][0]  # tp only: replicated over dp
    numel = start["sharding"]["numel_by_rank"]  # rank = (pp·dp + d)·tp + t: a stage's dp replicas hold the same
    assert numel[0] == numel[2] and numel[4] == numel[6] and len(numel) == 8
    done = events(zero1_3d, "train_done")[0]["zero"]
    assert done["stage"] == 1
    opt, grads = done["optimizer_bytes"], done["grad_bytes"]
    for stage in (0, 1):
        r = 4 * stage  # its dp replicas r and r + 2 own disjoint halves of the stage's m and v
        assert opt[r] + opt[r + 2] == 2 * F32 * numel[r] and grads[r] == F32 * numel[r]  # whole gradients
        est = _estimate(zero1_3d, dp=2, tp=2, pp=2, stage=stage, zero=1)
        assert est["optimizer"] <= max(opt[r], opt[r + 2]) <= 1.1 * est["optimizer"], (opt, est["optimizer"])


def test_fsdp_inside_the_stages_of_dp2_tp2_pp2_resumes_the_zero1_checkpoint(single, zero1_3d, tmp_path):
    """dp 2 × tp 2 × pp 2 with every stage FSDP2-sharded over its dp ranks (ZeRO-3) around its tensor
    parallelism, from the 8-rank ZeRO-1 checkpoint of step 8 (ZeRO 1 → 3, optimizer state resharded by name)."""
    resumed = reconfigure(copy_run(zero1_3d, tmp_path / "z3", keep_steps=8), parallel={"tp": 2, "pp": 2, "zero": 3})
    run_ok(resumed, "--resume", nproc=8)
    ours, theirs = _tail(resumed, 8), series(single)
    assert sorted(ours) == [9, 10, 11, 12]
    assert max(abs(ours[s] - theirs[s]) / theirs[s] for s in ours) <= RTOL
    start = events(resumed, "train_start")[-1]
    assert start["layout"] == "dp=2 × tp=2 × pp=2" and start["parallel"] == "fsdp"
    # every parameter sharded over dp (the first mesh dimension), the blocks' matrices over tp as well
    assert all("Shard(dim=0" in p["placements"][0] for p in start["sharding"]["params"].values()), sorted(
        {str(p["placements"]) for p in start["sharding"]["params"].values()})
    assert any(len(p["placements"]) == 2 and "Shard" in p["placements"][1] for p in start["sharding"]["params"].values())
    done = events(resumed, "train_done")[-1]["zero"]
    numel = start["sharding"]["numel_by_rank"]
    assert done["grad_bytes"] == [F32 * n for n in numel] and done["optimizer_bytes"] == [2 * F32 * n for n in numel]
    for stage in (0, 1):  # ranks 0-3 hold stage 0 and 4-7 stage 1
        est = _estimate(resumed, dp=2, tp=2, pp=2, stage=stage, zero=3)
        assert abs(done["optimizer_bytes"][4 * stage] - est["optimizer"]) <= 0.02 * est["optimizer"]


@pytest.fixture(scope="module")
def zero1_ddp(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("z1ddp") / "run", parallel={"zero": 1}, **FAST)
    run_ok(run)
    return run


def test_zero1_over_ddp_halves_the_optimizer_state(single, zero1_ddp):
    assert max_rel_diff(series(zero1_ddp), series(single)) <= RTOL
    start = events(zero1_ddp, "train_start")[0]
    assert start["parallel"] == "ddp" and all(not p["placements"] for p in start["sharding"]["params"].values())
    n = start["params"]
    done = events(zero1_ddp, "train_done")[0]["zero"]
    assert sum(done["optimizer_bytes"]) == 2 * F32 * n and done["grad_bytes"] == [F32 * n] * 2
    est = _estimate(zero1_ddp, dp=2, zero=1)
    assert est["optimizer"] == -(-2 * F32 * n // 2) and max(done["optimizer_bytes"]) <= 1.02 * est["optimizer"]


def test_zero1_checkpoint_resumes_under_zero2_and_in_one_process(single, zero1_ddp, tmp_path):
    z2 = reconfigure(copy_run(zero1_ddp, tmp_path / "z2", keep_steps=8), parallel={"zero": 2})
    run_ok(z2, "--resume")
    theirs = series(single)
    ours = _tail(z2, 8)
    assert sorted(ours) == [9, 10, 11, 12] and max(abs(ours[s] - theirs[s]) / theirs[s] for s in ours) <= RTOL
    start = events(z2, "train_start")[-1]
    assert start["parallel"] == "fsdp" and all(p["placements"] == ["Shard(dim=0)"] for p in start["sharding"]["params"].values())
    done, est = events(z2, "train_done")[-1]["zero"], _estimate(z2, dp=2, zero=2)
    n = start["params"]
    assert sum(done["grad_bytes"]) == F32 * n and sum(done["optimizer_bytes"]) == 2 * F32 * n  # each element once
    assert max(done["grad_bytes"]) <= 1.02 * est["grads"] and max(done["optimizer_bytes"]) <= 1.02 * est["optimizer"]
    assert est["grads"] == -(-F32 * n // 2) and est["fsdp_unsharded"] == F32 * n  # the whole model gathered until its backward

    one = copy_run(zero1_ddp, tmp_path / "one", keep_steps=8)  # the same config: one process ignores zero
    run_train(one, resume=True, progress=False)
    ours = _tail(one, 8)
    assert sorted(ours) == [9, 10, 11, 12] and max(abs(ours[s] - theirs[s]) / theirs[s] for s in ours) <= RTOL


# ------------------------------------------------------------------ refusals, before any process starts
def _train(**train):
    from tokenmill.config import RunConfig

    cfg = RunConfig.model_validate({"name": "t", "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "vocab_size": 64},
                                    "train": train})
    return cfg.model, cfg.train


@pytest.mark.parametrize("parallel, nproc, words", [
    ({"zero": 2}, 1, "train.parallel.zero=2 needs dp > 1"),
    ({"zero": 1, "tp": 2}, 4, "train.parallel.zero=1 with tp > 1 and pp = 1"),
])
def test_a_zero_stage_the_layout_cannot_run_is_one_line_naming_the_field(parallel, nproc, words):
    from tokenmill.train.layout import LayoutError, check_launch

    model, train = _train(parallel=parallel, grad_accum=2)
    with pytest.raises(LayoutError) as err:
        check_launch(model, train, nproc)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_zero_and_distributed_must_agree_and_muon_needs_whole_matrices():
    from pydantic import ValidationError

    from tokenmill.train.layout import LayoutSizes, zero_stage

    with pytest.raises(ValidationError, match="train.parallel.zero=1 contradicts train.distributed=fsdp"):
        _train(distributed="fsdp", parallel={"zero": 1})
    with pytest.raises(ValidationError, match="train.parallel.zero >= 2"):
        _train(optimizer="muon", parallel={"zero": 2})
    _train(optimizer="muon", parallel={"zero": 1})  # whole tensors per owner: Muon runs
    dp2 = LayoutSizes(dp=2)
    assert zero_stage(_train()[1], dp2) == 0 and zero_stage(_train(distributed="fsdp")[1], dp2) == 3
    assert zero_stage(_train(parallel={"zero": 2})[1], dp2) == 2 and zero_stage(_train(parallel={"zero": 2})[1], LayoutSizes()) == 0
    assert zero_stage(_train(parallel={"tp": 2})[1], LayoutSizes(dp=2, tp=2)) == 3  # tp without pp: FSDP2, as before


def test_the_rank_memory_model_shards_what_each_zero_stage_shards():
    from tokenmill.config import ModelConfig, TrainConfig

    cfg = ModelConfig(d_model=256, n_layers=4, n_heads=4, vocab_size=4096, max_seq_len=128)
    tc = TrainConfig(micro_batch=4, seq_len=128, grad_accum=2)
    est = {z: estimate_rank_memory(cfg, tc, "float32", dp=4, zero=z) for z in range(4)}
    assert est[0]["optimizer"] == 4 * est[1]["optimizer"] and est[1]["optimizer"] == est[2]["optimizer"] == est[3]["optimizer"]
    assert est[1]["grads"] == 4 * est[2]["grads"] and est[0]["ddp_buckets"] == est[1]["ddp_buckets"] == est[0]["grads"]
    assert est[2]["params"] == est[3]["params"] and est[2]["fsdp_unsharded"] > est[3]["fsdp_unsharded"]
    assert est[0]["peak"] > est[1]["peak"] > est[2]["peak"] > est[3]["peak"]
    assert estimate_rank_memory(cfg, tc, "float32", dp=4) == est[3]  # the trainer's default without a pipeline
    piped = estimate_rank_memory(cfg, tc, "float32", dp=2, pp=2, stage=0)
    assert piped == estimate_rank_memory(cfg, tc, "float32", dp=2, pp=2, stage=0, zero=0)  # around a pipeline: 0
