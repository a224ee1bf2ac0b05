"""train.optimizer=muon: torch.optim.Muon over the blocks' matrices, AdamW over the rest; it
learns, resumes exactly, and is refused in one line where the layout shards matrices."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tokenmill.config import RunConfig
from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import Block, Transformer
from tokenmill.runs import RunDir, read_events
from tokenmill.train.config import TrainConfig
from tokenmill.train.optimizer import MuonWithAdamW, build_optimizer, set_lr
from tokenmill.train.trainer import run_train

from tests.adversarial.conftest import assert_clean_error, run_cli


def losses(run: RunDir) -> dict[int, float]:
    seen: dict[int, float] = {}
    for e in read_events(run.path / "events.jsonl"):
        if e["kind"] == "train_step":
            assert seen.setdefault(e["step"], e["loss"]) == e["loss"], f"step {e['step']} replayed differently"
    return seen


def muon_run(run: RunDir, dest: Path, **train) -> RunDir:
    shutil.copytree(run.path, dest)
    data = run.config.model_dump()
    data["train"].update(optimizer="muon", **train)
    return RunDir.create(RunConfig.model_validate(data), dest)


@pytest.mark.parametrize("tied", [True, False])
def test_muon_takes_the_blocks_matrices_and_adamw_everything_else(tied):
    model = Transformer(ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32,
                                    vocab_size=64, tie_embeddings=tied))
    opt = build_optimizer(model, TrainConfig(optimizer="muon", lr=1e-3, muon_lr=0.02))
    assert isinstance(opt, MuonWithAdamW)
    in_blocks = {id(p) for m in model.modules() if isinstance(m, Block) for p in m.parameters() if p.ndim == 2}
    muon = {id(p) for g in opt.muon.param_groups for p in g["params"]}
    adamw = {id(p) for g in opt.adamw.param_groups for p in g["params"]}
    assert muon == in_blocks and not muon & adamw
    assert muon | adamw == {id(p) for p in model.parameters()}  # every parameter, once
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[i] for i in adamw} >= {"embed_tokens.weight", "norm.weight"}
    assert tied or "lm_head.weight" in {names[i] for i in adamw}
    set_lr(opt, 5e-4)  # one schedule, each at its own peak
    assert {g["name"]: g["lr"] for g in opt.param_groups}["muon"] == pytest.approx(0.01)
    assert {g["name"]: g["lr"] for g in opt.param_groups}["no_decay"] == 5e-4


def test_adamw_stays_the_default():
    model = Transformer(ModelConfig(d_model=32, n_layers=1, n_heads=4, max_seq_len=32, vocab_size=64))
    assert type(build_optimizer(model, TrainConfig())) is torch.optim.AdamW


def test_muon_learns_on_the_tiny_run(tiny_run, tmp_path):
    run = muon_run(tiny_run, tmp_path / "muon")
    run_train(run, progress=False)
    loss = losses(run)
    assert sorted(loss) == list(range(1, 31))
    assert sum(loss[s] for s in range(26, 31)) / 5 < loss[1] - 1.0  # from ~4.2 (ln 64) well down


def test_a_muon_run_resumes_exactly(tiny_run, tmp_path):
    reference = muon_run(tiny_run, tmp_path / "ref", eval_every=5)
    run_train(reference, progress=False)
    crashing = muon_run(tiny_run, tmp_path / "crash", eval_every=5)

    def crash(step, model):
        if step == 15:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated"):
        run_train(crashing, on_eval=crash, progress=False)
    run_train(crashing, resume=True, progress=False)
    assert [e["step"] for e in read_events(crashing.path / "events.jsonl") if e["kind"] == "resumed"] == [10]
    assert losses(crashing) == losses(reference)  # every step, those replayed after step 10 included
    for name in ("model.safetensors", "optim.pt"):  # both optimizers' state, byte for byte
        ours = (crashing.path / "checkpoints" / "step_30" / name).read_bytes()
        assert ours == (reference.path / "checkpoints" / "step_30" / name).read_bytes(), name


@pytest.mark.parametrize("layout", ["train.distributed=fsdp", "train.parallel.tp=2"])
def test_muon_on_sharded_matrices_is_refused_in_one_line(tiny_run, layout):
    result = run_cli("train", tiny_run.path / "config.yaml", "--set", "train.optimizer=muon", "--set", layout)
    assert_clean_error(result, "train.optimizer=muon", "not with train.distributed=fsdp", max_lines=1)
