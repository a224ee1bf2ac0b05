import pytest

from tests.scaling.chinchilla_synthetic import BUDGETS, sweep
from tokenmill.scaling.backtest import backtest
from tokenmill.scaling.fit import ScalingFitError


def test_the_backtest_predicts_the_largest_budget_from_the_others():
    runs = sweep(noise=0.0)
    b = backtest(runs)
    assert b.budget == max(BUDGETS) and b.fitted_budgets == tuple(sorted(BUDGETS)[:-1])
    assert len(b.names) == 9 and b.max_abs_error < 0.005  # noiseless data from the law itself
    assert b.actual == tuple(r.loss for r in runs if r.budget == max(BUDGETS))
    assert b.to_dict()["errors"] == list(b.errors)


def test_a_backtest_needs_three_budgets():
    with pytest.raises(ScalingFitError, match="three or more budgets"):
        backtest([r for r in sweep() if r.budget in BUDGETS[:2]])
