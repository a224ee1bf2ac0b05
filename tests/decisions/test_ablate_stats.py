"""Ablation statistics: paired t intervals, bpb-vs-compute lines, the data-efficiency multiplier,
the gap's trend with size and the ranking of steps — each against an independent computation."""

from __future__ import annotations

import math
import statistics

import pytest

from tokenmill.decisions.ablate_stats import (ALL, fit_line, multiplier, overall, paired_ci, summarize, trend,
                                              verdict)


def test_paired_interval_is_students_t():
    ci = paired_ci([0.1, 0.2, 0.3], 0.95)
    # mean 0.2, sd 0.1, t(0.975, df=2) = 4.302652729911275 (published table value)
    assert ci["mean"] == pytest.approx(0.2)
    assert ci["high"] - ci["mean"] == pytest.approx(4.302652729911275 * 0.1 / math.sqrt(3))
    assert verdict(ci) == "within noise"  # [-0.048, 0.448] holds 0
    tight = paired_ci([0.2, 0.25, 0.3], 0.95)
    assert verdict(tight) == "worse" and verdict(tight, "higher") == "better"
    assert verdict(paired_ci([-0.1, 0.1, 0.05], 0.95)) == "within noise"
    one = paired_ci([0.3], 0.95)
    assert one["low"] is None and verdict(one) == "within noise"


def test_overall_bpb_is_total_nll_over_total_bytes():
    slices = {"a": {"bpb": 1.0, "bytes": 100}, "b": {"bpb": 2.0, "bytes": 300}}
    nll_bits = 1.0 * 100 + 2.0 * 300
    assert overall(slices) == pytest.approx(nll_bits / 400)


def test_a_power_law_line_and_its_multiplier():
    line = fit_line([(c, 2.2 * c ** -0.1) for c in (1e10, 1e11, 1e12)])
    assert line["b"] == pytest.approx(-0.1) and math.exp(line["a"]) == pytest.approx(2.2)
    # the reference reaches 2·C^-0.1 at C = 1e12; the baseline needs C* = 1e12·1.1^10 for it
    m = multiplier(line, 2 * 1e12 ** -0.1, 1e12, 1e10, 1e12)
    assert m["value"] == pytest.approx(1.1 ** 10) and m["extrapolated"] is True
    flat = multiplier(fit_line([(1e10, 2.0), (1e11, 2.1)]), 1.5, 1e11, 1e10, 1e11)
    assert flat["value"] is None and "does not fall" in flat["why"]
    assert fit_line([(1e10, 2.0), (1e10, 2.1)]) is None


def test_the_gap_trend_is_the_paired_change_across_sizes():
    holds = trend({"s": [0.10, 0.12, 0.11], "l": [0.11, 0.12, 0.10]}, ["s", "l"], 0.95)
    assert holds["trend"] == "holds"
    grows = trend({"s": [0.10, 0.11, 0.12], "l": [0.20, 0.22, 0.23]}, ["s", "l"], 0.95)
    assert grows["trend"] == "grows" and grows["change"]["mean"] == pytest.approx((0.1 + 0.11 + 0.11) / 3)
    shrinks = trend({"s": [0.20, 0.22, 0.23], "l": [0.10, 0.11, 0.12]}, ["s", "l"], 0.95)
    assert shrinks["trend"] == "shrinks"


def _run(arm, size, seed, bpb, flops, acc=0.5):
    return {"arm": arm, "size": size, "seed": seed, "flops": flops, "tasks": {"mc": acc},
            "slices": {"web": {"bpb": bpb, "bytes": 100}, "books": {"bpb": bpb + 1.0, "bytes": 100}}}


