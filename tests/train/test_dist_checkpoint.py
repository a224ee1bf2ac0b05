"""Checkpoints of data-parallel runs with real processes: an FSDP2 job killed with SIGKILL and
resumed on 2 ranks repeats the uninterrupted run exactly; sharded (DCP) and DDP checkpoints
resume on another world size and under the other parallelism; the files are verified and
loading them runs no code."""

from __future__ import annotations

import os
import pickle
import signal

import pytest
import torch

from tokenmill.train.checkpoint import CheckpointError, latest_checkpoint, verify_checkpoint
from tokenmill.train.restore import load_model
from tokenmill.train.dist_checkpoint import DCP_DIR, _MetadataUnpickler, _safe_reader, agreed_latest_checkpoint
from tokenmill.train.distributed import DistContext
from tokenmill.train.trainer import run_train

from tests.train.dist_helpers import (copy_run, events, finish, fp32_order_rtol, kill_ranks, launch, make_run,
                                      max_rel_diff, reconfigure, run_ok, series, wait_for)

# Across world sizes and parallelisms the arithmetic is the same up to the summation order of
# the global gradient norm (FSDP sums per-shard partial norms): losses agree to this relative
# tolerance (measured: equal to the last bit on this run).
RTOL = fp32_order_rtol()


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory):
    """An uninterrupted 2-rank FSDP2 run: 12 steps, sharded checkpoints at 4, 8 and 12."""
    run = make_run(tmp_path_factory.mktemp("fsdp") / "run", distributed="fsdp")
    run_ok(run)
    return run


@pytest.mark.slow
def test_a_killed_fsdp_job_resumed_on_2_ranks_repeats_the_uninterrupted_run(fsdp, tmp_path):
    run = make_run(tmp_path / "killed", distributed="fsdp")
    proc = launch(run, "--sleep", "0.25")
    wait_for(lambda: any(e["step"] == 4 for e in events(run, "checkpoint")), proc)
    kill_ranks(run, proc)  # every rank SIGKILLed: no handler, no final checkpoint
    killed_at = max(series(run))
    assert 4 <= killed_at < 12, killed_at
    run_ok(run, "--resume")
    (resumed,) = events(run, "resumed")
    assert resumed["step"] in (4, 8)
    # same world size, same layout, same kernels: the same numbers, bit for bit (`series` also
    # checks that every step replayed after the resume repeats the killed job's value)
    assert series(run) == series(fsdp)
    assert series(run, "grad_norm") == series(fsdp, "grad_norm")
    assert (verify_checkpoint(run.path / "checkpoints" / "step_12")["loss"]
            == verify_checkpoint(fsdp.path / "checkpoints" / "step_12")["loss"])


@pytest.mark.slow
def test_ctrl_c_stops_every_ddp_rank_at_the_same_step_with_a_checkpoint(single, tmp_path):
    """SIGINT to torchrun (what Ctrl-C does): it forwards the signal to the ranks, they agree on
    one step to stop at (whichever rank saw it first), save there and exit. That DDP checkpoint,
    resumed by one process, goes on with the one-process losses bit for bit."""
    run = make_run(tmp_path / "ctrl_c", distributed="ddp")
    proc = launch(run, "--sleep", "0.25")
    wait_for(lambda: any(e["step"] == 4 for e in events(run, "checkpoint")), proc)
    os.kill(proc.pid, signal.SIGINT)
    code, out = finish(proc)
    assert code != 0
    (stop,) = events(run, "interrupted")
    assert 4 <= stop["step"] < 12 and stop["checkpoint"].endswith(f"step_{stop['step']}")
    assert verify_checkpoint(run.path / "checkpoints" / f"step_{stop['step']}")["step"] == stop["step"]
    assert max(series(run)) == stop["step"]  # no rank went on past the agreed step
    run_train(run, resume=True, progress=False)  # 2 ranks -> 1 process
    assert events(run, "resumed")[0]["step"] == stop["step"]
    assert series(run) == series(single)


def test_an_fsdp_checkpoint_resumes_in_one_process(fsdp, tmp_path):
    run = copy_run(fsdp, tmp_path / "one", keep_steps=4)  # 2 ranks -> 1 process
    run_train(run, resume=True, progress=False)
    assert events(run, "resumed")[0]["checkpoint"].endswith("step_4")
    assert max_rel_diff(series(run), series(fsdp)) <= RTOL
    assert "model.safetensors" in {p.name for p in (run.path / "checkpoints" / "step_12").iterdir()}


