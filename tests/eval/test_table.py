import json

from rich.console import Console

from tokenmill.eval.table import bpb_table, bpb_text, latest_eval, small_sample_notes, tasks_table

RECORD = {"step": 300, "buckets": {
    "web": {"loss": 4.5, "ppl": 90.0, "bpb": 2.111, "unigram_bpb": 3.052, "docs": 11},
    "code": {"loss": 4.667, "ppl": 106.4, "bpb": 1.934, "unigram_bpb": 2.778, "docs": 14}}}


def test_latest_eval_picks_the_highest_step_numerically(tmp_path):
    assert latest_eval(tmp_path) is None
    (tmp_path / "eval").mkdir()
    for step in (100, 20, 300):
        (tmp_path / "eval" / f"{step}.json").write_text(json.dumps({**RECORD, "step": step}))
    (tmp_path / "eval" / "notes.json").write_text("{}")
    assert latest_eval(tmp_path)["step"] == 300


def test_table_shows_every_bucket_with_its_ratio_to_unigram():
    console = Console(width=120, record=True)
    console.print(bpb_table(RECORD))
    text = console.export_text()
    assert "step 300" in text
    rows = [line.replace("│", " ").split() for line in text.splitlines()]
    lines = {r[0]: " ".join(r) for r in rows if r and r[0] in ("web", "code")}
    assert "1.934" in lines["code"] and "2.778" in lines["code"] and f"{1.934 / 2.778:.3f}" in lines["code"]
    assert "2.111" in lines["web"] and f"{2.111 / 3.052:.3f}" in lines["web"]


def test_tasks_table_flags_contaminated_sets():
    assert tasks_table(RECORD) is None
    record = {**RECORD, "tasks": [{"name": "mc", "format": "arc", "shots": 2, "n": 12, "acc": 0.5, "acc_norm": 0.25},
                                  {"name": "cloze", "format": "lambada", "shots": 0, "n": 12, "acc": 0.0,
                                   "mean_logprob": -3.5}],
              "contamination": {"mc": {"share": 0.0, "flagged": False}, "cloze": {"share": 0.4, "flagged": True}}}
    console = Console(width=140, record=True)
    console.print(tasks_table(record))
    rows = {r[0]: " ".join(r) for r in (line.replace("│", " ").split() for line in console.export_text().splitlines()) if r}
    assert "0.500" in rows["mc"] and "0.250" in rows["mc"] and "0.0%" in rows["mc"] and "FLAGGED" not in rows["mc"]
    assert "-3.500" in rows["cloze"] and "40.0% FLAGGED" in rows["cloze"]


def _bucket(docs, tokens, bpb, low, high):
    return {"loss": 4.0, "ppl": 55.0, "bpb": bpb, "unigram_bpb": 3.0, "docs": docs, "tokens": tokens,
            "bpb_ci_low": low, "bpb_ci_high": high, "bpb_ci_level": 0.95}


def test_bpb_shows_its_interval_and_small_samples_are_warned_about_under_the_table():
    record = {"step": 50, "docs_per_bucket": 100, "checkpoint": "c/step_50", "buckets": {
        "web": _bucket(40, 30_000, 2.0, 1.9, 2.1),      # ±5%, enough documents: no warning
        "code": _bucket(30, 80_000, 2.0, 1.6, 2.4),     # ±20%: enough documents by the floor, too wide
        "books": _bucket(2, 900, 2.5, 1.0, 4.0),        # the case: 2 documents, < 1,000 tokens
        "one": {**_bucket(1, 5_000, 2.2, None, None)}}}
    assert bpb_text(record["buckets"]["web"]) == "2.000 ± 0.100"
    assert bpb_text(record["buckets"]["one"]) == "2.200 (no interval: 1 document)"
    assert bpb_text({"bpb": 1.5}) == "1.500"  # a record from before intervals were stored
    console = Console(width=200, record=True)
    console.print(bpb_table(record))
    text = console.export_text()
    rows = {r[0]: " ".join(r) for r in (line.replace("│", " ").split() for line in text.splitlines()) if r}
    assert "2.000 ± 0.400" in rows["code"] and "2.000 ± 0.100" in rows["web"]
    warnings = [line for line in text.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 3 and not any("web" in w for w in warnings)
    assert any("code: 95% interval ±20% of bpb, wider than ±10%" in w for w in warnings)
    assert any("books: scored on 2 documents (fewer than 9) and 900 tokens (fewer than 1,000)" in w for w in warnings)
    assert small_sample_notes({**record, "buckets": {"web": record["buckets"]["web"]}}) == []


def test_the_fix_named_is_the_cap_when_the_cap_binds():
    capped = {"step": 100, "docs_per_bucket": 8, "buckets": {"web": _bucket(8, 5_000, 2.0, 1.9, 2.1)}}
    assert "raise train.eval_docs" in small_sample_notes(capped)[0]  # in-training evaluation: its cap
    assert "raise eval.max_docs" in small_sample_notes({**capped, "checkpoint": "x"})[0]
    split = {"step": 100, "docs_per_bucket": 100, "buckets": {"web": _bucket(8, 5_000, 2.0, 1.9, 2.1)}}
    assert "raise tokenize.val_fraction or tokenize.min_val_docs" in small_sample_notes(split)[0]
