"""The scaling charts are standalone inline SVG (no XML prolog), with or without held-out runs and
with parts of the analysis missing."""

import pytest

from tests.scaling.chinchilla_synthetic import holdout, sweep
from tokenmill.report import fit_charts
from tokenmill.scaling.analysis import analyze
from tokenmill.scaling.fit import FitConfig

CHARTS = [fit_charts.loss_vs_compute_chart, fit_charts.isoflop_chart, fit_charts.compute_optimal_chart]


@pytest.fixture(scope="module")
def full():
    return analyze(sweep(noise=0.005) + [holdout(4.0)], FitConfig(bootstrap_samples=10))


@pytest.fixture(scope="module")
def small():
    return analyze(sweep(noise=0.0, budgets=(1e18, 1e19), sizes=5), FitConfig(bootstrap_samples=0))


@pytest.mark.parametrize("chart", CHARTS)
def test_charts_are_inline_svg(chart, full, small):
    for analysis in (full, small):
        svg = chart(analysis)
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")


def test_held_out_runs_add_to_the_loss_chart(full):
    without = analyze([r for r in full.runs if r.role == "sweep"], FitConfig(bootstrap_samples=10))
    # The held-out point, its prediction and its interval are drawn: more SVG paths.
    assert fit_charts.loss_vs_compute_chart(full).count("<path") > fit_charts.loss_vs_compute_chart(without).count("<path")


def test_a_law_without_a_frontier_still_charts(small):
    import dataclasses

    bent = dataclasses.replace(small.chinchilla.fit, beta=-0.1)
    broken = dataclasses.replace(small, chinchilla=dataclasses.replace(small.chinchilla, fit=bent))
    for chart in CHARTS:
        assert chart(broken).startswith("<svg")


def test_all_charts_lists_each_chart_once(small):
    charts = fit_charts.all_charts(small)
    assert list(charts) == ["Loss vs compute", "IsoFLOP profiles", "Compute-optimal allocation"]
    assert all(svg.startswith("<svg") for svg in charts.values())
