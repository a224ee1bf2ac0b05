"""Data-parallel training with real processes: 2 CPU ranks (gloo) under torchrun give the
one-process loss sequence for the same global batch; the cross-rank check catches one rank's
silent corruption; only train runs under torchrun, on finished data stages."""

from __future__ import annotations

import gc
import json
import subprocess
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from tokenmill.config import ModelConfig, TrainConfig
from tokenmill.eval.evaluate import Evaluator
from tokenmill.model.transformer import Transformer
from tokenmill.pipeline import run_pipeline, run_stage
from tokenmill.tokens.store import TokenStore
from tokenmill.train.checkpoint import verify_checkpoint
from tokenmill.train.restore import load_model
from tokenmill.train.distributed import (DistributedError, RankMismatch, all_reduce_sum,
                                         check_replicas, compare_payloads, cross_rank_check, event_log,
                                         init_distributed, unwrap, wrap_model)

from tests.train.dist_helpers import env, events, finish, fp32_order_rtol, launch, make_run, max_rel_diff, series, torchrun

# FSDP2 computes the global gradient norm from per-shard partial sums (another summation order
# than one process), so its clip factor, and from there its losses, may differ in the last bits.
FSDP_RTOL = fp32_order_rtol()


def cli_train(run) -> None:
    """`torchrun --nproc-per-node 2 -m tokenmill train CONFIG` on the run directory."""
    out = subprocess.run(torchrun("-m", "tokenmill", "train", str(run.path / "config.yaml"), "--run-dir",
                                  str(run.path)), env=env(), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_ddp_under_torchrun_cli_gives_the_one_process_run_bit_for_bit(single, tmp_path):
    """2 ranks × grad_accum 1 == 1 process × grad_accum 2, for the same 512-token global batch."""
    run = make_run(tmp_path / "ddp", distributed="ddp", eval_every=6)
    cli_train(run)
    # DDP sums the two ranks' gradients (g1 + g2: the very additions one process does while
    # accumulating), so the whole run is the same arithmetic.
    assert series(run) == series(single)
    assert series(run, "grad_norm") == series(single, "grad_norm")
    start = events(run, "train_start")[0]
    assert start["world_size"] == 2 and start["parallel"] == "ddp" and start["tokens_per_step"] == 512
    # one timeline: rank 0 alone writes events, evaluations and checkpoints
    assert [e["step"] for e in events(run, "train_step")] == list(range(1, 13))
    assert len(events(run, "stage_start")) == 1 and len(events(run, "stage_done")) == 2  # tokenize + train
    assert [e["step"] for e in events(run, "eval")] == [6, 12]
    assert sorted(p.name for p in (run.path / "eval").iterdir()) == ["12.json", "6.json"]
    assert not events(run, "rank_mismatch")
    # a DDP checkpoint is the one-process format, with the very same weights and Adam state
    ours, theirs = run.path / "checkpoints" / "step_12", single.path / "checkpoints" / "step_12"
    assert verify_checkpoint(ours)["step"] == 12
    for name in ("model.safetensors", "optim.pt"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name


@pytest.mark.slow
def test_fsdp2_gives_the_one_process_losses(single, tmp_path):
    run = make_run(tmp_path / "fsdp", distributed="fsdp", eval_every=12)
    cli_train(run)
    diff = max_rel_diff(series(run), series(single))
    assert diff <= FSDP_RTOL, diff
    assert max_rel_diff(series(run, "grad_norm"), series(single, "grad_norm")) <= FSDP_RTOL
    start = events(run, "train_start")[0]
    assert start["parallel"] == "fsdp" and start["params"] == events(single, "train_start")[0]["params"]
    # sharded checkpoint; read back in this process (no process group), it holds the weights
    # the one-process run has at the same step
    state = verify_checkpoint(run.path / "checkpoints" / "step_12")
    assert state["kind"] == "dcp" and state["world_size"] == 2
    model, step = load_model(run.path / "checkpoints")
    reference = load_file(single.path / "checkpoints" / "step_12" / "model.safetensors")
    assert step == 12
    for name, t in reference.items():
        torch.testing.assert_close(model.state_dict()[name], t, rtol=FSDP_RTOL, atol=1e-7)
    # rank 0 evaluated a gathered full copy of the sharded model: the same numbers as
    # evaluating the checkpoint it saved at that step
    (ev,) = events(run, "eval")
    tc = run.config.train
    again = Evaluator(TokenStore(run.path / "tokens"), tc.seq_len, tc.eval_docs,
                      run.config.eval.batch_size).score(model, torch.device("cpu"), tc.dtype)
    assert ev["step"] == 12 and ev["buckets"] == again


@pytest.mark.slow
def test_a_rank_that_drifts_halts_the_run_with_a_rank_mismatch_event(tmp_path):
    """Rank 1 alone nudges a parameter after its 3rd optimizer step; the check at step 4 sees
    rank 1's parameters differ from rank 0's and stops every rank."""
    run = make_run(tmp_path / "sdc", distributed="ddp", checksum_every=2)
    code, out = finish(launch(run, "--flip-param-after", "3"))
    assert code != 0
    assert "RankMismatch" in out and "step 4" in out
    (ev,) = events(run, "rank_mismatch")
    assert ev["step"] == 4 and ev["ranks"] == [1] and "params" in ev["what"]
    assert max(series(run)) == 3  # step 4 was never applied


# --------------------------------------------------------------------------- unit level (spawned gloo ranks)
def _tiny_model() -> Transformer:
    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, max_seq_len=8, vocab_size=32)
    return Transformer(cfg, generator=torch.Generator().manual_seed(0))


def _checksum_rank(rank: int, world: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    results: dict = {}
    for mode in ("ddp", "fsdp"):
        ctx = init_distributed(TrainConfig(device="cpu", distributed=mode))  # borrows the group
        model = wrap_model(_tiny_model(), ctx)
        idx = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(rank))
        model(idx).float().logsumexp(-1).sum().backward()
        result: dict = {"sum": all_reduce_sum(float(rank + 1), ctx),
                        "config": model.config is unwrap(model).config}  # the DDP wrapper passes attributes through
        check_replicas(1, model, ctx, loss=1.0)  # a clean step passes
        logged: list = []
        log = event_log(type("Log", (), {"write": lambda self, *a, **k: logged.append(a)})(), ctx)
        if mode == "ddp" and rank == 1:  # one flipped bit in one gradient, after the reduction
            g = next(unwrap(model).parameters()).grad.view(-1)
            g[0] = torch.nextafter(g[0], torch.tensor(float("inf")))
        loss = 1.0 + 1e-12 if mode == "fsdp" and rank == 1 else 1.0  # FSDP: a replicated scalar differs
        try:
            cross_rank_check(7, model, ctx, log, loss=loss)
        except RankMismatch as exc:
            result.update(step=exc.step, ranks=exc.ranks, what=exc.what, logged=[list(a) for a in logged])
        results[mode] = result
        del model, log  # (the wrapped model holds communication state: gone before the group is)
        gc.collect()
        ctx.close()
    Path(out, f"{rank}.json").write_text(json.dumps(results))
    dist.barrier()  # no rank tears the group down under a peer's last collective
    dist.destroy_process_group()


@pytest.mark.slow
def test_the_checksum_names_the_step_and_the_rank_that_differs(tmp_path):
    mp.start_processes(_checksum_rank, args=(2, f"file://{tmp_path / 'store'}", str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2)]
    for mode, what in (("ddp", "grads"), ("fsdp", "loss")):  # DDP: gradients are replicas; FSDP: the scalars
        assert [r[mode]["sum"] for r in results] == [3.0, 3.0] and all(r[mode]["config"] for r in results)
        for r in results:  # every rank halts, naming the same step and rank
            assert (r[mode]["step"], r[mode]["ranks"], r[mode]["what"]) == (7, [1], what)
        assert results[0][mode]["logged"] == [["train", "rank_mismatch"]] and results[1][mode]["logged"] == []


def test_compare_payloads_is_bitwise_and_treats_nan_as_itself():
    compare_payloads(3, [{"loss": float("nan"), "grads": (1.0, 2.0, "ab")}] * 2)
    with pytest.raises(RankMismatch, match=r"step 3: rank\(s\) 2 disagree with rank 0 on grads"):
        compare_payloads(3, [{"grads": (1.0, 2.0, "ab")}, {"grads": (1.0, 2.0, "ab")}, {"grads": (1.0, 2.0, "ac")}])


def test_a_single_process_context_has_no_group_and_wraps_nothing():
    ctx = init_distributed(TrainConfig(device="cpu"))
    model = _tiny_model()
    assert (ctx.world_size, ctx.rank, ctx.mode, ctx.is_main, ctx.distributed) == (1, 0, "single", True, False)
    assert wrap_model(model, ctx) is model and not dist.is_initialized()
    assert all_reduce_sum(2.5, ctx) == 2.5 and ctx.any(True) and ctx.broadcast("x") == "x"
    check_replicas(1, model, ctx, loss=1.0)
    ctx.close()


def test_under_torchrun_only_train_runs_and_only_on_finished_data(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(DistributedError, match="only `train` is data-parallel"):
        run_stage(run, "tokenize")
    with pytest.raises(DistributedError, match="only `train` is data-parallel"):
        run_pipeline(run)
    (run.path / ".stages" / "tokenize.json").unlink()  # the data stages have not finished
    with pytest.raises(DistributedError, match=r"tokens is missing or stale .* `tokenmill tokenize CONFIG`"):
        run_stage(run, "train")
    assert not (run.path / "checkpoints").exists()


def test_the_world_comes_from_torchrun_environment(monkeypatch):
    from tokenmill.train.distributed import env_world, is_main_process

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert env_world() == (4, 3, 1) and not is_main_process()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(DistributedError, match="integers"):
        env_world()
