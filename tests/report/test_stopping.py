"""Stopping-rule signals on synthetic runs with a known law: a run that follows the law exactly,
one that overfits a repeated bucket, one that is flat past the compute-optimal ratio, and runs
with too few or mismatched evaluations."""

import json
import math

import pytest

from tests.report.stopping_synthetic import LAW, TOKENS_PER_STEP, events, plan, write_run
from tokenmill.config import StopConfig, load_config
from tokenmill.report.stopping import (
    DIMINISHING,
    KEEP,
    OVERFITTING,
    TOO_FEW,
    compute_signals,
    fit_slope,
    resolve_law,
    stop_signals,
)
from tokenmill.runs import RunDir
from tokenmill.scaling.reference_law import PUBLISHED_CHINCHILLA, load_law


def law_loss(law, n: float, step: int) -> float:
    return law.predict(n, step * TOKENS_PER_STEP)


def test_a_run_on_the_law_has_its_slope_no_gap_and_keeps_training(tmp_path):
    (tmp_path / "fit.json").write_text(json.dumps({"chinchilla": {"fit": LAW}}))
    law = load_law(tmp_path / "fit.json")
    n = 1_000_000  # non-embedding: what a tokenmill fit counts
    steps = list(range(100, 1001, 100))
    ev, evals = events(steps, lambda s: {"web": law_loss(law, n, s)}, lambda s: law_loss(law, n, s),
                       non_embedding=n, params=3 * n)
    s = compute_signals(ev, evals, law, StopConfig())
    assert s.params == n and s.tokens == 1e6 and s.window_steps == steps  # the last decade: 1e5..1e6 tokens
    assert s.slope.slope == pytest.approx(s.law_slope, rel=1e-9) and s.slope_ratio == pytest.approx(1.0)
    assert s.gap_to_law == pytest.approx(0.0, abs=1e-12)
    assert s.tokens_per_param == 1.0 < s.optimal_ratio
    assert s.verdict == KEEP and "below it" in s.reasons[0]
    assert not s.buckets[0].rising and s.buckets[0].rise < 0


def test_evaluations_close_together_measure_the_analytic_derivative():
    n = 1e6
    law = PUBLISHED_CHINCHILLA
    ev, evals = events([980, 990, 1000], lambda s: {"web": law_loss(law, n, s)}, lambda s: 3.0, non_embedding=n)
    s = compute_signals(ev, evals, law, StopConfig())
    assert "the last decade" in s.window
    assert s.slope.slope == pytest.approx(law.slope_per_decade(1e6), rel=0.01)
    assert s.law_slope_at_end == pytest.approx(-0.28 * 410.7 * 1e6 ** -0.28 * math.log(10))


def test_a_repeated_bucket_whose_held_out_loss_rises_while_train_falls_is_overfitting():
    n = 10_000
    weights = {"big": 0.8, "small": 0.2}
    steps = [200, 400, 600, 800, 1000]
    small = {200: 3.0, 400: 2.8, 600: 2.7, 800: 2.8, 1000: 2.95}  # turns up after 600 steps

    def heldout(s):
        return {"big": 3.5 - 0.2 * math.log10(s), "small": small[s]}
    ev, evals = events(steps, heldout, lambda s: 3.3 - 0.4 * math.log10(s), non_embedding=n,
                       run_plan=plan(1000, {"big": 0.8, "small": 6.0}, weights))
    s = compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig())
    assert s.verdict == OVERFITTING
    assert "'small'" in s.reasons[0] and "since step 600" in s.reasons[0] and "6.00 epochs" in s.reasons[0]
    by = {b.bucket: b for b in s.buckets}
    assert by["small"].overfitting and by["small"].rise == pytest.approx(0.25) and by["small"].epochs == pytest.approx(6.0)
    assert not by["big"].overfitting
    assert any("'small' is repeated 6.00 epochs" in note for note in s.notes)  # past Muennighoff's ~4


def test_a_held_out_rise_with_the_train_loss_rising_too_is_not_overfitting():
    n = 10_000
    steps = [200, 400, 600]
    ev, evals = events(steps, lambda s: {"web": {200: 3.0, 400: 2.9, 600: 3.1}[s]},
                       lambda s: {True: 2.5, False: 2.9}[s <= 400], non_embedding=n,
                       run_plan=plan(600, {"web": 6.0}, {"web": 1.0}))
    s = compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig())
    assert s.buckets[0].rising and s.buckets[0].train_fell is False and not s.buckets[0].overfitting
    assert s.verdict != OVERFITTING and any("the train loss did not fall" in n_ for n_ in s.notes)


