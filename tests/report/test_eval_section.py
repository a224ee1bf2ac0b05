"""The report's evaluation section (report/eval_section.py): the long-context tables."""

from __future__ import annotations

from tokenmill.report.eval_section import section_eval


def _record(**extra):
    return {"step": 10, "buckets": {"web": {"docs": 2, "tokens": 100, "loss": 2.0, "ppl": 7.4, "bpb": 1.1,
                                            "unigram_bpb": 2.0}}, **extra}


def test_long_context_positions_and_passkey_are_shown():
    lc = {"trained_seq_len": 256, "rope": {"rope_theta": 10000.0, "rope_scaling": "yarn", "rope_scaling_factor": 4.0},
          "positions": {"seq_len": 1024, "docs": 12, "buckets": [
              {"from": 0, "to": 256, "tokens": 3072, "bytes": 9000, "loss": 3.1, "bpb": 1.2345},
              {"from": 256, "to": 1024, "tokens": 9216, "bytes": 27000, "loss": 2.9, "bpb": 1.1111}]},
          "passkey": {"seq_len": 1024, "trials": 40, "accuracy": 0.75, "logprob": -3.0,
                      "by_distance": [{"from": 0, "to": 256, "trials": 10, "accuracy": 1.0, "logprob": -0.1}]}}
    page = section_eval([_record(long_context=lc)])
    assert "<h3>Long context</h3>" in page and "12 held-out documents of at least 1024 tokens" in page
    assert "256–1024 (beyond the trained length)" in page and "0–256 (beyond" not in page
    assert "1.23" in page and "1.11" in page
    assert "<b>75%</b> of 40" in page


def test_no_long_context_no_section():
    assert "Long context" not in section_eval([_record()])
