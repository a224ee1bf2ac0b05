import json
from dataclasses import asdict

import pytest

from tokenmill.scaling.analysis import analyze
from tokenmill.scaling.fit import FitConfig
from tokenmill.scaling.preregister import (PREDICTIONS, load_registered, pending_holdouts, predict_pending, register,
                                           registered_checks)
from tokenmill.scaling.results import load_results

from tests.scaling import chinchilla_synthetic as syn


def _write(sweep_dir, runs, planned_holdout):
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "results.json").write_text(json.dumps({"runs": [asdict(r) for r in runs]}))
    plan = [asdict(r) for r in runs] + [asdict(planned_holdout)]
    (sweep_dir / "plan.json").write_text(json.dumps({"runs": plan}))


def test_a_registered_prediction_is_written_once_and_checked_when_its_run_finishes(tmp_path):
    sweep_dir = tmp_path / "sweep"
    runs, held = syn.sweep(noise=0.002, seed=3), syn.holdout(4.0)
    _write(sweep_dir, runs, held)
    assert [p["name"] for p in pending_holdouts(sweep_dir)] == ["holdout"]

    first = analyze(load_results(sweep_dir / "results.json"), FitConfig(bootstrap_samples=20))
    new = register(sweep_dir, first)
    assert [p["name"] for p in new] == ["holdout"]
    assert new[0]["predicted"] == pytest.approx(float(syn.true_loss(held.params, held.tokens)), rel=0.01)
    assert new[0]["fit_runs"] == sorted(r.name for r in runs) and new[0]["registered_at"].endswith("Z")
    assert predict_pending(sweep_dir, first)[0]["predicted"] == new[0]["predicted"]

    # a later fit on other data never overwrites the record
    _write(sweep_dir, syn.sweep(noise=0.05, seed=9), held)
    later = analyze(load_results(sweep_dir / "results.json"), FitConfig(bootstrap_samples=0))
    assert register(sweep_dir, later) == []
    assert load_registered(sweep_dir)[0]["predicted"] == new[0]["predicted"]
    assert registered_checks(sweep_dir, later)[0]["actual"] is None

    # the held-out run finishes: the record meets its actual loss
    done = runs + [held]
    (sweep_dir / "results.json").write_text(json.dumps({"runs": [asdict(r) for r in done]}))
    final = analyze(load_results(sweep_dir / "results.json"), FitConfig(bootstrap_samples=0))
    assert pending_holdouts(sweep_dir) == [] and register(sweep_dir, final) == []
    check = registered_checks(sweep_dir, final)[0]
    assert check["actual"] == held.loss
    assert check["relative_error"] == pytest.approx((new[0]["predicted"] - held.loss) / held.loss)


def test_a_broken_predictions_file_is_named(tmp_path):
    (tmp_path / PREDICTIONS).write_text("{not json")
    with pytest.raises(ValueError, match=PREDICTIONS):
        load_registered(tmp_path)
