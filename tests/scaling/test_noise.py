import numpy as np
import pytest

from tokenmill.scaling.noise import run_to_run_noise
from tokenmill.scaling.results import RunResult


def _run(name: str, role: str, params: int, tokens: int, loss: float) -> RunResult:
    return RunResult(name=name, params=params, params_total=params * 2, tokens=tokens, flops=6.0 * params * tokens,
                     budget=6.0 * params * tokens, loss=loss, role=role)


def test_noise_groups_a_sweep_run_with_its_repeats_and_matches_numpy():
    runs = [_run("c-a", "sweep", 100, 1000, 3.10), _run("r-a-s1", "repeat", 100, 1000, 3.13),
            _run("r-a-s2", "repeat", 100, 1000, 3.08), _run("c-b", "sweep", 200, 500, 3.20),
            _run("h", "holdout", 100, 1000, 9.9)]  # same N and D as pair a, but a held-out run: not noise
    (check,) = run_to_run_noise(runs)  # pair b has no repeat: no noise check
    assert check.names == ("c-a", "r-a-s1", "r-a-s2")
    losses = np.array([3.10, 3.13, 3.08])
    assert check.std == pytest.approx(losses.std(ddof=1), rel=1e-12)
    assert check.relative_std == pytest.approx(losses.std(ddof=1) / losses.mean(), rel=1e-12)
    assert check.relative_range == pytest.approx(0.05 / losses.mean(), rel=1e-12)
    assert check.to_dict()["losses"] == [3.10, 3.13, 3.08]


def test_a_repeat_alone_is_not_a_noise_estimate():
    assert run_to_run_noise([_run("r", "repeat", 100, 1000, 3.0)]) == []
