"""Critical batch: the steps-vs-tokens law, the run summary of B_simple, and the batch verdict."""

from __future__ import annotations

import pytest

from tokenmill.scaling.critical_batch import (batch_verdict, fit_tradeoff, kaplan_critical_batch, noise_series,
                                              steps_factor, steps_to_loss, summarize_noise, tokens_factor)


def test_the_tradeoff_law_holds_at_every_batch():
    """(S/S_min − 1)(E/E_min − 1) = 1 with E = B·S (McCandlish et al. eq. 2.11)."""
    b_crit = 3000.0
    for b in (100.0, 3000.0, 1e5):
        assert (steps_factor(b, b_crit) - 1) * (tokens_factor(b, b_crit) - 1) == pytest.approx(1.0)


def test_fit_recovers_s_min_and_b_crit_from_exact_points():
    s_min, b_crit = 120.0, 4096.0
    batches = [512, 1024, 2048, 4096, 8192, 16384]
    steps = [s_min * (1 + b_crit / b) for b in batches]
    fit = fit_tradeoff(batches, steps)
    assert fit.s_min == pytest.approx(s_min)
    assert fit.b_crit == pytest.approx(b_crit)
    assert fit.e_min == pytest.approx(s_min * b_crit)
    assert fit.r2 == pytest.approx(1.0)


def test_fit_refuses_a_sweep_where_steps_do_not_fall():
    with pytest.raises(ValueError, match="bracket"):
        fit_tradeoff([512, 1024, 2048], [100, 120, 140])


def test_kaplan_published_figure():
    """Kaplan et al. eq. 1.4: B_crit(L) = 2e8 / L^(1/0.21); at L = 2 nats ≈ 7.4M tokens."""
    assert kaplan_critical_batch(2.0) == pytest.approx(2e8 / 2 ** (1 / 0.21))
    assert 7.0e6 < kaplan_critical_batch(2.0) < 7.8e6
    assert kaplan_critical_batch(1.5) > kaplan_critical_batch(2.0)


def test_steps_to_loss_uses_a_centred_average():
    losses = [5.0] * 10 + [1.0] + [5.0] * 5 + [2.0] * 20
    assert steps_to_loss(losses, 2.5, window=5) == 19  # the lone 1.0 at step 11 does not count
    assert steps_to_loss(losses, 0.5, window=5) is None


def _events(values: list[tuple[float, float]], batch: int = 4096) -> list[dict]:
    out = [{"stage": "train", "kind": "train_start", "tokens_per_step": batch}]
    for i, (g2, tr) in enumerate(values, start=1):
        out.append({"stage": "train", "kind": "train_step", "step": i, "tokens": i * batch, "loss": 3.0,
                    "noise_g2": g2, "noise_trace": tr, "b_simple": tr / g2})
    return out


def test_summary_is_the_ratio_of_means_over_the_second_half():
    values = [(1.0, 100.0)] * 10 + [(2.0, 1000.0), (1.0, 600.0)] * 5
    s = summarize_noise(_events(values))
    assert s.b_simple == pytest.approx((1000 + 600) / 2 / 1.5)
    assert s.first_step == 11 and s.last_step == 20 and s.batch_tokens == 4096
    assert len(s.block_values) == 4
    assert summarize_noise([{"stage": "train", "kind": "train_start"}]) is None


def test_a_replayed_step_counts_once_and_the_series_is_in_step_order():
    ev = _events([(1.0, 10.0), (1.0, 20.0)])
    ev.append({**ev[-1], "noise_trace": 30.0, "b_simple": 30.0})  # step 2 again, after a resume
    assert noise_series(ev) == [(4096, 10.0), (8192, 30.0)]
    assert summarize_noise(ev, start_fraction=0.0).b_simple == pytest.approx(20.0)


def test_batch_verdict_bands():
    assert batch_verdict(1000, 10000, "x")["verdict"].startswith("below")
    assert batch_verdict(10000, 10000, "x")["verdict"].startswith("near")
    v = batch_verdict(80000, 10000, "x")
    assert v["verdict"].startswith("above") and v["tokens_over_min"] == pytest.approx(9.0)