def test_summary_pairs_by_seed_and_ranks_the_steps():
    seeds = [1, 2, 3]
    noise = {1: 0.01, 2: -0.02, 3: 0.015}  # a seed moves every arm alike: the pairs cancel it
    runs = []
    for size, flops, base in (("s", 1e12, 2.0), ("l", 1e13, 1.8)):
        for seed in seeds:
            runs.append(_run("full", size, seed, base + noise[seed], flops))
            runs.append(_run("no-dedup", size, seed, base + 0.05 + noise[seed] + 0.001 * seed, flops))
            runs.append(_run("no-quality", size, seed, base + 0.01 + noise[seed] - 0.001 * seed, flops))
    arms = {"full": {"without": [], "train_tokens": 800}, "no-dedup": {"without": ["minhash_dedup"], "train_tokens": 1000},
            "no-quality": {"without": ["quality"], "train_tokens": 900}}
    out = summarize(runs, arms, [{"name": "s"}, {"name": "l"}], "full", None, 0.95)
    d = out["deltas"]["no-dedup"]["delta"]
    assert d[ALL]["l"]["per_seed"] == pytest.approx([0.051, 0.052, 0.053])
    assert d["web"]["s"]["verdict"] == "worse" and d["task:mc"]["s"]["mean"] == 0
    assert out["deltas"]["no-dedup"]["trend"]["trend"] == "holds"
    assert [r["arm"] for r in out["ranking"]] == ["no-dedup", "no-quality"]
    assert out["ranking"][0]["verdict"] == "helps" and out["ranking"][0]["tokens_removed_share"] == pytest.approx(0.2)
    assert out["means"]["full"]["l"][ALL] == pytest.approx(1.8 + 0.5 + (0.01 - 0.02 + 0.015) / 3)
    assert out["lines"]["full"]["b"] < 0 and out["headline"] is None
    partial = summarize([r for r in runs if r["size"] == "s"], arms, [{"name": "s"}, {"name": "l"}], "full", "no-dedup", 0.95)
    assert list(partial["flops"]) == ["s"] and partial["headline"]["size"] == "s"


def test_the_detectable_difference_is_the_paired_t_power_formula():
    from scipy import stats

    from tokenmill.decisions.ablate_stats import detectable_delta

    # independent: the noncentral t of the paired test reaches 80% power at the stated effect (≈)
    sd, n = 0.02, 3
    mde = detectable_delta(sd, n, 0.95)
    assert mde == pytest.approx((stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2)) * sd / 3 ** 0.5)
    crit = stats.t.ppf(0.975, n - 1)
    power = 1 - stats.nct.cdf(crit, n - 1, mde / (sd / n ** 0.5))
    assert 0.75 < power < 0.9  # the t-quantile approximation of the exact power, as power tables use
    assert detectable_delta(sd, 1, 0.95) is None and detectable_delta(sd, 12, 0.95) < mde / 3


def test_a_difference_inside_the_noise_gets_no_multiplier_and_no_rank():
    seeds = [1, 2, 3]
    noise = {1: 0.03, 2: -0.04, 3: 0.02}
    runs = []
    for size, flops, base in (("s", 1e12, 2.0), ("l", 1e13, 1.8)):
        for seed in seeds:
            runs.append(_run("full", size, seed, base, flops))
            runs.append(_run("no-dedup", size, seed, base + 0.05, flops))  # resolved: the same +0.05 every seed
            runs.append(_run("no-pii", size, seed, base + 0.005 + noise[seed], flops))  # inside its noise
    arms = {"full": {"without": [], "train_tokens": 800}, "no-dedup": {"without": ["minhash_dedup"], "train_tokens": 1000},
            "no-pii": {"without": ["pii"], "train_tokens": 800}}
    out = summarize(runs, arms, [{"name": "s"}, {"name": "l"}], "full", None, 0.95)
    noisy = out["deltas"]["no-pii"]
    assert noisy["delta"][ALL]["l"]["verdict"] == "within noise"
    assert noisy["multiplier"]["value"] is None and noisy["multiplier"]["why"] == "not resolved at this size"
    assert [(r["arm"], r["verdict"]) for r in out["ranking"]] == [("no-dedup", "helps"),
                                                                  ("no-pii", "not resolved at this size")]
    # the design's power: no-pii's spread (no-dedup's is 0) gives the median with 2 arms
    sd = statistics.stdev([0.005 + noise[s] for s in seeds])
    assert out["power"]["l"]["seeds"] == 3 and out["power"]["l"]["paired_sd"] == pytest.approx(sd / 2)
