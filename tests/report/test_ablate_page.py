"""The ablation page and terminal tables show what ablate_stats computed: the headline with its
interval, every arm's Δ per size, the ranking, the lines and the evaluation set."""

from __future__ import annotations

from rich.console import Console

from tokenmill.decisions.ablate_stats import summarize
from tokenmill.report.ablate_page import fmt_ci, headline_text, render_ablate_page, terminal_tables


def _result():
    runs = []
    for size, flops, base in (("s", 1e12, 2.0), ("l", 1e13, 1.8)):
        for seed, noise in ((1, 0.01), (2, -0.01), (3, 0.0)):
            for arm, shift in (("full", 0.0), ("raw", 0.1 + 0.002 * seed), ("no-dedup", 0.001 * seed - 0.002)):
                runs.append({"arm": arm, "size": size, "seed": seed, "flops": flops, "tasks": {},
                             "slices": {"web": {"bpb": base + shift + noise, "bytes": 10}}})
    arms = {a: {"without": w, "train_tokens": t, "note": "", "steps": ["extract"], "set": [], "data_seconds": 1.0,
                "epochs": {"s": 0.5, "l": 1.0}}
            for a, w, t in (("full", [], 800), ("raw", [], 1000), ("no-dedup", ["minhash_dedup"], 900))}
    sizes = [{"name": "s"}, {"name": "l"}]
    return {"name": "x", "reference": "full", "confidence": 0.95, "sizes": sizes, "arms": arms, "runs": runs,
            "tokenizer_from": "full", "train_seconds": 60.0, "data_seconds": 30.0,
            "eval_set": {"slices": {"web": {"docs": 5, "bytes": 50, "from": "bucket web"}}},
            **summarize(runs, arms, sizes, "full", "raw", 0.95)}


def test_page_and_tables_carry_the_measured_figures():
    result = _result()
    raw_l = result["deltas"]["raw"]["delta"]["all"]["l"]
    assert raw_l["verdict"] == "worse"
    text = headline_text(result)
    assert text.startswith("raw is worse than full at l") and fmt_ci(raw_l) in text and "holds" in text
    page = render_ablate_page(result)
    for needle in ("Δ against full", "Steps ranked", "minhash_dedup", "<svg", "Evaluation set", fmt_ci(raw_l),
                   "class=bad"):
        assert needle in page, needle
    console = Console(record=True, width=200)
    for t in terminal_tables(result):
        console.print(t)
    out = console.export_text()
    assert fmt_ci(raw_l) in out and "minhash_dedup" in out and "not resolved at this size" in out


def test_a_page_before_any_comparison_says_so():
    result = _result()
    for k in ("deltas", "ranking", "headline", "lines", "means", "flops", "metrics"):
        result.pop(k)
    assert "No comparison yet" in render_ablate_page(result) and terminal_tables(result) == []
