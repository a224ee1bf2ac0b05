"""`train.init_from`: a run starts from another run's checkpoint or from an HF Llama directory
(tokenmill's own export) with exactly those weights; a model config that does not fit is refused."""

from __future__ import annotations

import json

import pytest
import torch

from tokenmill.config import RunConfig
from tokenmill.export.hf_import import import_hf
from tokenmill.runs import RunDir, read_events
from tokenmill.train.init_from import InitFromError, init_from
from tokenmill.train.restore import load_model
from tokenmill.train.trainer import run_train


def _child(tiny_run, name, **train):
    data = tiny_run.config.model_dump(mode="json")
    data["name"] = name
    data["train"].update(train)
    run = RunDir.create(RunConfig.model_validate(data), tiny_run.path.parent / name)
    (run.path / "tokens").symlink_to(tiny_run.path / "tokens")
    return run


def test_a_run_starts_from_another_runs_weights(tiny_run):
    run_train(tiny_run)
    source, _ = load_model(tiny_run.path / "checkpoints", "cpu")
    # one step at a vanishing LR: the saved weights are the inherited ones, not a fresh init
    child = _child(tiny_run, "child", init_from=str(tiny_run.path / "checkpoints"), max_steps=1, lr=1e-12,
                   warmup_steps=0, ckpt_every=1, seed=99)
    run_train(child)
    got, _ = load_model(child.path / "checkpoints", "cpu")
    for name, t in source.state_dict().items():
        torch.testing.assert_close(got.state_dict()[name], t, atol=1e-6, rtol=0, msg=name)
    start = next(e for e in read_events(child.path / "events.jsonl") if e.get("kind") == "train_start")
    assert start["init_from"] == str((tiny_run.path / "checkpoints").resolve())
    assert any(e.get("kind") == "init_from" for e in read_events(child.path / "events.jsonl"))


def test_an_hf_directory_initializes_the_same_weights_and_a_misfit_is_refused(tiny_run, tmp_path):
    from safetensors.torch import save_file

    from tokenmill.export.hf import hf_state_dict, llama_config

    run_train(tiny_run)
    source, _ = load_model(tiny_run.path / "checkpoints", "cpu")
    hf = tmp_path / "hf"  # what `export hf` writes, without a tokenizer (the tiny store has none)
    hf.mkdir()
    save_file(hf_state_dict(source, source.config.tie_embeddings), str(hf / "model.safetensors"))
    (hf / "config.json").write_text(json.dumps(llama_config(source.config)))
    fresh = type(source)(source.config)
    info = init_from(fresh, str(hf))
    assert info["format"] == "hf-llama" and info["parity"]["max_rel_diff"] < 1e-5
    for name, t in source.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], t), name
    wider = type(source)(source.config.model_copy(update={"d_model": 64}))
    with pytest.raises(InitFromError, match="do not fit this run's model.*embed_tokens.weight"):
        init_from(wider, str(hf))
    with pytest.raises(InitFromError, match="not found"):
        init_from(fresh, str(tmp_path / "nowhere"))
    assert import_hf(hf)[1]["model_config"]["d_model"] == source.config.d_model
