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


def _bucket(docs, tokens, bpb, half):
    return {"docs": docs, "tokens": tokens, "loss": 2.0, "ppl": 7.4, "bpb": bpb, "unigram_bpb": 3.0,
            "bpb_ci_low": bpb - half, "bpb_ci_high": bpb + half, "bpb_ci_level": 0.95}


def test_every_bpb_figure_carries_its_interval_and_small_buckets_are_warned_about():
    early = {"step": 5, "buckets": {"web": _bucket(40, 20_000, 2.5, 0.2), "books": _bucket(2, 1026, 3.0, 1.5)}}
    last = {"step": 10, "buckets": {"web": _bucket(40, 20_000, 2.0, 0.08), "books": _bucket(2, 1026, 2.7, 1.4)}}
    watched = [{"step": 10, "buckets": {"web": _bucket(40, 20_000, 2.01, 0.09)}, "tasks": [], "device": "cpu"}]
    page = section_eval([early, last], watched)
    for figure in ("2.000 ± 0.080", "2.700 ± 1.400", "2.500 ± 0.200", "3.000 ± 1.500", "2.010 ± 0.090"):
        assert figure in page  # the latest table, the table over steps, the watcher's table
    assert "Too few held-out documents" in page
    assert "books: scored on 2 documents (fewer than 9)" in page and "web:" not in page.split("Too few")[1]
    ok = {"step": 10, "buckets": {"web": _bucket(40, 20_000, 2.0, 0.08)}}
    assert "Too few held-out documents" not in section_eval([ok]) and "2.000 ± 0.080" in section_eval([ok])
