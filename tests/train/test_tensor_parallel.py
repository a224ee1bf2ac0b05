"""Tensor parallelism with real processes: 2 CPU ranks (gloo) under torchrun, the blocks sharded
with DTensor plans, give the one-process loss sequence of the same global batch (document-masked
attention, GQA: the tiny model has 4 query and 2 key/value heads); its sharded checkpoint
resumes on a data-parallel layout and continues the same loss curve."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tokenmill.train.checkpoint import verify_checkpoint
from tokenmill.train.restore import load_model
from tokenmill.train.tensor_parallel import block_plan

from tests.train.dist_helpers import copy_run, events, make_run, max_rel_diff, reconfigure, run_ok, series

# Row-parallel outputs are sums of two partial matmuls (another summation order than one
# process), and the clip factor comes from per-group norms: equal to float tolerance, not bits.
TP_RTOL = 2e-5


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
        assert cols == ({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.up_proj"}
                        | ({"mlp.gate_proj"} if ffn == "swiglu" else set()))


def test_dp2_by_tp2_on_four_ranks_composes_fsdp2_with_tp(single, tmp_path):
    """A 2-D mesh: FSDP2 over dp of the blocks tensor-parallel over tp (4 processes)."""
    run = make_run(tmp_path / "dp2tp2", parallel={"tp": 2}, metrics_every=0)
    run_ok(run, nproc=4)
    assert events(run, "train_start")[0]["layout"] == "dp=2 × tp=2 × pp=1"
    assert max_rel_diff(series(run), series(single)) <= TP_RTOL
