import json
import re

import pytest

from tokenmill.config import load_config
from tokenmill.report.build import render, run_report
from tokenmill.report.run_files import train_curve
from tokenmill.runs import RunDir


def _run(tmp_path):
    return RunDir.create(load_config(None, [f"root={tmp_path}", "name=rep"]))


def test_train_curve_keeps_the_last_record_of_a_replayed_step():
    ev = [{"kind": "train_step", "step": s, "loss": l, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 10.0, "mfu": 0.1}
          for s, l in [(1, 5.0), (2, 4.0), (3, 3.9), (2, 4.0), (3, 3.8)]]
    curve = train_curve(ev + [{"kind": "eval", "step": 3}])
    assert curve["step"] == [1, 2, 3] and curve["loss"] == [5.0, 4.0, 3.8]


def test_empty_run_renders_with_placeholders(tmp_path):
    page = render(_run(tmp_path))
    assert "No training steps yet" in page and "No evaluation yet" in page


def test_full_report_is_self_contained_and_shows_the_figures(tmp_path):
    run = _run(tmp_path)
    for s in range(1, 21):
        run.events.write("train", "train_step", step=s, loss=6 - s * 0.1, lr=1e-3, grad_norm=1.0,
                         tokens_per_s=1000.0, mfu=0.2)
    (run.path / "eval").mkdir()
    for step, bpb in [(10, 2.5), (20, 1.75)]:
        rec = {"step": step, "buckets": {"web": {"loss": 2.0, "ppl": 7.39, "bpb": bpb, "unigram_bpb": 3.5,
                                                 "tokens": 100, "bytes": 400, "docs": 3}},
               "samples": [{"bucket": "web", "prompt": "<b>hi", "completion": " there"}]}
        (run.path / "eval" / f"{step}.json").write_text(json.dumps(rec))
    (run.path / "curated").mkdir()
    def step(di, do, rules):
        return {"docs_in": di, "docs_out": do, "bytes_in": 10 * di, "bytes_out": 10 * do,
                "docs_rejected": di - do, "rejected": rules}
    (run.path / "curated" / "_funnel.json").write_text(json.dumps(
        {"steps": ["read", "exact_dedup"],
         "total": {"read": step(10, 10, {}), "exact_dedup": step(10, 7, {"duplicate_of": {"docs": 3, "bytes": 30}})},
         "buckets": {"web": {"read": step(10, 10, {}), "exact_dedup": step(10, 7, {})}}}))
    run_report(run)
    page = (run.path / "report.html").read_text()
    assert "Model: evaluation at step 20" in page and "1.75" in page and "3.5" in page
    assert "0.500" in page  # bpb / unigram = 1.75 / 3.5
    assert "duplicate_of 3" in page and "70" in page  # funnel rules and kept %
    assert "&lt;b&gt;hi" in page  # sample text is escaped
    assert page.count("<svg") >= 4
    assert not re.search(r"""(src|href)=["']https?://""", page)  # no external resources


def test_mixture_plan_section_shows_phases_and_epochs(tmp_path):
    run = _run(tmp_path)
    plan = {"token_budget": 1000, "packing": "packed", "doc_masking": True, "r_pad": 0.01, "r_pad_kind": "estimate",
            "nominal_tokens": 1000, "effective_tokens": 900, "effective_rule": "rule",
            "phases": [{"name": "short", "start_step": 1, "end_step": 8, "seq_len": 64, "rows_per_micro_batch": 4,
                        "anneal": False, "weights": {"web": 1.0}},
                       {"name": "anneal", "start_step": 9, "end_step": 10, "seq_len": 128, "rows_per_micro_batch": 2,
                        "anneal": True, "weights": {"web": 1.0}}],
            "buckets": {"web": {"available_tokens": 200, "tokens": 1000, "epochs": 5.0, "effective_tokens": 900,
                                "share": 1.0, "warn": True}},
            "warnings": ["bucket web is repeated 5.0 epochs (> 4)"]}
    run.events.write("train", "train_start", step=0, plan=plan)
    page = render(run)
    assert "Mixture and curriculum" in page and "<td>9–10</td>" in page
    # the planned epochs of the bucket, flagged (the Data section's planned-vs-delivered table)
    assert "<td><span class=bad>5</span></td>" in page
    assert "repeated 5.0 epochs" in page


