import json

from rich.console import Console

from tokenmill.eval.table import bpb_table, latest_eval, tasks_table

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
