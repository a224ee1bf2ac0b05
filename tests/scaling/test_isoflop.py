"""IsoFLOP minima (Chinchilla approach 2): on noiseless sweeps from the published law the
parabola vertices find the true N*(C) = G·(C/6)^a, and the power laws through them have the
law's exponents β/(α+β), α/(α+β)."""

import dataclasses
import math

import numpy as np
import pytest

from tests.scaling.chinchilla_synthetic import ALPHA, BETA, BUDGETS, holdout, run, sweep, true_loss, true_n_opt
from tokenmill.scaling.isoflop import IsoFlopError, budget_groups, fit_compute_optimal, isoflop_minima


@pytest.mark.parametrize("span, tolerance", [(0.6, 0.02), (0.3, 0.005)])
def test_parabola_vertices_find_the_true_optimum(span, tolerance):
    """The iso-compute loss is not exactly a parabola in log N: the vertex is biased by ~1.4 % over
    ±0.6 decades and ~0.4 % over ±0.3 decades (measured), so the tolerance is stated per span."""
    result = isoflop_minima(sweep(noise=0.0, span=span))
    assert [m.budget for m in result.minima] == list(BUDGETS) and result.skipped == ()
    for m in result.minima:
        assert m.compute == pytest.approx(m.budget, rel=1e-6)
        assert m.params == pytest.approx(true_n_opt(m.compute), rel=tolerance)
        assert m.tokens == pytest.approx(m.compute / (6 * m.params), rel=1e-5)
        assert m.interior and m.sizes == 9


def test_compute_optimal_power_laws_have_the_laws_exponents():
    optimal = fit_compute_optimal(isoflop_minima(sweep(noise=0.0)).minima)
    # The vertex bias is the same factor at every budget, so the exponents come out exact.
    assert optimal.params.exponent == pytest.approx(BETA / (ALPHA + BETA), abs=1e-4)
    assert optimal.tokens.exponent == pytest.approx(ALPHA / (ALPHA + BETA), abs=1e-4)
    assert optimal.params(1e22) == pytest.approx(true_n_opt(1e22), rel=0.02)


def test_an_exact_parabola_gives_its_exact_vertex():
    runs = []
    for k, log_n in enumerate(np.linspace(15, 19, 5)):
        r = run(f"p{k}", math.exp(log_n), 1e18, 1e18, 1.0)
        runs.append(dataclasses.replace(r, loss=2.0 + 0.05 * (math.log(r.params) - 17.3) ** 2))
    (m,) = isoflop_minima(runs).minima
    assert math.log(m.params) == pytest.approx(17.3, abs=1e-9)
    assert m.loss == pytest.approx(2.0, abs=1e-12)


def test_budgets_without_a_minimum_are_skipped_with_a_reason():
    two = [r for r in sweep(noise=0.0, budgets=(1e18,), sizes=2)]
    falling = [dataclasses.replace(r, budget=5e18, loss=3.0 - 0.01 * k ** 2, name=f"f{k}")
               for k, r in enumerate(sweep(noise=0.0, budgets=(5e18,), sizes=4))]
    result = isoflop_minima(two + falling)
    assert result.minima == ()
    reasons = dict(result.skipped)
    assert "2 distinct size(s)" in reasons[1e18]
    assert "no minimum" in reasons[5e18]
    with pytest.raises(IsoFlopError, match="two or more budgets"):
        fit_compute_optimal(result.minima)


def test_a_vertex_outside_the_swept_sizes_is_marked():
    c = 1e19
    sizes = float(true_n_opt(c)) * np.geomspace(10, 30, 5)  # every model far larger than N*
    runs = [run(f"big{k}", n, c, c, float(true_loss(n, c / (6 * n)))) for k, n in enumerate(sizes)]
    (m,) = isoflop_minima(runs).minima
    assert m.params < sizes.min() and not m.interior


def test_only_labelled_sweep_runs_enter_the_budgets():
    extra = dataclasses.replace(sweep(noise=0.0, budgets=(1e18,), sizes=1)[0], name="extra", budget=None)
    groups = budget_groups(sweep(noise=0.0) + [holdout(), extra])
    assert list(groups) == list(BUDGETS)
    assert all(len(g) == 9 for g in groups.values())