@pytest.mark.slow
def test_fsdp_to_ddp_then_ddp_to_one_process(fsdp, tmp_path):
    """A sharded checkpoint resumed by 2 DDP ranks; that DDP job's checkpoint resumed by 1 process."""
    ddp = reconfigure(copy_run(fsdp, tmp_path / "ddp", keep_steps=4), distributed="ddp")
    run_ok(ddp, "--resume")
    assert events(ddp, "resumed")[0]["checkpoint"].endswith("step_4")
    assert max_rel_diff(series(ddp), series(fsdp)) <= RTOL
    assert verify_checkpoint(ddp.path / "checkpoints" / "step_8").get("kind") is None  # the full format

    one = copy_run(ddp, tmp_path / "one", keep_steps=8)
    run_train(one, resume=True, progress=False)
    assert events(one, "resumed")[-1]["checkpoint"].endswith("step_8")
    assert series(one) == series(ddp)  # DDP is one process's arithmetic, bit for bit


def test_a_one_process_checkpoint_resumes_on_2_fsdp_ranks(single, tmp_path):
    run = reconfigure(copy_run(single, tmp_path / "two", keep_steps=4), distributed="fsdp")  # 1 -> 2
    run_ok(run, "--resume")
    assert events(run, "resumed")[0]["checkpoint"].endswith("step_4")
    assert max_rel_diff(series(run), series(single)) <= RTOL
    assert verify_checkpoint(run.path / "checkpoints" / "step_8")["kind"] == "dcp"


def test_sharded_checkpoints_are_verified_file_by_file(fsdp, tmp_path):
    run = copy_run(fsdp, tmp_path / "corrupt")
    root = run.path / "checkpoints"
    listed = (root / "step_12" / "SHA256SUMS").read_text()
    for name in (f"{DCP_DIR}/.metadata", f"{DCP_DIR}/__0_0.distcp", f"{DCP_DIR}/__1_0.distcp", "rng.safetensors",
                 "state.json"):
        assert f"  {name}\n" in listed
    state = verify_checkpoint(root / "step_12")
    assert state["kind"] == "dcp" and state["mode"] == "fsdp" and state["step"] == 12
    assert {"model_config", "train_fingerprint", "data_cursor", "scheduler", "guard", "rng"} <= set(state)

    shard = root / "step_12" / DCP_DIR / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in rank 1's shard
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="__1_0.distcp has SHA-256"):
        verify_checkpoint(root / "step_12")
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        assert latest_checkpoint(root) == root / "step_8"
    with pytest.warns(UserWarning):
        assert agreed_latest_checkpoint(root, None, DistContext()) == root / "step_8"
    (root / "step_8" / DCP_DIR / "__0_0.distcp").unlink()  # a lost shard
    with pytest.raises(CheckpointError, match="__0_0.distcp is missing"):
        verify_checkpoint(root / "step_8")
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        model, step = load_model(root)  # `tokenmill eval`'s loader falls back too
    assert step == 4 and not model.training


def test_dcp_metadata_is_read_without_running_code(fsdp, tmp_path):
    meta = fsdp.path / "checkpoints" / "step_12" / DCP_DIR / ".metadata"
    with open(meta, "rb") as fh:
        assert type(_MetadataUnpickler(fh).load()).__name__ == "Metadata"
    assert _safe_reader(meta.parent).read_metadata().state_dict_metadata  # DCP's reader, restricted

    class Exploit:  # a harmless call: os.getcwd (print is rebound by Ray once it ran in this process)
        def __reduce__(self):
            return (os.getcwd, ())

    evil = tmp_path / ".metadata"
    evil.write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(CheckpointError, match="getcwd"):
        _safe_reader(tmp_path).read_metadata()


def test_a_sharded_checkpoint_loads_in_one_process_with_its_weights(fsdp, single):
    """`load_model` (what `tokenmill eval` uses) reads the shards of both ranks with no process
    group, and gets the weights the one-process run has at that step."""
    model, step = load_model(fsdp.path / "checkpoints" / "step_8")
    reference, _ = load_model(single.path / "checkpoints" / "step_8")
    assert step == 8
    sd = model.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["embed_tokens.weight"].data_ptr()  # still tied
    for name, t in reference.state_dict().items():
        torch.testing.assert_close(sd[name], t, rtol=RTOL, atol=1e-7)
