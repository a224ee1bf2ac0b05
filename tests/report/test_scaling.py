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
    assert "Backtest" in page and f"max {fit['backtest']['max_abs_error']:.2%}" in out.output
    as_json = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path), "--bootstrap", "0", "--json"])
    assert json.loads(as_json.output)["holdout"][0]["actual"] == h["actual"]


def test_scaling_fit_names_a_bad_record(tmp_path):
    runs = [r.to_dict() for r in sweep()]
    runs[3]["loss"] = -1.0
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    out = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path)])
    assert out.exit_code == 1 and "results.json" in out.output and runs[3]["name"] in out.output


def test_run_report_scaling_section_plans_the_run_on_this_machine(tmp_path, monkeypatch, tiny_run):
    from tokenmill.report.scaling import section_scaling
    from tokenmill.scaling.calibrate import calibrate, write_calibration
    from tokenmill.scaling.flops import flops_per_token

    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path / "cache"))
    assert "No plan for this machine" in section_scaling(tiny_run, [])  # not calibrated: says how to fix it
    write_calibration(calibrate("cpu", seconds=0.05))
    page = section_scaling(tiny_run, [{"kind": "train_step", "step": 1, "mfu": 0.25, "memory_peak": 2e9}])
    cfg = tiny_run.config
    model = cfg.model.model_copy(update={"vocab_size": cfg.tokenizer.vocab_size})
    tokens = cfg.train.max_steps * cfg.train.micro_batch * cfg.train.seq_len * cfg.train.grad_accum
    exact = flops_per_token(model, cfg.train.seq_len) * tokens
    assert f"{exact:.4g}" in page and "MFU 0.25" in page and "2.00 GB" in page and "1 × this" in page


def test_run_report_scaling_section_shows_the_sweeps_law_and_this_runs_prediction(tmp_path, tiny_run):
    import shutil

    from tokenmill.config import RunConfig
    from tokenmill.report.scaling import section_scaling
    from tokenmill.runs import RunDir

    run_dir = tmp_path / "sweep" / "runs" / "c1e18-n0"
    shutil.copytree(tiny_run.path, run_dir)
    law = {"E": 1.5, "A": 400.0, "B": 300.0, "alpha": 0.3, "beta": 0.25, "runs": 12}
    run = {"name": "c1e18-n0", "params": 10**6, "tokens": 2 * 10**7, "loss": 4.0}
    (tmp_path / "sweep" / "fit.json").write_text(json.dumps({"chinchilla": {"fit": law}, "runs": [run]}))
    page = section_scaling(RunDir(RunConfig.model_validate(tiny_run.config.model_dump()), run_dir), [])
    pred = 1.5 + 400.0 / 1e6 ** 0.3 + 300.0 / 2e7 ** 0.25
    assert "Fitted law of the sweep" in page and f"{pred:,.4g}" in page and f"{(pred - 4) / 4:+.2%}" in page
    registered = [{"name": "c1e18-n0", "registered_at": "2026-01-01T00:00:00Z", "predicted": 3.9, "interval": None,
                   "actual": 4.0, "relative_error": -0.025}]
    (tmp_path / "sweep" / "fit.json").write_text(json.dumps({"chinchilla": {"fit": law}, "runs": [run],
                                                             "registered": registered}))
    page = section_scaling(RunDir(RunConfig.model_validate(tiny_run.config.model_dump()), run_dir), [])
    assert "Pre-registered for this run at 2026-01-01T00:00:00Z" in page and "error -2.50%" in page


def test_scaling_fit_register_writes_the_pending_prediction_once_and_the_page_shows_it(tmp_path):
    held = holdout(4.0)
    _write(tmp_path, sweep(noise=0.005, seed=1))
    (tmp_path / "plan.json").write_text(json.dumps({"runs": [held.to_dict()]}))
    out = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path), "--bootstrap", "0"])
    assert out.exit_code == 0 and "pending held-out holdout: predicted" in out.output
    assert not (tmp_path / "predictions.json").exists()  # printed, not registered without --register
    out = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path), "--bootstrap", "0", "--register"])
    assert "(registered now)" in out.output
    (p,) = json.loads((tmp_path / "predictions.json").read_text())["predictions"]
    assert abs(p["predicted"] - held.loss) / held.loss < 0.01
    _write(tmp_path, [*sweep(noise=0.005, seed=1), held])  # the held-out run has finished
    out = CliRunner().invoke(app, ["scaling", "fit", str(tmp_path), "--bootstrap", "0", "--register"])
    assert f"for holdout: predicted {p['predicted']:.4f}, actual {held.loss:.4f}" in out.output
    page = (tmp_path / "scaling.html").read_text()
    assert "Pre-registered predictions" in page and p["registered_at"] in page


def test_an_uncalibrated_machine_is_planned_at_the_peak_the_run_measured(tmp_path, monkeypatch, tiny_run):
    from tokenmill.report.scaling import section_scaling

    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path / "cache"))  # no calibration here
    start = {"kind": "train_start", "step": 0, "device": "cpu", "dtype": "float32", "peak_flops": 2.5e11,
             "peak_source": "measured", "peak_origin": "quick measurement"}
    page = section_scaling(tiny_run, [start, {"kind": "train_step", "step": 1, "mfu": 0.25}])
    assert "No plan for this machine" not in page
    assert "at the peak the run measured: quick measurement" in page and "0.25 TFLOP/s" in page
    # the published law's loss for this tiny model is flagged, with what the law was fitted on
    assert "MassiveText" in page and "fewer parameters than its smallest model" in page
