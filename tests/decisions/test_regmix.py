"""The data mixing law (Ye et al. 2024) fitted over sampled mixtures, and its best mixture."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tokenmill.decisions.regmix import best_mixture, fit_law, law, sample_mixtures

# three buckets; each bucket's loss falls with its own share and a little with the others'
TRUE = [np.asarray([1.2, np.log(1.5), -3.0, -0.4, -0.2]),
        np.asarray([0.9, np.log(2.0), -0.3, -2.5, -0.1]),
        np.asarray([1.5, np.log(0.8), -0.2, -0.3, -4.0])]


def test_sampled_mixtures_start_with_the_anchors_and_respect_the_floor():
    anchors = [np.ones(3), np.asarray([6.0, 3.0, 1.0])]
    r = sample_mixtures(3, 12, seed=4, min_weight=0.05, anchors=anchors)
    assert r.shape == (12, 3) and r.sum(axis=1) == pytest.approx(np.ones(12))
    assert r[0] == pytest.approx(np.ones(3) / 3) and r[1] == pytest.approx([0.6, 0.3, 0.1])
    assert r[2:].min() >= 0.05 - 1e-12
    assert (sample_mixtures(3, 12, 4, 0.05, anchors) == r).all()  # seeded
    with pytest.raises(ValueError, match="no room"):
        sample_mixtures(3, 5, 0, 0.4, [])


def test_the_fit_recovers_the_law_it_was_sampled_from():
    r = sample_mixtures(3, 12, seed=1, min_weight=0.02, anchors=[np.ones(3)])
    for p in TRUE:
        fit = fit_law(r, law(p, r))
        assert fit.rmse < 1e-6
        held = sample_mixtures(3, 40, seed=9, min_weight=0.02, anchors=[])  # mixtures it never saw
        assert fit.predict(held) == pytest.approx(law(p, held), abs=1e-5)
        assert max(abs(e) for e in fit.loo_errors) < 1e-4


def test_noisy_points_show_in_the_leave_one_out_errors():
    r = sample_mixtures(3, 12, seed=1, min_weight=0.02, anchors=[np.ones(3)])
    y = law(TRUE[0], r) + np.random.default_rng(0).normal(0, 0.02, len(r))
    fit = fit_law(r, y)
    assert 0.002 < np.sqrt(np.nanmean(np.square(fit.loo_errors))) < 0.2


def test_the_best_mixture_matches_a_brute_force_search_of_the_simplex():
    r = sample_mixtures(3, 12, seed=1, min_weight=0.02, anchors=[np.ones(3)])
    fits = [fit_law(r, law(p, r)) for p in TRUE]
    best, value = best_mixture(fits, 3, seed=0, candidates=20_000, min_weight=0.02)
    assert best.sum() == pytest.approx(1.0) and best.min() >= 0.02 - 1e-9
    step = 0.005
    grid = np.asarray([(a, b, 1 - a - b) for a, b in itertools.product(np.arange(0.02, 0.961, step), repeat=2)
                       if 1 - a - b >= 0.02 - 1e-12])
    truth = np.mean([law(p, grid) for p in TRUE], axis=0)
    assert value <= truth.min() + 1e-6  # at least as good as the finest grid point
    assert best == pytest.approx(grid[int(np.argmin(truth))], abs=2 * step)


def test_the_best_mixture_under_per_bucket_caps_matches_a_brute_force_search_of_the_box():
    r = sample_mixtures(3, 12, seed=1, min_weight=0.02, anchors=[np.ones(3)])
    fits = [fit_law(r, law(p, r)) for p in TRUE]
    free, _ = best_mixture(fits, 3, seed=0, candidates=20_000, min_weight=0.02)
    cap = np.asarray([1.0, 1.0, free[2] / 2])  # the unconstrained optimum is outside the box
    best, value = best_mixture(fits, 3, seed=0, candidates=20_000, min_weight=0.02, upper=cap)
    assert best[2] <= cap[2] + 1e-9 and best[2] == pytest.approx(cap[2], abs=1e-3)  # pressed against the cap
    step = 0.005
    grid = np.asarray([(a, b, 1 - a - b) for a, b in itertools.product(np.arange(0.02, 0.961, step), repeat=2)
                       if 0.02 - 1e-12 <= 1 - a - b <= cap[2]])
    truth = np.mean([law(p, grid) for p in TRUE], axis=0)
    assert value <= truth.min() + 1e-6
    with pytest.raises(ValueError, match="no mixture fits the bounds"):
        best_mixture(fits, 3, seed=0, candidates=100, min_weight=0.02, upper=np.asarray([0.3, 0.3, 0.3]))
