"""Stage summaries worded for a person: the numbers that matter with separators and units, and
never a Python dict, list or repr, whatever a summary holds (a stage that grew a field included)."""

from __future__ import annotations

import re

import pytest

from tokenmill.summaries import duration, plain, size, summary_line

# summaries as the stages write them (.stages/<stage>.json of a real run)
RECORDED = {
    "curate": {"docs_in": 692, "bytes_in": 14506620, "docs_out": 640, "bytes_out": 8619679, "docs_rejected": 52,
               "seconds": 24.37, "buckets": {"code": {"docs_out": 262, "parts": 1}, "web": {"docs_out": 378, "parts": 2}}},
    "tokenizer": {"vocab_size": 32000, "tokenizer_sha256": "e81a43e5" * 8, "fast_encoder_identical": True,
                  "bytes_per_token": {"books": 1.106, "web": 1.095}, "seconds": 0.81},
    "tokenize": {"encoder": "tiktoken", "books": {"train": 292186, "val": 32794}, "web": {"train": 284251, "val": 10059},
                 "seconds": 0.32},
    "train": {"steps": 5000, "final_loss": 5.343227863311768, "tokens": 20480000, "seconds": 1083.4, "params": 26080,
              "resumed_from": "/runs/r/checkpoints/step_2500"},
    "eval": {"step": 5000, "bpb": {"books": 1.0938, "web": 1.1114}, "unigram_bpb": {"books": 4.664, "web": 4.5143},
             "tasks": {"python-mc": 0.3333}, "flagged": [], "seconds": 10.49},
    "report": {"path": "runs/r/report.html", "tensorboard": "runs/r/tensorboard", "seconds": 4.44},
}
REPR = re.compile(r"[{}\[\]'\"]|\bTrue\b|\bFalse\b|\bNone\b")


@pytest.mark.parametrize("stage", sorted(RECORDED))
def test_every_stage_reads_as_words_with_no_repr(stage):
    line = summary_line(stage, RECORDED[stage])
    assert not REPR.search(line), line
    assert "\n" not in line and len(line) < 240, line


def test_each_stage_shows_the_numbers_a_person_wants():
    assert summary_line("curate", RECORDED["curate"]) == (
        "692 documents in (14.5 MB), 640 kept (92.5%, 8.6 MB), 52 removed; documents per bucket: code 262, web 378; 24.4 s"
    )
    assert summary_line("tokenizer", RECORDED["tokenizer"]) == (
        "vocabulary 32,000; bytes per token: books 1.11, web 1.09; 0.8 s"  # the sha256 is for machines
    )
    assert summary_line("tokenize", RECORDED["tokenize"]) == (
        "576,437 training tokens, 42,853 held out; per bucket (training / held out): books 292,186 / 32,794, "
        "web 284,251 / 10,059; encoder tiktoken; 0.3 s"
    )
    assert summary_line("train", RECORDED["train"]) == (
        "5,000 steps, 20,480,000 tokens, 26,080 parameters; final loss 5.343; "
        "resumed from /runs/r/checkpoints/step_2500; 18 min 3 s"
    )
    assert summary_line("eval", RECORDED["eval"]) == (
        "step 5,000, bits per byte: books 1.094 (unigram 4.664), web 1.111 (unigram 4.514); "
        "accuracy: python-mc 0.333; no contamination flagged; 10.5 s"
    )
    assert summary_line("report", RECORDED["report"]) == "runs/r/report.html; TensorBoard scalars in runs/r/tensorboard; 4.4 s"


def test_pii_replacements_are_said_when_the_pii_step_ran():
    line = summary_line("curate", {**RECORDED["curate"], "pii_replaced": {"name": 1204, "email": 3}})
    assert "; PII replaced: name 1,204, email 3;" in line and not REPR.search(line)
    assert "; no PII replaced;" in summary_line("curate", {**RECORDED["curate"], "pii_replaced": {}})
    assert "PII" not in summary_line("curate", RECORDED["curate"])


def test_quarantined_records_are_counted_among_the_removed_when_there_are_some():
    line = summary_line("curate", {**RECORDED["curate"], "docs_quarantined": 3})
    assert "52 removed (3 of them unreadable, quarantined)" in line
    assert "quarantined" not in summary_line("curate", {**RECORDED["curate"], "docs_quarantined": 0})


def test_a_fresh_run_is_not_called_resumed_and_a_differing_fast_encoder_is_said():
    assert "resumed" not in summary_line("train", {**RECORDED["train"], "resumed_from": None})
    assert "DIFFER" in summary_line("tokenizer", {**RECORDED["tokenizer"], "fast_encoder_identical": False})
    assert "contamination flagged in web, books" in summary_line("eval", {**RECORDED["eval"], "flagged": ["web", "books"]})


def test_unknown_keys_and_stages_fall_back_to_key_value_words():
    grown = {**RECORDED["train"], "zero_stage": 2, "shards": ["a", "b"], "layout": {"dp": 2, "tp": 1}, "ok": False}
    line = summary_line("train", grown)
    assert "zero stage 2; shards a, b; layout dp 2, tp 1; ok no" in line and not REPR.search(line)
    assert summary_line("someday", {"items": 1234567, "note": None, "seconds": 3725}) == "items 1,234,567; note none; 1 h 2 min"
    assert summary_line("tokenize", {}) == "done"  # an empty summary (a stage with nothing to say)


def test_units():
    assert [size(n) for n in (512, 1500, 14506620, 2.5e9)] == ["512 B", "1.5 kB", "14.5 MB", "2.5 GB"]
    assert [duration(s) for s in (0.81, 59.94, 185, 7260)] == ["0.8 s", "59.9 s", "3 min 5 s", "2 h 1 min"]
    assert plain({"a": [1, {"b": None}], "c": 0.123456}) == "a 1, b none, c 0.1235"
    assert plain(("x", 2)) == "x, 2" and plain([]) == "none"


def test_a_report_table_cell_holding_a_mapping_or_list_is_words():
    from tokenmill.report.page import table

    html_table = table(["what", "value"], [["buckets", {"web": 3, "code": [1, 2]}], ["steps", 1234]])
    assert "web 3, code 1, 2" in html_table and "1,234" in html_table
    assert "{" not in html_table and "[" not in html_table and "&#x27;" not in html_table
