"""A dp × tp × pp layout that cannot split the model or the world is refused before any process
starts: at config load (every rank, and `tokenmill train --nproc K` before torchrun) and against
the world size; `tokenmill train --nproc 2` trains a tensor-parallel run from the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tokenmill.config import ConfigError, ModelConfig, RunConfig, TrainConfig, load_config
from tokenmill.train.layout import LayoutError, LayoutSizes, check_launch, layout_problems, resolve_sizes

from tests.train.dist_helpers import REPO, env, events, make_run, series


def _train(**par) -> TrainConfig:
    return TrainConfig.model_validate({"parallel": par, "grad_accum": 4})


def test_tp_must_divide_heads_kv_heads_and_the_ffn():
    model = ModelConfig(d_model=96, n_heads=6, n_kv_heads=3, ffn_hidden=256)
    problems = layout_problems(model, _train(tp=2))
    assert len(problems) == 1 and "model.n_kv_heads (3)" in problems[0]
    problems = layout_problems(model, _train(tp=3, sequence_parallel=False))  # 256-token rows do not split 3 ways either
    assert len(problems) == 1 and "FFN hidden size (256)" in problems[0]
    assert layout_problems(ModelConfig(d_model=96, n_heads=6, n_kv_heads=6, ffn_hidden=260), _train(tp=6, sequence_parallel=False)) == [
        "tp=6 does not divide the FFN hidden size (260): each rank must hold whole heads and equal FFN columns"]
    assert layout_problems(model, _train(tp=1)) == []


def test_pp_must_divide_layers_and_have_micro_batches_to_pipeline():
    model = ModelConfig(n_layers=6)
    assert layout_problems(model, _train(pp=3)) == []
    (problem,) = layout_problems(model, _train(pp=4))
    assert "does not divide model.n_layers (6)" in problem
    (problem,) = layout_problems(model, TrainConfig.model_validate({"parallel": {"pp": 3}, "grad_accum": 1}))
    assert "train.grad_accum=1" in problem
    (problem,) = layout_problems(ModelConfig(n_layers=6, n_experts=4), _train(pp=2))
    assert "MoE" in problem


def test_a_config_whose_layout_does_not_fit_its_model_does_not_load():
    with pytest.raises(ConfigError, match=r"tp=3 does not divide model.n_heads \(4\)"):
        load_config(None, ["model.n_heads=4", "train.parallel.tp=3"])
    assert RunConfig.model_validate({"model": {"n_heads": 4}, "train": {"parallel": {"tp": 2}}}).train.parallel.tp == 2


def test_the_world_must_be_dp_tp_pp():
    assert resolve_sizes(_train(tp=2), 4) == LayoutSizes(dp=2, tp=2, pp=1)
    assert resolve_sizes(_train(tp=2, pp=2), 4) == LayoutSizes(dp=1, tp=2, pp=2)
    with pytest.raises(LayoutError, match="world size 3 is not divisible by tp · pp = 2 · 1"):
        resolve_sizes(_train(tp=2), 3)
    with pytest.raises(LayoutError, match="dp=4 × tp=2 × pp=1 = 8 ranks, but the job has 4"):
        resolve_sizes(_train(tp=2, dp=4), 4)
    assert resolve_sizes(_train(pp=2), 4) == LayoutSizes(dp=2, tp=1, pp=2)
    with pytest.raises(LayoutError, match="does not divide model.n_layers"):
        check_launch(ModelConfig(n_layers=3), _train(pp=2), 2)
    two_micro = TrainConfig.model_validate({"parallel": {"pp": 2}, "micro_batch": 8, "seq_len": 32,
                                            "global_batch_tokens": 512})
    assert check_launch(ModelConfig(n_layers=2), two_micro, 2) == LayoutSizes(dp=1, tp=1, pp=2)
    with pytest.raises(LayoutError, match="grad_accum=1"):  # 2 replicas: one micro-batch each
        check_launch(ModelConfig(n_layers=2), two_micro, 4)


def test_coords_are_pp_major_tp_minor():
    sizes = LayoutSizes(dp=2, tp=2, pp=2)
    assert [sizes.coords(r) for r in range(8)] == [(p, d, t) for p in range(2) for d in range(2) for t in range(2)]


def _cli(run, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenmill", "train", str(run.path / "config.yaml"), "--run-dir",
                           str(run.path), *args], env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=180, cwd=REPO)


@pytest.mark.slow
def test_train_nproc_refuses_a_bad_layout_before_starting_and_trains_a_good_one(tmp_path):
    run = make_run(tmp_path / "run")
    bad = _cli(run, "--nproc", "2", "--set", "train.parallel.tp=3")
    assert bad.returncode == 2 and "tp=3 does not divide model.n_heads (4)" in bad.stdout
    bad = _cli(run, "--nproc", "3", "--set", "train.parallel.tp=2")
    assert bad.returncode == 1 and "world size 3 is not divisible" in bad.stdout
    assert not (run.path / "checkpoints").exists() and not events(run, "train_start")  # nothing started
    good = _cli(run, "--nproc", "2", "--set", "train.parallel.tp=2", "--set", "train.max_steps=3")
    assert good.returncode == 0, good.stdout[-6000:]
    assert "on 2 ranks: dp=1 × tp=2 × pp=1" in good.stdout
    assert events(run, "train_start")[0]["layout"] == "dp=1 × tp=2 × pp=1" and sorted(series(run)) == [1, 2, 3]
