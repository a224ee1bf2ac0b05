import json

from typer.testing import CliRunner

from tests.scaling.chinchilla_synthetic import holdout, sweep
from tokenmill.cli import app


def _write(tmp_path, runs):
    (tmp_path / "results.json").write_text(json.dumps({"runs": [r.to_dict() for r in runs]}))


def test_scaling_fit_writes_the_fit_and_a_self_contained_page_and_predicts_the_holdout(tmp_path):
    _write(tmp_path, [*sweep(noise=0.005, seed=1), holdout(4.0)])
    out = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path), "--bootstrap", "20"])
    assert out.exit_code == 0, out.output
    fit = json.loads((tmp_path / "fit.json").read_text())
    (h,) = fit["holdout"]
    assert abs(h["relative_error"]) < 0.01 and f"{h['relative_error']:+.2%}" in out.output
    assert abs(fit["chinchilla"]["fit"]["alpha"] - 0.34) < 0.05  # the law the runs were drawn from
    page = (tmp_path / "scaling.html").read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "src=" not in page  # nothing to fetch
    assert "predicted vs actual" in page and "IsoFLOP minima" in page and h["name"] in page
    as_json = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path), "--bootstrap", "0", "--json"])
    assert json.loads(as_json.output)["holdout"][0]["actual"] == h["actual"]


def test_scaling_fit_names_a_bad_record(tmp_path):
    runs = [r.to_dict() for r in sweep()]
    runs[3]["loss"] = -1.0
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    out = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path)])
    assert out.exit_code == 1 and "results.json" in out.output and runs[3]["name"] in out.output
