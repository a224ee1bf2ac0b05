"""Single-variable laws: exact data gives back the parameters it was made from."""

import numpy as np
import pytest

from tokenmill.scaling.powerlaws import (
    PowerLaw,
    PowerLawError,
    best_loss_per_size,
    fit_compute_frontier,
    fit_power_law,
    fit_size_law,
)


def test_power_law_recovers_coefficient_and_exponent():
    x = np.geomspace(1e3, 1e9, 7)
    law = fit_power_law(x, 3.0 * x ** 0.5)
    assert law.coefficient == pytest.approx(3.0, rel=1e-9)
    assert law.exponent == pytest.approx(0.5, rel=1e-9)
    assert PowerLaw(3.0, 0.5)(100.0) == pytest.approx(30.0)


def test_compute_frontier_recovers_its_offset_scale_and_exponent():
    c = np.geomspace(1e15, 1e19, 6)
    e_c, c_c, alpha = 1.8, 3e12, 0.12
    law = fit_compute_frontier(c, e_c + (c_c / c) ** alpha)
    assert law.E_c == pytest.approx(e_c, rel=1e-5)
    assert law.C_c == pytest.approx(c_c, rel=1e-3)
    assert law.alpha_c == pytest.approx(alpha, rel=1e-5)
    assert law(4e19) == pytest.approx(e_c + (c_c / 4e19) ** alpha, rel=1e-6)


def test_compute_frontier_without_offset_is_kaplans_pure_power_law():
    c = np.geomspace(1e15, 1e19, 5)
    law = fit_compute_frontier(c, (2.3e8 / c) ** 0.05)
    assert law.E_c == pytest.approx(0.0, abs=1e-6)
    assert law.alpha_c == pytest.approx(0.05, rel=1e-4)


def test_size_law_fits_the_best_loss_of_each_size():
    sizes = np.array([1e6, 1e6, 1e7, 1e7, 1e8])
    best = (8.8e13 / sizes) ** 0.076
    losses = best * np.array([1.0, 1.2, 1.1, 1.0, 1.0])  # the worse run of a size must be ignored
    got_sizes, got_best = best_loss_per_size(sizes, losses)
    assert list(got_sizes) == [1e6, 1e7, 1e8]
    law = fit_size_law(sizes, losses)
    assert law.alpha_n == pytest.approx(0.076, rel=1e-9)
    assert law.N_c == pytest.approx(8.8e13, rel=1e-6)


def test_too_few_points_and_non_positive_values_are_errors():
    with pytest.raises(PowerLawError, match="at least 3 distinct"):
        fit_compute_frontier([1e15, 1e16], [3.0, 2.9])
    with pytest.raises(PowerLawError, match="positive"):
        fit_power_law([1.0, 2.0], [1.0, 0.0])
    with pytest.raises(PowerLawError, match="does not fall"):
        fit_size_law([1e6, 1e7], [3.0, 3.0])


def test_points_that_do_not_determine_a_line_are_an_error_not_an_overflow():
    import pytest as _pytest

    from tokenmill.scaling.powerlaws import PowerLawError, fit_power_law

    with _pytest.raises(PowerLawError, match="do not determine a line"):
        fit_power_law([1e13, 1.0000001e13], [1e3, 1e9])  # nearly equal x, very different y
