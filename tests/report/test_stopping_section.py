"""The report's "When to stop" section: verdict, tables and chart from synthetic runs, a clear line
for too few evaluations or an unreadable law file, and the section in a real tiny run's report."""

import math

from tests.report.stopping_synthetic import events, plan, write_run
from tokenmill.config import StopConfig, load_config
from tokenmill.report.stopping import compute_signals
from tokenmill.report.stopping_section import render_signals, section_stopping
from tokenmill.runs import RunDir, read_events
from tokenmill.scaling.reference_law import PUBLISHED_CHINCHILLA


def test_an_overfitting_run_shows_the_verdict_the_bucket_the_chart_and_the_thresholds():
    small = {200: 3.0, 400: 2.8, 600: 2.7, 800: 2.8, 1000: 2.95}
    ev, evals = events([200, 400, 600, 800, 1000], lambda s: {"big": 3.5 - 0.2 * math.log10(s), "small": small[s]},
                       lambda s: 3.3 - 0.4 * math.log10(s), non_embedding=10_000,
                       run_plan=plan(1000, {"big": 0.8, "small": 6.0}, {"big": 0.8, "small": 0.2}))
    page = render_signals(compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig()))
    assert page.startswith("<h2>When to stop</h2>")
    assert '<span class="bad">overfitting a bucket</span>' in page and "bucket &#x27;small&#x27;" in page
    assert '<span class="bad">overfitting</span>' in page and '<span class="bad">6.00 &gt; 4</span>' in page
    assert page.count("<svg") == 1
    assert "indicative only" in page and "rise_tolerance" in page and "Muennighoff" in page


def test_too_few_evaluations_is_one_line_not_a_crash():
    ev, evals = events([100, 200], lambda s: {"web": 3.0}, lambda s: 2.9, non_embedding=1000)
    page = render_signals(compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig()))
    assert "needs ≥ 3 evaluations" in page and "<svg" not in page


def test_a_missing_law_file_is_said_in_the_section(tmp_path):
    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=r", f"report.scaling_law={tmp_path / 'no.json'}"]))
    write_run(run, *events([100, 200, 300], lambda s: {"web": 3.0}, lambda s: 2.9, non_embedding=1000))
    page = section_stopping(run, list(read_events(run.sub("events.jsonl"))), [])
    assert "class=bad" in page and "no such scaling-law file" in page


def test_a_real_tiny_run_has_the_section_in_its_report(tiny_run):
    from tokenmill.eval.evaluate import in_training_evaluator
    from tokenmill.report.build import run_report
    from tokenmill.train.trainer import run_train

    tiny_run.config.train.eval_every = 10  # evaluations at steps 10, 20 and 30
    tiny_run.config.report.tensorboard = "off"
    run_train(tiny_run, on_eval=in_training_evaluator(tiny_run), progress=False)
    run_report(tiny_run)
    page = tiny_run.sub("report.html").read_text()
    section = page[page.index("<h2>When to stop</h2>"):]
    section = section[:section.index("<h2>", 5)]
    assert "Verdict: <span" in section and "the last decade of tokens (3 evaluations)" in section
    assert "<svg" in section and "tokens per parameter D/N" in section


def test_the_gap_to_the_law_says_what_the_law_was_fitted_on_and_flags_an_extrapolation(tmp_path):
    import json

    from tokenmill.scaling.reference_law import load_law

    ev, evals = events([200, 400, 600], lambda s: {"web": 3.5 - 0.2 * math.log10(s)}, lambda s: 3.3 - 0.4 * math.log10(s),
                       non_embedding=10_000)
    page = render_signals(compute_signals(ev, evals, PUBLISHED_CHINCHILLA, StopConfig()))
    assert "the law was fitted on: Hoffmann et al. 2022" in page and "MassiveText" in page
    assert "7,000× fewer parameters than its smallest model" in page  # 10k parameters against 70M
    assert "outside the fit&#x27;s range, not a prediction for this run" in page  # on the gap row too
    fit = {"chinchilla": {"fit": {"E": 1.8, "A": 300.0, "B": 500.0, "alpha": 0.3, "beta": 0.3, "runs": 4}},
           "runs": [{"params": 1e3, "tokens": 1e5}, {"params": 1e5, "tokens": 1e7}]}
    (tmp_path / "fit.json").write_text(json.dumps(fit))
    page = render_signals(compute_signals(ev, evals, load_law(tmp_path / "fit.json"), StopConfig()))
    assert "runs of 1e+03–1e+05 parameters on 1e+05–1e+07 tokens" in page
    assert "not a prediction" not in page and "fewer parameters" not in page