def test_eval_section_shows_tasks_contamination_flags_and_memorization():
    from tokenmill.report.eval_section import section_eval

    record = {"step": 40, "buckets": {"web": {"docs": 2, "tokens": 10, "loss": 2.0, "ppl": 7.4, "bpb": 1.5,
                                               "unigram_bpb": 2.5}},
              "tasks": [{"name": "arc-mini", "format": "arc", "shots": 1, "n": 8, "acc": 0.375, "acc_norm": 0.5}],
              "contamination": {"arc-mini": {"ngrams": 100, "found": 40, "share": 0.4, "flagged": True},
                                "lambada-mini": {"ngrams": 50, "found": 0, "share": 0.0, "flagged": False}},
              "memorization": {"overall": {"train": {"n": 6, "exact": 0.5, "token_match": 0.8},
                                           "heldout": {"n": 6, "exact": 0.0, "token_match": 0.3}}}}
    html_text = section_eval([record])
    assert "arc-mini" in html_text and "0.375" in html_text and "40.00% flagged" in html_text
    assert "lambada-mini" in html_text and "0.00%" in html_text  # an eval set without a task row
    assert "Memorization" in html_text and "0.8" in html_text and "0.3" in html_text


def test_task_accuracy_is_charted_over_the_evaluations_that_scored_tasks():
    from tokenmill.report.eval_section import section_eval

    def record(step: int, acc: float) -> dict:
        return {"step": step, "buckets": {"web": {"docs": 1, "tokens": 5, "loss": 2.0, "ppl": 7.4, "bpb": 1.5,
                                                   "unigram_bpb": 2.5}},
                "tasks": [{"name": "arc-mini", "format": "arc", "shots": 0, "n": 4, "acc": acc, "acc_norm": acc}]}
    assert "Task accuracy" not in section_eval([record(10, 0.25)])  # one point is not a curve
    html_text = section_eval([record(10, 0.25), record(20, 0.5)])
    assert "Task accuracy" in html_text and "<svg" in html_text


def test_canary_exposure_table_by_repetition_count():
    from tokenmill.report.eval_section import section_eval

    record = {"step": 5, "buckets": {"web": {"docs": 1, "tokens": 5, "loss": 2.0, "ppl": 7.4, "bpb": 1.5,
                                              "unigram_bpb": 2.5}},
              "canaries": {"max_exposure": 19.93, "candidates": 200,
                           "by_count": {"48": {"canaries": 1, "mean_exposure_empirical": 7.65,
                                               "mean_exposure_extrapolated": 9.19, "mean_log_ppl": 74.1},
                                        "1": {"canaries": 1, "mean_exposure_empirical": 1.79,
                                              "mean_exposure_extrapolated": 1.86, "mean_log_ppl": 103.1}}}}
    html_text = section_eval([record])
    assert "Canaries" in html_text and "19.9 bits" in html_text
    assert html_text.index("1.79") < html_text.index("7.65")  # rows by repetition count, 1 before 48


def test_slice_table_lists_every_evaluation_step():
    from tokenmill.report.eval_section import section_eval

    def record(step: int, bpb: float) -> dict:
        return {"step": step, "buckets": {"web": {"docs": 1, "tokens": 5, "loss": 2.0, "ppl": 7.4, "bpb": bpb,
                                                   "unigram_bpb": 2.5}}}
    page = section_eval([record(10, 2.25), record(20, 1.875), record(30, 1.625)])
    table_html = page[page.index("at every evaluation"):]
    assert all(f"<td>{v}</td>" in table_html for v in ("10", "20", "30", "2.250", "1.875", "1.625"))  # bpb: 3 decimals


def test_a_continued_run_shows_its_source_and_the_forgetting_table(tmp_path):
    from tokenmill.eval.evaluate import write_eval

    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=cont", "mixture.replay.buckets=[books]",
                                           "mixture.replay.share=0.1"]))
    run.events.write("train", "init_from", **{"from": "/m/hf", "format": "hf-llama", "parity": {"max_rel_diff": 2e-7}})
    for step, bpb in ((0, 1.25), (40, 1.5)):
        write_eval(run, step, {"books": {"docs": 1, "tokens": 9, "loss": 1.0, "ppl": 2.7, "bpb": bpb, "unigram_bpb": 3.0}})
    page = render(run)
    assert "<h2>Continued pretraining</h2>" in page and "HF Llama directory" in page and "10% of every batch" in page
    assert "+0.2500" in page


