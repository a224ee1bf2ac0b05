"""Pipeline parallelism with real processes: 2 CPU ranks (gloo) under torchrun, each running one
stage of the tiny model (one block each, the tied embedding/head split between the first and the
last stage), give the one-process loss sequence of the same global batch through 1F1B and GPipe;
the sharded checkpoint holds the one-process weights and resumes in one process."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.scaling.parallel import bubble_fraction
from tokenmill.train.checkpoint import verify_checkpoint
from tokenmill.train.restore import load_model
from tokenmill.train.pipeline_parallel import prune_to_stage, stage_layers
from tokenmill.train.trainer import run_train

from tests.train.dist_helpers import copy_run, events, fp32_order_rtol, make_run, max_rel_diff, reconfigure, run_ok, series

pytestmark = pytest.mark.slow  # multi-process: `make test-slow` and CI run it, `make test` does not

# Another summation order for the clip norm (per stage, then summed) and the tied gradient
# (two stages' parts added): equal to float tolerance, not bits.
PP_RTOL = fp32_order_rtol()


@pytest.fixture(scope="module")
def pp2(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("pp") / "run", parallel={"pp": 2})
    run_ok(run)
    return run


def test_pp2_1f1b_gives_the_one_process_losses_with_tied_embeddings(single, pp2):
    assert pp2.config.model.tie_embeddings and pp2.config.mixture.doc_masking
    assert len(series(pp2)) == 12
    assert max_rel_diff(series(pp2), series(single)) <= PP_RTOL
    assert max_rel_diff(series(pp2, "grad_norm"), series(single, "grad_norm")) <= PP_RTOL
    for ours, theirs in zip(events(pp2, "train_step"), events(single, "train_step")):
        assert list(ours["grad_norms"]) == list(theirs["grad_norms"])  # every stage's groups, model order
        for group, norm in theirs["grad_norms"].items():
            assert ours["grad_norms"][group] == pytest.approx(norm, rel=PP_RTOL)
        assert ours["update_ratio"] == pytest.approx(theirs["update_ratio"], rel=1e-3)
    start = events(pp2, "train_start")[0]
    assert start["layout"] == "dp=1 × tp=1 × pp=2" and start["params"] == events(single, "train_start")[0]["params"]
    pipe = start["pipeline"]
    assert pipe["layers"] == [[0], [1]] and pipe["schedule"] == "1f1b" and pipe["micro_batches"] == 2
    assert pipe["bubble"] == pytest.approx(1 / 3) == bubble_fraction(2, 2)
    # each stage's measured idle share of every step: it cannot compute while the other fills or drains
    idle = [e["pipeline_idle"] for e in events(pp2, "train_step")]
    assert all(len(i) == 2 and all(0.0 < x < 1.0 for x in i) for i in idle)


def test_a_pp_checkpoint_holds_the_one_process_weights_and_resumes_in_one_process(single, pp2, tmp_path):
    state = verify_checkpoint(pp2.path / "checkpoints" / "step_12")
    assert state["kind"] == "dcp"
    model, _ = load_model(pp2.path / "checkpoints")
    reference = load_file(single.path / "checkpoints" / "step_12" / "model.safetensors")
    for name, t in reference.items():
        torch.testing.assert_close(model.state_dict()[name], t, rtol=1e-4, atol=1e-5)
    resumed = reconfigure(copy_run(pp2, tmp_path / "resumed", keep_steps=8), parallel={"pp": 1})
    run_train(resumed, resume=True, progress=False)
    theirs, ours = series(single), series(resumed)
    assert max(abs(ours[s] - theirs[s]) / theirs[s] for s in range(9, 13)) <= PP_RTOL


def test_gpipe_gives_the_same_losses(single, tmp_path):
    run = make_run(tmp_path / "gpipe", parallel={"pp": 2, "pp_schedule": "gpipe"}, metrics_every=0)
    run_ok(run)
    assert max_rel_diff(series(run), series(single)) <= PP_RTOL


def test_stages_keep_only_their_part_under_the_unsplit_names():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, tie_embeddings=True)
    full = {n for n, _ in Transformer(cfg).named_parameters()}
    names = []
    for stage in range(2):
        m = prune_to_stage(Transformer(cfg), 2, stage)
        assert isinstance(m.layers, nn.ModuleDict) and list(m.layers) == [str(i) for i in stage_layers(4, 2, stage)]
        names.append({n for n, _ in m.named_parameters()})
    assert "embed_tokens.weight" in names[0] and "embed_tokens.weight" in names[1]  # the tied head's copy
    assert "norm.weight" not in names[0] and "norm.weight" in names[1]
    assert names[0] | names[1] == full and names[0] & names[1] == {"embed_tokens.weight"}


def test_tp2_by_pp2_on_four_ranks(single, tmp_path):
    """Each pipeline stage's blocks tensor-parallel over 2 ranks (4 processes)."""
    run = make_run(tmp_path / "tp2pp2", parallel={"tp": 2, "pp": 2}, metrics_every=0)
    run_ok(run, nproc=4)
    assert events(run, "train_start")[0]["layout"] == "dp=1 × tp=2 × pp=2"
    assert max_rel_diff(series(run), series(single)) <= PP_RTOL


def test_dp2_by_pp2_on_four_ranks_sums_the_replicas_gradients(single, tmp_path):
    """Two pipelines of two stages, each reading half of every step's batch (4 processes) as 2
    micro-batches of 4 rows: the same 16 rows per step as the one-process run's 2 × 8."""
    run = make_run(tmp_path / "dp2pp2", parallel={"pp": 2}, metrics_every=0, micro_batch=4)
    run_ok(run, nproc=4)
    start = events(run, "train_start")[0]
    assert start["layout"] == "dp=2 × tp=1 × pp=2" and start["tokens_per_step"] == 512
    assert max_rel_diff(series(run), series(single)) <= PP_RTOL


def test_a_one_process_checkpoint_resumes_on_two_stages(single, tmp_path):
    """Full format (model.safetensors + optim.pt) saved by one process, each stage loading its part."""
    resumed = reconfigure(copy_run(single, tmp_path / "resumed", keep_steps=8), parallel={"pp": 2})
    run_ok(resumed, "--resume")
    theirs, ours = series(single), series(resumed)
    assert [s for s in ours if s > 8] == [9, 10, 11, 12]
    assert max(abs(ours[s] - theirs[s]) / theirs[s] for s in range(9, 13)) <= PP_RTOL
