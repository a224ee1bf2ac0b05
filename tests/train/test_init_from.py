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


def _bpe(path, words):
    from tokenizers import Tokenizer, models, trainers

    tok = Tokenizer(models.BPE())
    tok.train_from_iterator(words, trainers.BpeTrainer(vocab_size=40, show_progress=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tok.to_str())
    return path


def test_a_token_store_made_with_another_tokenizer_is_refused(tmp_path):
    import hashlib

    from tokenmill.train.init_from import check_store_tokenizer, source_tokenizer

    source_run = tmp_path / "source"
    mine = _bpe(source_run / "tokenizer" / "tokenizer.json", ["abc abd abe"] * 5)
    theirs = _bpe(tmp_path / "other" / "tokenizer.json", ["xyz xyw"] * 5)
    (source_run / "checkpoints").mkdir()
    source = str(source_run / "checkpoints")
    assert source_tokenizer(source) == mine.resolve()
    sha = lambda p: hashlib.sha256(p.read_text().encode()).hexdigest()  # noqa: E731  (what tokenize records)
    assert check_store_tokenizer(source, sha(mine), tmp_path / "tokens") is None
    with pytest.raises(InitFromError, match="made with another tokenizer"):
        check_store_tokenizer(source, sha(theirs), tmp_path / "tokens")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert "no tokenizer.json beside the model" in check_store_tokenizer(str(hf), sha(mine), tmp_path / "tokens")
    (hf / "tokenizer.json").write_text(theirs.read_text())
    with pytest.raises(InitFromError, match="rerun the tokenizer and tokenize stages"):
        check_store_tokenizer(str(hf), sha(mine), tmp_path / "tokens")


def test_a_continued_run_without_a_known_tokenizer_says_so(tiny_run):
    run_train(tiny_run)
    child = _child(tiny_run, "child2", init_from=str(tiny_run.path / "checkpoints"), max_steps=1)
    run_train(child)
    warned = [e for e in read_events(child.path / "events.jsonl") if e.get("kind") == "init_from_warning"]
    assert len(warned) == 1 and "cannot be checked" in warned[0]["message"]


def test_a_continued_run_scores_the_inherited_model_first_and_its_checkpoints_name_the_source(tiny_run):
    """Step 0 evaluation = the source model on this run's held-out slices (the 'before' of the
    forgetting table); every checkpoint, also after a resume, records where the weights came from."""
    from tokenmill.eval.evaluate import Evaluator, in_training_evaluator
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.checkpoint import read_state

    run_train(tiny_run)
    source, _ = load_model(tiny_run.path / "checkpoints", "cpu")
    child = _child(tiny_run, "child3", init_from=str(tiny_run.path / "checkpoints"), max_steps=6, ckpt_every=3)
    run_train(child, on_eval=in_training_evaluator(child))
    before = json.loads((child.path / "eval" / "0.json").read_text())["buckets"]
    cfg = child.config
    direct = Evaluator(TokenStore(child.path / "tokens"), cfg.train.seq_len, cfg.train.eval_docs,
                       cfg.eval.batch_size).score(source, torch.device("cpu"), cfg.train.dtype)
    assert {b: m["bpb"] for b, m in before.items()} == pytest.approx({b: m["bpb"] for b, m in direct.items()}, rel=1e-6)
    assert (child.path / "eval" / "6.json").is_file()
    state = read_state(child.path / "checkpoints" / "step_6")
    assert state["init_from"]["from"] == str((tiny_run.path / "checkpoints").resolve())
    assert state["init_from"]["format"] == "tokenmill" and "model_config" not in state["init_from"]


def test_init_optimizer_takes_the_sources_adam_moments_and_an_hf_source_has_none(tiny_run, tmp_path):
    from tokenmill.train.checkpoint import latest_checkpoint
    from tokenmill.train.init_from import load_source
    from tokenmill.train.init_from import init_optimizer as load_moments
    from tokenmill.train.optimizer import build_optimizer

    run_train(tiny_run)
    child = _child(tiny_run, "child4", init_from=str(tiny_run.path / "checkpoints"), init_optimizer=True, max_steps=1)
    model, _ = load_model(tiny_run.path / "checkpoints", "cpu")
    _, info = load_source(tiny_run.path / "checkpoints")
    assert info["checkpoint"] == str(latest_checkpoint(tiny_run.path / "checkpoints").resolve())
    opt = build_optimizer(model, child.config.train, torch.device("cpu"))
    load_moments(opt, info)
    saved = torch.load(latest_checkpoint(tiny_run.path / "checkpoints") / "optim.pt", weights_only=True)
    for k, v in saved["state"].items():
        assert torch.equal(opt.state_dict()["state"][k]["exp_avg"], v["exp_avg"])
    run_train(child)
    event = next(e for e in read_events(child.path / "events.jsonl") if e.get("kind") == "init_from")
    assert event["inherited"] == ["weights", "optimizer state"]  # the tiny store records no tokenizer
    with pytest.raises(InitFromError, match="carries no optimizer state"):
        load_moments(opt, {"format": "hf-llama", "from": "/x"})
