"""The law a run is held against: its slope per decade, compute-optimal ratio and where it comes from."""

import json
import math

import pytest

from tokenmill.scaling.reference_law import PUBLISHED_CHINCHILLA, LawFileError, load_law

LAW = {"E": 1.8, "A": 300.0, "B": 500.0, "alpha": 0.3, "beta": 0.3}


def write(path, obj):
    path.write_text(json.dumps(obj))
    return path


def test_slope_per_decade_is_the_derivative_along_log10_tokens():
    law, n, d = PUBLISHED_CHINCHILLA, 1e8, 2e9
    h = 1e-5
    numeric = (law.predict(n, d * 10 ** h) - law.predict(n, d * 10 ** -h)) / (2 * h)
    assert law.slope_per_decade(d) == pytest.approx(numeric, rel=1e-6)
    assert law.slope_per_decade(d) == pytest.approx(-0.28 * 410.7 * d ** -0.28 * math.log(10))


def test_a_fitted_law_gives_the_ratio_at_its_iso_compute_minimum(tmp_path):
    law = load_law(write(tmp_path / "fit.json", {"chinchilla": {"fit": {**LAW, "runs": 9}},
                                                 "runs": [{"params": 1e6, "tokens": 2e7, "role": "sweep"},
                                                          {"params": 8e6, "tokens": 1e8, "role": "sweep"},
                                                          {"params": 1e9, "tokens": 1e9, "role": "holdout"}]}))
    n, d = 3e6, 6e7
    ratio = law.optimal_ratio(n, d)
    compute = 6 * n * d
    n_opt = math.sqrt(compute / 6 / ratio)  # D = ratio·N on C = 6·N·D

    def loss(n_):
        return law.predict(n_, compute / 6 / n_)
    assert loss(n_opt) < loss(n_opt * 1.01) and loss(n_opt) < loss(n_opt / 1.01)
    assert not law.published and law.params_kind == "non_embedding" and "9 runs" in law.label
    assert law.fitted_range == ((1e6, 8e6), (2e7, 1e8))  # the held-out run is not part of the fit
    assert law.outside_range(n, d) is None and "N = 1e+09" in law.outside_range(1e9, d)


def test_the_published_law_uses_chinchillas_20_and_total_parameters():
    assert PUBLISHED_CHINCHILLA.optimal_ratio(1e6, 1e6) == 20.0
    assert PUBLISHED_CHINCHILLA.params_kind == "total" and PUBLISHED_CHINCHILLA.published
    assert "indicative only" in PUBLISHED_CHINCHILLA.label


def test_a_bare_law_object_loads(tmp_path):
    law = load_law(write(tmp_path / "law.json", LAW))
    assert law.fit.B == 500.0 and law.fitted_range is None


@pytest.mark.parametrize("content, message", [
    (None, "no such scaling-law file"),
    ("{not json", "not valid JSON"),
    ({"chinchilla": {}}, "no fitted law"),
    ({**LAW, "beta": 0.0}, "does not fall"),
    ({**LAW, "A": "big"}, "'A' must be"),
])
def test_a_bad_law_file_is_refused_with_its_path(tmp_path, content, message):
    path = tmp_path / "law.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(LawFileError, match=message) as err:
        load_law(path)
    assert str(path) in str(err.value)


def test_outside_the_range_says_by_how_much_and_where_the_law_comes_from(tmp_path):
    (n0, n1), (d0, d1) = PUBLISHED_CHINCHILLA.fitted_range
    assert PUBLISHED_CHINCHILLA.outside_range(1e9, 1e11) is None
    assert PUBLISHED_CHINCHILLA.outside_range(n1 * 2.5, 1e11) == "N = 4e+10, 2.5× more parameters than its largest model (1.6e+10)"
    assert PUBLISHED_CHINCHILLA.outside_range(1e9, d1 * 10) == "D = 5e+12, 10× more tokens than its longest run (5e+11)"
    assert PUBLISHED_CHINCHILLA.range_verdict(1e9, 1e11) == "within the fit's range (N 7e+07–1.6e+10, D 5e+09–5e+11)"
    assert PUBLISHED_CHINCHILLA.range_verdict(n0 / 100, d0).endswith("— not a prediction for this run")
    assert "MassiveText" in PUBLISHED_CHINCHILLA.provenance()
    bare = load_law(write(tmp_path / "law.json", LAW))
    assert bare.outside_range(1.0, 1.0) is None and bare.range_verdict(1.0, 1.0) == "the fit's range is unknown"
    assert "range is unknown" in bare.provenance() and str(tmp_path / "law.json") in bare.provenance()