HOSTILE_LINES = ["[1,2,3]", "null", "Infinity", "[" * 100_000 + "]" * 100_000]


def test_report_skips_and_counts_event_lines_that_are_not_objects_and_draws_non_finite_values(tmp_path):
    """Lines of events.jsonl that are not JSON objects (a bare value, a line 100,000 levels deep)
    are left out and counted on the page and in the stage's summary; Infinity and NaN inside an
    event are values the charts draw around."""
    run = _run(tmp_path)
    odd = {3: float("inf"), 4: float("nan")}
    for s in range(1, 11):
        run.events.write("train", "train_step", step=s, loss=odd.get(s, 6 - s * 0.1), lr=1e-3,
                         grad_norm=float("inf") if s == 5 else 1.0, tokens_per_s=1000.0, mfu=0.2)
        if s == 2:
            with open(run.sub("events.jsonl"), "a") as fh:
                fh.write("\n".join(HOSTILE_LINES) + "\n")
    summary = run_report(run)
    note = "events.jsonl: skipped 4 lines that are not JSON objects (first at line 3)"
    assert summary["warning"] == note
    page = (run.path / "report.html").read_text()
    assert f"<p class=bad>{note}</p>" in page and "No training steps yet" not in page and "<svg" in page
    assert "skipped" not in render(_run(tmp_path / "clean"))


def test_an_evaluation_record_too_deep_is_one_line_naming_it(tmp_path):
    from tokenmill.json_limits import BadJSONFile

    run = _run(tmp_path)
    (run.path / "eval").mkdir()
    (run.path / "eval" / "10.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadJSONFile, match=r"eval/10\.json: JSON nested deeper than 200 levels$"):
        run_report(run)


def test_a_run_trained_twice_shows_the_current_attempt_and_lists_the_earlier_one(tmp_path):
    from tests.report.test_attempts import two_attempts

    run = _run(tmp_path)
    with open(run.sub("events.jsonl"), "w") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in two_attempts())
    page = render(run)
    assert page.count("Earlier training attempts (1)") == 1
    assert "interrupted 24" not in page and "interrupted (Ctrl-C) at step 24" in page
    events_table = page.split("<h3>Events")[1].split("</table>")[0]
    assert "interrupted" not in events_table and "checkpoints_set_aside" not in events_table


def test_every_task_metric_is_named_and_none_is_nan():
    from tokenmill.report.eval_section import section_eval

    record = {"step": 40, "buckets": {"web": {"docs": 2, "tokens": 10, "loss": 2.0, "ppl": 7.4, "bpb": 1.5,
                                               "unigram_bpb": 2.5}},
              "tasks": [{"name": "mc", "format": "arc", "shots": 0, "n": 8, "acc": 0.375, "acc_norm": 0.5},
                        {"name": "cloze", "format": "lambada", "shots": 0, "n": 8, "acc": 0.0, "mean_logprob": -9.25},
                        {"name": "qa", "format": "jsonl", "shots": 2, "n": 40, "acc": 0.1, "exact_match": 0.1},
                        {"name": "code", "format": "jsonl", "shots": 0, "n": 10, "acc": 0.0, "pass@1": 0.2},
                        {"name": "odd", "format": "jsonl", "shots": 0, "n": 1}]}
    tasks = section_eval([record]).split("<h3>Tasks")[1].split("</table>")[0]
    for text in ("acc_norm 0.5", "mean log-prob -9.25", "exact match 0.1", "pass@1 0.2"):
        assert text in tasks, text
    assert "nan" not in tasks and "<th>other metric</th>" in tasks


def test_task_lines_drawn_on_top_of_each_other_are_named():
    from tokenmill.report.eval_section import section_eval

    def record(step: int, acc: float) -> dict:
        tasks = [{"name": n, "format": "jsonl", "shots": 0, "n": 4, "acc": a} for n, a in
                 (("mc", acc), ("qa", 0.0), ("code", 0.0), ("cloze", 0.0))]
        return {"step": step, "buckets": {"web": {"docs": 1, "tokens": 5, "loss": 2.0, "ppl": 7.4, "bpb": 1.5,
                                                   "unigram_bpb": 2.5}}, "tasks": tasks}
    html_text = section_eval([record(10, 0.25), record(20, 0.5)])
    assert "qa, code and cloze score the same at every evaluation (0): one line." in html_text
    assert "mc," not in html_text.split("Task accuracy")[1]  # its own line: not in the note
