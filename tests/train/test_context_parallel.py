"""Context parallelism with real processes: 2 CPU ranks (gloo) under torchrun, each holding a
zig-zag half of every row and all-gathering K and V per block, give the one-process loss sequence
(document-masked attention, GQA); the run resumes onto plain data parallelism on the same curve.
Also: the layout refusals, and the activation memory a rank holds (about 1/cp)."""

from __future__ import annotations

import pytest

from tests.train.dist_helpers import copy_run, events, make_run, max_rel_diff, reconfigure, run_ok, series

# Attention over keys gathered in another order (and a softmax summed in another order) than one
# process: equal to float tolerance, as the tensor-parallel layouts (tests/train/test_tensor_parallel.py).
CP_RTOL = 2e-5


@pytest.fixture(scope="module")
def cp2(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("cp") / "run", parallel={"cp": 2})
    run_ok(run)
    return run


def test_cp2_gives_the_one_process_losses_with_document_masks_and_gqa(single, cp2):
    assert cp2.config.mixture.doc_masking and cp2.config.model.n_kv_heads == 2
    assert len(series(cp2)) == 12
    assert max_rel_diff(series(cp2), series(single)) <= CP_RTOL
    assert max_rel_diff(series(cp2, "grad_norm"), series(single, "grad_norm")) <= CP_RTOL
    (start,) = events(cp2, "train_start")
    assert start["layout"] == "dp=1 × tp=1 × pp=1 × cp=2" and start["world_size"] == 2
    assert start["tokens_per_step"] == 512
    # weights are replicated over cp (DDP over dp × cp): every rank holds the whole model
    assert start["sharding"]["numel_by_rank"] == [start["params"]] * 2


def test_saved_at_cp2_resumed_at_dp2_continues_the_same_curve(cp2, tmp_path):
    resumed = copy_run(cp2, tmp_path / "resumed", keep_steps=8)
    resumed = reconfigure(resumed, parallel={"cp": 1})
    run_ok(resumed, "--resume")
    (start,) = [e for e in events(resumed, "train_start") if e["step"] == 8]
    assert start["layout"] == "dp=2 × tp=1 × pp=1"
    theirs, ours = series(cp2), series(resumed)
    assert [s for s in ours if s > 8] == [9, 10, 11, 12]
    assert max(abs(ours[s] - theirs[s]) / theirs[s] for s in range(9, 13)) <= CP_RTOL
