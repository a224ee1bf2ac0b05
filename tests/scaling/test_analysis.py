"""`analyze`: the whole scaling fit on a synthetic sweep from the published law — the held-out
4×-compute run is predicted within 1 %, every part agrees with the law, and a sweep too small
for a part leaves it out with a note instead of failing."""

import json

import pytest

from tests.scaling.chinchilla_synthetic import ALPHA, BETA, holdout, sweep
from tokenmill.scaling.analysis import analyze
from tokenmill.scaling.fit import FitConfig

CONFIG = FitConfig(bootstrap_samples=30, seed=1)


@pytest.fixture(scope="module")
def analysis():
    return analyze(sweep(noise=0.005, seed=0) + [holdout(4.0)], CONFIG)


def test_the_held_out_run_is_predicted_within_1_percent(analysis):
    (check,) = analysis.holdout
    assert abs(check.relative_error) < 0.01
    assert check.interval.low < check.predicted < check.interval.high
    (frontier_check,) = analysis.frontier_holdout
    assert abs(frontier_check.relative_error) < 0.02  # L(C) on five minima, a rougher extrapolation


def test_every_part_agrees_with_the_law(analysis):
    assert analysis.chinchilla.fit.a == pytest.approx(BETA / (ALPHA + BETA), abs=0.03)
    assert analysis.compute_optimal.params.exponent == pytest.approx(BETA / (ALPHA + BETA), abs=0.03)
    assert analysis.compute_optimal.tokens.exponent == pytest.approx(ALPHA / (ALPHA + BETA), abs=0.03)
    assert len(analysis.isoflop.minima) == 5
    assert analysis.flops_per_token.coefficient == pytest.approx(6.0, rel=1e-3)
    assert analysis.size_law.alpha_n > 0
    assert analysis.notes == ()
    assert len(analysis.chinchilla.samples) == CONFIG.bootstrap_samples


def test_it_serialises_to_plain_json(analysis):
    data = json.loads(json.dumps(analysis.to_dict(), allow_nan=False))
    assert data["config"]["bootstrap_samples"] == 30
    assert data["holdout"][0]["name"] == "holdout"
    assert set(data["chinchilla"]["intervals"]) == {"E", "A", "B", "alpha", "beta", "a", "b"}
    assert len(data["runs"]) == 46


def test_a_small_sweep_leaves_out_what_it_cannot_support():
    runs = sweep(noise=0.0, budgets=(1e18, 1e19), sizes=5)
    result = analyze(runs, FitConfig(bootstrap_samples=0))
    assert result.compute_frontier is None and result.frontier_holdout == ()
    assert any("L(C) frontier" in note for note in result.notes)
    assert result.compute_optimal is not None
    assert result.holdout == ()
    one = analyze(sweep(noise=0.0, budgets=(1e18,), sizes=6), FitConfig(bootstrap_samples=0))
    assert one.compute_optimal is None and any("two or more budgets" in n for n in one.notes)


def test_a_minimum_outside_the_swept_sizes_is_not_used_for_the_compute_optimal_fits():
    from tests.scaling.chinchilla_synthetic import BUDGETS, run, true_loss

    def far_right(r):  # 1.5 decades above N*: the budget's whole curve lies right of its minimum
        n = r.params * 10 ** 1.5
        return run(r.name, n, r.flops, r.budget, float(true_loss(n, r.flops / (6 * n))))

    runs = [r for r in sweep() if r.budget != BUDGETS[0]]
    runs += [far_right(r) for r in sweep(budgets=(BUDGETS[0],), sizes=5, span=0.3)]
    a = analyze(runs, FitConfig(bootstrap_samples=0))
    outside = [m for m in a.isoflop.minima if not m.interior]
    assert [m.budget for m in outside] == [BUDGETS[0]]
    assert any("outside the swept sizes" in n for n in a.notes)
    # N*(C) comes from the interior minima only, and has the law's exponent
    assert a.compute_optimal.params.exponent == pytest.approx(BETA / (ALPHA + BETA), abs=0.03)
