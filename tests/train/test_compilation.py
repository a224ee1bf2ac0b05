"""torch.compile in the trainer: the 'auto' rule, the graph cache's place, and compiled = eager."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.config import TrainConfig
from tokenmill.runs import read_events
from tokenmill.train.compilation import CACHE_ENV, compile_cache_dir, compile_decision
from tokenmill.train.trainer import run_train

from tests.train.dist_helpers import fp32_order_rtol

from .test_trainer import copy_run, losses, with_config


def test_auto_compiles_exactly_the_runs_with_enough_steps_left():
    tc = TrainConfig(compile="auto", compile_min_steps=500)
    assert compile_decision(tc, 500)[0] and not compile_decision(tc, 499)[0]
    assert "499 steps to run < train.compile_min_steps (500)" in compile_decision(tc, 499)[1]
    assert compile_decision(TrainConfig(compile=True), 1)[0]
    assert not compile_decision(TrainConfig(compile=False), 10 ** 9)[0]
    assert TrainConfig().compile == "auto"
    with pytest.raises(ValueError):
        TrainConfig(compile="sometimes")


def test_cache_dir_is_the_users_or_a_persistent_one(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert compile_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert compile_cache_dir() == tmp_path / ".cache" / "tokenmill" / "inductor"


def compile_events(run_dir: Path) -> list[dict]:
    return [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == "compile"]


@pytest.mark.slow
def test_a_compiled_run_trains_as_the_eager_one(tiny_run, tmp_path, monkeypatch):
    """Same init and batches through the real trainer: fp32 losses agree to float noise (Inductor
    reorders sums), the decision is logged, and 'auto' keeps a short run eager."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "inductor"))  # a cold cache: no other run's graphs
    fresh = copy_run(tiny_run, tmp_path / "compiled")
    eager = with_config(tiny_run, max_steps=4, dtype="float32", compile="auto", compile_min_steps=5)
    run_train(eager, resume=False, progress=False)
    [decision] = compile_events(eager.path)
    assert decision["enabled"] is False and "4 steps to run < " in decision["reason"]

    compiled = with_config(fresh, max_steps=4, dtype="float32", compile="auto", compile_min_steps=4)
    run_train(compiled, resume=False, progress=False)
    [decision] = compile_events(compiled.path)
    assert decision["enabled"] is True and decision["cache_dir"] == str(tmp_path / "inductor")
    a, b = losses(eager.path), losses(compiled.path)
    assert a.keys() == b.keys() == {1, 2, 3, 4}
    # Inductor sums the step's 512 targets in another order: up to K·u relative a step (u = 2^-24),
    # carried over the 4 steps (tests/train/dist_helpers.fp32_order_rtol)
    assert a == pytest.approx(b, rel=fp32_order_rtol(steps=4, terms=512))
