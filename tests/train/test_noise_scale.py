"""The gradient noise scale: the estimators, the first-micro-batch probe, and its place in training."""

from __future__ import annotations

import math

import pytest
import torch

from tokenmill.mixture.loader import Loader
from tokenmill.model.objectives import counted_targets, token_nll_batch
from tokenmill.model.transformer import Transformer
from tokenmill.runs import read_events
from tokenmill.tokens.store import TokenStore
from tokenmill.train.noise_scale import NoiseProbe, NoiseScale, SmallBatch, unavailable_reason, unbiased_estimates
from tokenmill.train.trainer import resolve_model_config, run_train, step_loss
from tests.train.test_trainer import copy_run, with_config


def test_estimators_invert_the_expected_norms_exactly():
    g2, trace, bs, bb = 0.37, 52.0, 64, 1024
    small, big = g2 + trace / bs, g2 + trace / bb  # E|G_B|² = |G|² + tr Σ / B
    est_g2, est_trace = unbiased_estimates(small, bs, big, bb)
    assert est_g2 == pytest.approx(g2, rel=1e-12)
    assert est_trace == pytest.approx(trace, rel=1e-12)


def test_estimators_are_unbiased_on_sampled_gradients():
    """Per-token gradients G + ε, ε ~ N(0, diag(σ²)): the mean of the estimates over many draws
    recovers |G|² and tr Σ = Σσ², and the smoothed ratio is B_simple = tr Σ / |G|²."""
    gen = torch.Generator().manual_seed(0)
    dim, bs, bb, draws = 50, 8, 64, 4000
    G = torch.randn(dim, generator=gen, dtype=torch.float64) * 0.2
    sigma = torch.rand(dim, generator=gen, dtype=torch.float64) + 0.5
    noise = NoiseScale(decay=0.999)
    g2s, traces = [], []
    for _ in range(draws):
        tokens = G + sigma * torch.randn(bb, dim, generator=gen, dtype=torch.float64)
        small = float(tokens[:bs].mean(0).square().sum())
        big = float(tokens.mean(0).square().sum())
        g2, trace = unbiased_estimates(small, bs, big, bb)
        g2s.append(g2)
        traces.append(trace)
        noise.update(SmallBatch(small, bs), big, bb)
    true_g2, true_trace = float(G.square().sum()), float(sigma.square().sum())
    assert sum(g2s) / draws == pytest.approx(true_g2, rel=0.05)
    assert sum(traces) / draws == pytest.approx(true_trace, rel=0.02)
    assert noise.b_simple == pytest.approx(true_trace / true_g2, rel=0.15)


def test_noise_scale_state_round_trips_and_is_empty_before_a_positive_signal():
    a = NoiseScale(0.9)
    assert a.b_simple is None
    a.update(SmallBatch(2.0, 4), 1.0, 16)
    b = NoiseScale(0.9)
    b.load_state_dict(a.state_dict())
    assert b.b_simple == a.b_simple
    out = a.update(SmallBatch(2.0, 16), 1.0, 16)  # the small batch is the whole batch: nothing to compare
    assert out["noise_g2"] is None


def test_unavailable_reasons():
    assert unavailable_reason(2, "clm", False, False, 1) is None
    assert "grad_accum" in unavailable_reason(1, "clm", False, False, 1)
    assert "objective" in unavailable_reason(2, "mlm", False, False, 1)
    assert "FSDP" in unavailable_reason(2, "clm", False, True, 1)
    assert "0" in unavailable_reason(2, "clm", False, False, 0)


def test_probe_measures_the_first_micro_batch_mean_gradient(tiny_run):
    """The probe's |G_small|² equals the squared norm of the gradient of the first micro-batch's
    mean loss, computed on its own."""
    cfg, tc = tiny_run.config, tiny_run.config.train
    store = TokenStore(tiny_run.path / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(3))
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, 5)
    try:
        probe = NoiseProbe()
        step_loss(model, loader, 4, tc.grad_accum, torch.device("cpu"), torch.float32, backward=True, probe=probe)
        assert probe.b_big == loader.n_targets(4)
        batch = loader.batch(4, 0)
        assert probe.small.targets == counted_targets(batch)
        assert sum(counted_targets(loader.batch(4, m)) for m in range(tc.grad_accum)) == loader.n_targets(4)
        model.zero_grad(set_to_none=True)
        (token_nll_batch(model, batch).sum() / counted_targets(batch)).backward()
        direct = sum(float(p.grad.double().square().sum()) for p in model.parameters() if p.grad is not None)
        assert probe.small.sq == pytest.approx(direct, rel=1e-5)
    finally:
        loader.close()


def _train_steps(run) -> list[dict]:
    return [e for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"]


def test_training_logs_b_simple_and_measuring_changes_nothing(tiny_run, tmp_path):
    measured = copy_run(tiny_run, tmp_path / "measured")
    run_train(measured, progress=False)
    start = next(e for e in read_events(measured.path / "events.jsonl") if e["kind"] == "train_start")
    assert start["noise_scale"]["measured"] is True
    events = _train_steps(measured)
    values = [e["b_simple"] for e in events if e.get("b_simple") is not None]
    assert len(values) > 20 and all(math.isfinite(v) for v in values)
    assert all(e["noise_trace"] is not None for e in events)

    off = with_config(copy_run(tiny_run, tmp_path / "off"), noise_scale_every=0)
    run_train(off, progress=False)
    assert [e["loss"] for e in _train_steps(off)] == [e["loss"] for e in events]
    assert all("b_simple" not in e for e in _train_steps(off))
    start = next(e for e in read_events(off.path / "events.jsonl") if e["kind"] == "train_start")
    assert start["noise_scale"]["measured"] is False


def test_one_micro_batch_per_step_says_why_it_cannot_measure(tiny_run):
    run = with_config(tiny_run, grad_accum=1, max_steps=3)
    run_train(run, progress=False)
    start = next(e for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_start")
    assert start["noise_scale"]["measured"] is False and "grad_accum" in start["noise_scale"]["why_not"]


def test_a_resumed_run_logs_the_same_estimates(tiny_run, tmp_path):
    reference = copy_run(tiny_run, tmp_path / "ref")
    run_train(reference, progress=False)

    def crash(step, model):
        if step == 15:
            raise RuntimeError("simulated crash")

    crashing = with_config(copy_run(tiny_run, tmp_path / "crash"), eval_every=15)
    with pytest.raises(RuntimeError):
        run_train(crashing, on_eval=crash, progress=False)
    run_train(crashing, resume=True, progress=False)
    resumed = {e["step"]: e["b_simple"] for e in _train_steps(crashing)}
    assert resumed == {e["step"]: e["b_simple"] for e in _train_steps(reference)}
