"""Tensor parallelism with real processes: 2 CPU ranks (gloo) under torchrun, the blocks sharded
with DTensor plans, give the one-process loss sequence of the same global batch (document-masked
attention, GQA: the tiny model has 4 query and 2 key/value heads); its sharded checkpoint
resumes on a data-parallel layout and continues the same loss curve."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from tokenmill.train.checkpoint import verify_checkpoint
from tokenmill.train.restore import load_model
from tokenmill.train.tensor_parallel import COLUMN, NORMS, ROW, block_plan

from tests.train.dist_helpers import copy_run, events, fp32_order_rtol, make_run, max_rel_diff, reconfigure, run_ok, series

pytestmark = pytest.mark.slow  # multi-process: `make test-slow` and CI run it, `make test` does not

# Row-parallel outputs are sums of two partial matmuls (another summation order than one
# process), and the clip factor comes from per-group norms: equal to float tolerance, not bits.
TP_RTOL = fp32_order_rtol()


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("tp") / "run", parallel={"tp": 2})
    run_ok(run)
    return run


def test_tp2_gives_the_one_process_losses_with_document_masks_and_gqa(single, tp2):
    assert tp2.config.mixture.doc_masking and tp2.config.model.n_kv_heads == 2
    assert len(series(tp2)) == 12
    assert max_rel_diff(series(tp2), series(single)) <= TP_RTOL
    assert max_rel_diff(series(tp2, "grad_norm"), series(single, "grad_norm")) <= TP_RTOL
    start = events(tp2, "train_start")[0]
    assert start["layout"] == "dp=1 × tp=2 × pp=1" and start["world_size"] == 2
    assert start["tokens_per_step"] == 512 and start["params"] == events(single, "train_start")[0]["params"]
    # the per-layer-group norms gather the shards: the same figures as one process
    for ours, theirs in zip(events(tp2, "train_step"), events(single, "train_step")):
        for group, norm in theirs["grad_norms"].items():
            assert ours["grad_norms"][group] == pytest.approx(norm, rel=TP_RTOL)
        assert ours["update_ratio"] == pytest.approx(theirs["update_ratio"], rel=1e-3)


def check_tp_sharding(sharding: dict, tp: int, dp: int = 1, sequence_parallel: bool = True) -> None:
    """Each rank holds 1/tp of every column- and row-parallel weight (DTensor Shard(0) / Shard(1)
    on the tp mesh dimension), the rest whole (or 1/dp of it under FSDP2), and no element twice
    beyond the replication the layout implies. Under sequence parallelism the blocks' norm gains
    are Replicate DTensors on the tp mesh dimension (the norms run on the rank's tokens)."""
    params = sharding["params"]
    plain = {n: p for n, p in params.items() if not any(n.startswith(f"layers.*.{m}.") for m in COLUMN + ROW)}
    for module, dim in [(m, 0) for m in COLUMN] + [(m, 1) for m in ROW]:
        name = f"layers.*.{module}.weight"
        if name not in params:
            assert module in ("mlp.gate_up_proj", "mlp.up_proj"), f"{name} missing"  # SwiGLU's or GELU's
            continue
        p = params[name]
        assert p["placements"] and p["placements"][-1] == f"Shard(dim={dim})", (name, p)
        assert p["local"][dim] * tp * (dp if dim == 0 else 1) == p["global"][dim], (name, p)
    over_dp = [] if dp == 1 else ["Shard(dim=0)"]
    for name, p in plain.items():  # embeddings, norms: whole on each tp rank (FSDP2 splits dim 0 over dp)
        seq_norm = sequence_parallel and any(name == f"layers.*.{n}.weight" for n in NORMS)
        assert p["placements"] == over_dp + (["Replicate()"] if seq_norm else []), (name, p)
        assert p["local"] == p["global"] or dp > 1, (name, p)
    ranks = sharding["numel_by_rank"]
    assert len(ranks) == tp * dp


def tp_sharded_numel(sharding: dict, n_layers: int) -> int:
    """Elements of the whole model's column- and row-parallel weights."""
    return n_layers * sum(math.prod(p["global"]) for n, p in sharding["params"].items()
                          if any(n == f"layers.*.{m}.weight" for m in COLUMN + ROW))


def test_every_rank_holds_only_its_shard(tp2):
    (start,) = events(tp2, "train_start")
    sharding = start["sharding"]
    check_tp_sharding(sharding, tp=2)
    # every sharded element on one rank, every replicated one on both: the total is exact
    sharded = tp_sharded_numel(sharding, tp2.config.model.n_layers)
    whole = start["params"] - sharded
    assert sharding["numel_by_rank"] == [whole + sharded // 2] * 2


def test_the_sharding_check_fails_when_no_plan_was_applied():
    from tokenmill.config import ModelConfig
    from tokenmill.model.transformer import Transformer
    from tokenmill.train.sharding import sharding_report

    model = Transformer(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32))
    unsharded = sharding_report(model)  # what a run whose plan silently did nothing would log
    assert unsharded["numel_by_rank"] == [model.num_params()]
    with pytest.raises(AssertionError):
        check_tp_sharding(unsharded, tp=2)


def test_a_tp_checkpoint_is_sharded_and_holds_the_one_process_weights(single, tp2):
    state = verify_checkpoint(tp2.path / "checkpoints" / "step_12")
    assert state["kind"] == "dcp" and state["world_size"] == 2
    model, step = load_model(tp2.path / "checkpoints")  # this process alone, no process group
    reference = load_file(single.path / "checkpoints" / "step_12" / "model.safetensors")
    assert step == 12
    for name, t in reference.items():
        torch.testing.assert_close(model.state_dict()[name], t, rtol=1e-4, atol=1e-5)  # Adam: tiny weights move by ~lr


def test_saved_at_tp2_resumed_at_dp2_continues_the_same_curve(tp2, tmp_path):
    resumed = copy_run(tp2, tmp_path / "resumed", keep_steps=8)
    resumed = reconfigure(resumed, parallel={"tp": 1}, distributed="ddp")
    run_ok(resumed, "--resume")
    (start,) = [e for e in events(resumed, "train_start") if e["step"] == 8]
    assert start["layout"] == "dp=2 × tp=1 × pp=1"
    theirs, ours = series(tp2), series(resumed)
    assert [s for s in ours if s > 8] == [9, 10, 11, 12]
    assert max(abs(ours[s] - theirs[s]) / theirs[s] for s in range(9, 13)) <= TP_RTOL


def test_the_plan_shards_attention_and_the_ffn_of_either_kind():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from tokenmill.config import ModelConfig
    from tokenmill.model.transformer import Block

    for ffn in ("swiglu", "gelu"):
        plan = block_plan(Block(ModelConfig(vocab_size=16, d_model=32, n_heads=4, ffn=ffn)))
        cols = {n for n, s in plan.items() if isinstance(s, ColwiseParallel)}
        rows = {n for n, s in plan.items() if isinstance(s, RowwiseParallel)}
        assert rows == {"self_attn.o_proj", "mlp.down_proj"}
        assert cols == {"self_attn.qkv_proj", "mlp.gate_up_proj" if ffn == "swiglu" else "mlp.up_proj"}


def test_dp2_by_tp2_on_four_ranks_composes_fsdp2_with_tp(single, tmp_path):
    """A 2-D mesh: FSDP2 over dp of the blocks tensor-parallel over tp (4 processes)."""
    run = make_run(tmp_path / "dp2tp2", parallel={"tp": 2}, metrics_every=0)
    run_ok(run, nproc=4)
    (start,) = events(run, "train_start")
    assert start["layout"] == "dp=2 × tp=2 × pp=1"
    check_tp_sharding(start["sharding"], tp=2, dp=2)
    # FSDP2 x TP: a block's tp-sharded weights on exactly one of the four ranks, everything else
    # (embedding, norms) split over dp and whole on both tp ranks
    sharded = tp_sharded_numel(start["sharding"], run.config.model.n_layers)
    assert sum(start["sharding"]["numel_by_rank"]) == sharded + 2 * (start["params"] - sharded)
    assert max_rel_diff(series(run), series(single)) <= TP_RTOL