def test_a_flat_curve_past_20_tokens_per_parameter_is_diminishing_returns():
    n = 20_000  # 1e6 tokens at the end: 50 tokens per parameter
    steps = list(range(100, 1001, 100))
    ev, evals = events(steps, lambda s: {"web": 3.0 + 0.001 * ((s // 100) % 2)}, lambda s: 2.9, non_embedding=n)
    s = compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig())
    assert s.tokens_per_param == 50.0 and s.optimal_ratio == 20.0
    assert s.slope.flat(2.0) and s.slope_ratio < 0.5
    assert s.verdict == DIMINISHING and "past it" in s.reasons[1]


def test_the_same_flat_curve_before_the_optimal_ratio_keeps_training():
    steps = list(range(100, 1001, 100))
    ev, evals = events(steps, lambda s: {"web": 3.0}, lambda s: 2.9, non_embedding=1_000_000)
    s = compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig())
    assert s.verdict == KEEP


def test_fewer_than_three_evaluations_say_so():
    ev, evals = events([100, 200], lambda s: {"web": 3.0}, lambda s: 2.9, non_embedding=1000)
    s = compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig())
    assert s.verdict == TOO_FEW and "needs ≥ 3 evaluations" in s.reasons[0] and "has 2" in s.reasons[0]
    assert compute_signals([], [], PUBLISHED_CHINCHILLA, StopConfig()).verdict == TOO_FEW


def test_an_evaluation_of_another_document_set_is_left_out():
    ev, evals = events([100, 200, 300], lambda s: {"web": 4.0 - s / 1000}, lambda s: 3.0, non_embedding=1000)
    bigger = {"step": 300, "buckets": {"web": {"loss": 3.2, "tokens": 900}}}  # the eval stage's larger set
    s = compute_signals(ev, [*evals, bigger], PUBLISHED_CHINCHILLA, StopConfig())
    assert [p.loss for p in s.points] == pytest.approx([3.9, 3.8, 3.7])
    assert "1 evaluation(s) of another held-out document set" in s.notes[0]


def test_the_window_falls_back_to_the_last_evaluations_when_the_decade_holds_too_few():
    ev, evals = events([10, 50, 900, 1000], lambda s: {"web": 4.0 - math.log10(s)}, lambda s: 3.0,
                       non_embedding=1000)
    s = compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig())
    assert s.window_steps == [50, 900, 1000] and "the last 3 evaluations" in s.window and "holds only 2" in s.window
    assert s.slope.slope == pytest.approx(-1.0) and s.slope.se == pytest.approx(0.0, abs=1e-9)


def test_slope_standard_error_is_the_ols_one():
    fit = fit_slope([1e3, 1e4, 1e5, 1e6], [4.0, 3.1, 2.0, 0.9])
    # x = 3..6: Sxx = 5, Sxy = −5.2, slope −1.04; residuals −0.06, 0.08, 0.02, −0.04 (SSR 0.012, 2 dof)
    assert fit.slope == pytest.approx(-1.04) and fit.se == pytest.approx(math.sqrt(0.012 / 2 / 5))


def test_a_run_directory_reads_its_files_and_the_law_it_is_told(tmp_path):
    (tmp_path / "fit.json").write_text(json.dumps({"chinchilla": {"fit": LAW}}))
    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=r", f"report.scaling_law={tmp_path / 'fit.json'}"]))
    write_run(run, *events([100, 200, 300], lambda s: {"web": 4.0 - s / 1000}, lambda s: 3.0, non_embedding=1000))
    s = stop_signals(run)
    assert not s.law.published and len(s.points) == 3 and s.verdict in (KEEP, DIMINISHING)


def test_a_run_of_a_fitted_sweep_is_held_against_the_sweeps_law(tmp_path):
    (tmp_path / "fit.json").write_text(json.dumps({"chinchilla": {"fit": LAW}}))
    run = RunDir.create(load_config(None, [f"root={tmp_path / 'runs'}", "name=s1"]))
    assert not resolve_law(run).published
    alone = RunDir.create(load_config(None, [f"root={tmp_path / 'elsewhere' / 'x'}", "name=r"]))
    assert resolve_law(alone) is PUBLISHED_CHINCHILLA
