"""Checkpoint averaging: the mean is exact, the result loads for evaluation and is never resumed
from, and every refusal says what to do."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.config import ModelConfig, TrainConfig
from tokenmill.model.transformer import Transformer
from tokenmill.train.averaging import average_checkpoints, last_valid_checkpoints
from tokenmill.train.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, model_tensors,
                                        save_checkpoint, verify_checkpoint)
from tokenmill.train.restore import load_checkpoint, load_model
from tokenmill.train.optimizer import build_optimizer

CFG = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=16)


def model(seed: int, dtype: torch.dtype = torch.float32, cfg: ModelConfig = CFG) -> Transformer:
    return Transformer(cfg, generator=torch.Generator().manual_seed(seed)).to(dtype)


def save(root, step, m, cfg: ModelConfig = CFG):
    opt = build_optimizer(m, TrainConfig(lr=1e-3))
    return save_checkpoint(root, step, m, opt, {"model_config": cfg.model_dump(mode="json"), "tokens": 100 * step})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mean_is_the_float64_mean_stored_in_the_original_dtype(tmp_path, dtype):
    models = [model(s, dtype) for s in (1, 2, 3)]
    paths = [save(tmp_path / "ckpts", 10 * (i + 1), m) for i, m in enumerate(models)]
    out = average_checkpoints(paths, tmp_path / "avg")
    got = load_model(out)[0].to(dtype)
    stored = model_tensors(got)
    sources = [model_tensors(m) for m in models]
    assert set(stored) == set(sources[0])
    for name, t in stored.items():
        expected = ((sources[0][name].double() + sources[1][name].double() + sources[2][name].double()) / 3).to(dtype)
        assert t.dtype == dtype and torch.equal(t, expected), name
        if not torch.equal(sources[0][name], sources[2][name]):  # (norm weights start at 1 in every model)
            assert not torch.equal(t, sources[2][name])  # really a mean, not one of the inputs
    assert all(t.dtype == dtype for t in load_file(str(out / "model.safetensors")).values())
    state = json.loads((out / "state.json").read_text())
    assert state["averaged_from"] == [10, 20, 30] and state["step"] == 30 and state["kind"] == "model_only"
    assert state["model_config"] == CFG.model_dump(mode="json") and state["tokens"] == 3000


def test_average_evaluates_but_is_never_resumed_from(tmp_path):
    root = tmp_path / "checkpoints"
    models = [model(s) for s in (4, 5)]
    for i, m in enumerate(models):
        save(root, i + 1, m)
    out = average_checkpoints(last_valid_checkpoints(root, 2), root / "avg_last2")
    assert sorted(p.name for p in out.iterdir()) == ["SHA256SUMS", "model.safetensors", "state.json"]
    assert verify_checkpoint(out)["averaged_from"] == [1, 2]
    loaded, step = load_model(out)
    assert step == 2 and not loaded.training
    tokens = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # the model computes with the mean weights (tied head included)
        ref = model(0)
        ref.load_state_dict({k: (models[0].state_dict()[k].double() + models[1].state_dict()[k].double()).div(2).float()
                             for k in ref.state_dict()})
        assert torch.equal(loaded(tokens), ref.eval()(tokens))
    # not a step checkpoint: resume, listing and retention do not see it
    assert [s for s, _ in list_checkpoints(root)] == [1, 2] and latest_checkpoint(root) == root / "step_2"
    with pytest.raises(CheckpointError, match="model weights only"):
        load_checkpoint(out, model(0), build_optimizer(model(0), TrainConfig()))
    # and it is verified like any checkpoint
    blob = bytearray((out / "model.safetensors").read_bytes())
    blob[-3] ^= 0x01
    (out / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_model(out)
    # averaging again replaces the (corrupt) average atomically
    average_checkpoints(last_valid_checkpoints(root, 2), out)
    assert load_model(out)[1] == 2 and not list(root.glob("*.tmp")) and not list(root.glob("*.old"))


def test_a_training_checkpoint_still_needs_every_file(tmp_path):
    path = save(tmp_path, 1, model(0))
    sums = (path / "SHA256SUMS").read_text().splitlines()
    (path / "SHA256SUMS").write_text("\n".join(line for line in sums if "optim.pt" not in line) + "\n")
    with pytest.raises(CheckpointError, match="does not list optim.pt"):
        verify_checkpoint(path)


def test_refusals_name_the_problem(tmp_path):
    root = tmp_path / "checkpoints"
    save(root, 1, model(0))
    wide = CFG.model_copy(update={"d_model": 64})
    save(root, 2, model(1, cfg=wide), cfg=wide)
    with pytest.raises(CheckpointError, match="different model configs.*d_model: 64 vs 32"):
        average_checkpoints(last_valid_checkpoints(root, 2), tmp_path / "avg")
    save(root, 3, model(2))
    (root / "step_3" / "optim.pt").write_bytes(b"torn")
    with pytest.warns(UserWarning, match="not averaging"):
        with pytest.raises(CheckpointError, match=r"2 valid checkpoint\(s\) \(step_1, step_2\), 3 needed.*step_3"):
            last_valid_checkpoints(root, 3)
    with pytest.raises(CheckpointError, match="step_<N>"):
        average_checkpoints([root / "step_1"], root / "step_9")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="not a model-only checkpoint"):
        average_checkpoints([root / "step_1"], tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").exists()


def test_cli_average_then_eval(tokenized_run):
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir
    from tokenmill.train.trainer import run_train

    cfg = tokenized_run.path / "config.yaml"
    sets = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=32", "train.seq_len=32",
            "train.micro_batch=4", "train.max_steps=6", "train.ckpt_every=2", "train.keep_checkpoints=3",
            "train.device=cpu", "train.threads=1", "train.eval_every=0", "eval.max_docs=2", "eval.num_samples=1",
            "eval.sample_tokens=4"]
    args = [str(cfg), *[a for s in sets for a in ("--set", s)]]
    run_train(RunDir.create(load_config(cfg, sets), tokenized_run.path), progress=False)
    runner = CliRunner()
    res = runner.invoke(app, ["checkpoint", "average", *args, "--last", "3"])
    assert res.exit_code == 0, res.output
    out = tokenized_run.path / "checkpoints" / "avg_last3"
    assert str(out) in res.output and verify_checkpoint(out)["averaged_from"] == [2, 4, 6]
    events = [json.loads(line) for line in (tokenized_run.path / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "checkpoint_average" and e["steps"] == [2, 4, 6] for e in events)
    res = runner.invoke(app, ["eval", *args, "--checkpoint", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads((tokenized_run.path / "eval" / "6.json").read_text())["checkpoint"] == str(out)
    res = runner.invoke(app, ["checkpoint", "average", *args, "--last", "4"])
    assert res.exit_code == 1 and "3 valid checkpoint(s)" in res.output and "Traceback" not in res.output


def test_a_sharded_fsdp_checkpoint_is_gathered_and_averaged(tmp_path):
    """An FSDP run's dcp checkpoint (written here by one process) averages with a full one."""
    import types
    import warnings

    from tokenmill.train import dist_checkpoint

    one_rank = types.SimpleNamespace(is_main=True, barrier=lambda: None, world_size=1, mode="fsdp")
    m1, m2 = model(1), model(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP: "no process group, assuming a single process"
        dist_checkpoint._save_dcp(tmp_path, 1, m1, None, {"model_config": CFG.model_dump(mode="json")}, one_rank,
                                  None, 0)
        save(tmp_path, 2, m2)
        assert verify_checkpoint(tmp_path / "step_1")["kind"] == "dcp"
        out = average_checkpoints([tmp_path / "step_1", tmp_path / "step_2"], tmp_path / "avg")
    got, (a, b) = model_tensors(load_model(out)[0]), (model_tensors(m1), model_tensors(m2))
    assert all(torch.equal(got[k], ((a[k].double() + b[k].double()) / 2).float()) for k in got)
