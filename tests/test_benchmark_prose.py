"""The numbers BENCHMARKS.md's hand-written prose (and the docs/ guides, where they repeat them) state
equal what their results files render to. The generated tables are checked by
test_benchmark_tables.py; this covers the reading around them.

Each claim is a phrase template and the values its placeholders take from one results file under
benchmarks/results/: the rendered phrase must appear in the document (whitespace-insensitive, as
prose wraps), so a results file rerun without its prose, or a number edited by hand, fails here
naming the claim. Negative numbers are written with the typographic minus (−), as the prose does.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PEER, OURS = "nanoGPT bf16 compiled (its default)", "tokenmill bf16 compiled"
METRICS_OFF, HF = "tokenmill bf16 compiled, per-step metrics off (train.metrics_every=0)", "HF Llama bf16 compiled"
H100_RUNS = ("train_cuda_h100.json", "train_cuda_h100_run2.json", "train_cuda_h100_metrics.json",
             "train_cuda_h100_metrics_fixed.json", "train_cuda_h100_651842b.json")


@dataclass(frozen=True)
class Claim:
    """A number the prose states: `phrase` with `{name:spec}` placeholders, filled from `values`
    of the loaded `source` (a results file), must appear in `doc`."""

    name: str
    source: str
    phrase: str
    values: Callable[[Any], dict[str, Any]]
    doc: str = "BENCHMARKS.md"


@cache
def load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def res(d: dict[str, Any]) -> dict[str, Any]:
    """A record.py file holds the script's result under "result"; an older file is the result."""
    return d.get("result", d)


def minus(x: float, spec: str) -> str:
    """`x` formatted by `spec`, with the prose's typographic minus."""
    return format(x, spec).replace("-", "−")


def ms(run: dict[str, Any], arm: str) -> float:
    return run["arms"][arm]["s_per_step"] * 1000


def vs(run: dict[str, Any], arm: str, base: str = PEER) -> float:
    """`arm`'s speed as a multiple of `base`'s (tokens/s ratio = inverse step-time ratio)."""
    return run["arms"][base]["s_per_step"] / run["arms"][arm]["s_per_step"]


def h100(i: int) -> dict[str, Any]:
    return load(H100_RUNS[i - 1])


def train_quality(d: dict[str, Any]) -> dict[str, Any]:
    r = res(d)["results"]
    ours, base = r["default recipe"], r["GPT-2-style baseline"]
    target = 0.9 * base["overall_bpb"]
    return {"ratio": res(d)["ratio_overall"], **{b: ours["bpb"][b] / base["bpb"][b] for b in ours["bpb"]},
            "margin": target - ours["overall_bpb"], "target": target, "base": base["overall_bpb"],
            "gap": base["overall_bpb"] - ours["overall_bpb"], "steps": ours["steps"], "base_steps": base["steps"]}


def semantic_test_half(d: dict[str, Any]) -> dict[str, Any]:
    t = d["threshold"]["test"]
    mean = {k: statistics.fmean(t[c][k]["f1"] for c in t) for k in ("chosen", "default")}
    return {"chosen": mean["chosen"], "default": mean["default"],
            "pp": t["paraphrased"]["chosen"]["precision"], "pd": t["paraphrased"]["default"]["precision"],
            "vp": t["verbatim"]["chosen"]["precision"], "vd": t["verbatim"]["default"]["precision"]}


def fault_gaps(d: dict[str, Any]) -> dict[str, Any]:
    s = res(d)["summary"]
    a, b = s["arms"]["rewind"]["paired_gap_pct"].values(), s["arms"]["rewind_b"]["paired_gap_pct"].values()
    spread = s["clean_spread_pct"].values()
    return {"alo": minus(min(a), "+.2f"), "ahi": minus(max(a), "+.2f"), "blo": minus(min(b), "+.2f"),
            "bhi": minus(max(b), "+.2f"), "slo": min(spread), "shi": max(spread)}


def ablate(d: dict[str, Any]) -> dict[str, Any]:
    return res(d)["ablate"]


def raw_vs_full(d: dict[str, Any]) -> dict[str, Any]:
    per_size = ablate(d)["deltas"]["raw"]["delta"]["all"]
    half = {s: (c["high"] - c["low"]) / 2 for s, c in per_size.items()}
    return {"d64": minus(per_size["d64"]["mean"], ".3f"), "d128": minus(per_size["d128"]["mean"], ".3f"),
            "w64": half["d64"], "w128": half["d128"]}


def ablate_web(d: dict[str, Any]) -> dict[str, Any]:
    deltas = ablate(d)["deltas"]
    return {k: minus(deltas[arm]["delta"]["web"]["d128"]["mean"], ".3f")
            for k, arm in (("raw", "raw"), ("nq", "no-quality"), ("nmq", "no-model-quality"))}


def ablate_slopes(d: dict[str, Any]) -> dict[str, Any]:
    slopes = [line["b"] for line in ablate(d)["lines"].values()]
    return {"steep": minus(min(slopes), ".3f"), "flat": minus(max(slopes), ".3f")}


def tokenize_ratios(d: dict[str, Any]) -> dict[str, Any]:
    return {"demo": res(d)["by_cores"]["2"]["speedup"],
            "copies4": res(load("tokenize_copies4.json"))["by_cores"]["2"]["speedup"],
            "nocheck": res(load("tokenize_no_check.json"))["by_cores"]["2"]["speedup"]}


def first_repeat_2_cores(d: dict[str, Any]) -> dict[str, Any]:
    v = res(d)["by_cores"]["2"]
    return {"parts": v["phases"]["parts_encode_s_sum"], "stage": v["tokenmill_s_all"][0]}


def health(d: dict[str, Any]) -> dict[str, Any]:
    recs = {r["arm"]: r for r in res(d)["records"]}
    warn = recs["poisoned_bucket"]["fired"]["bucket_loss_warning"]["first"]
    return {"step": recs["poisoned_bucket"]["fired"]["bucket_loss_warning"]["first_step"], "ratio": warn["ratio"],
            "code": warn["other_buckets"]["code"], "web": warn["other_buckets"]["web"],
            "sv": recs["frozen_embedding"]["fired"]["embedding_collapse"]["first"]["sv_ratio"],
            "sv_step": recs["frozen_embedding"]["fired"]["embedding_collapse"]["first_step"]}


def nanogpt_quality(d: dict[str, Any]) -> dict[str, Any]:
    q = res(d)["quality"]
    per_seed = [q["report"][str(s)]["tokenmill float32"]["bpb"] / q["report"][str(s)]["nanoGPT"]["bpb"]
                for s in q["report_seeds"]]
    ratio = q["summary"]["ratio tokenmill float32"]
    return {"mean": ratio["mean"], "sd": ratio["sd"], "s1": per_seed[0], "s2": per_seed[1], "s3": per_seed[2]}


def dedup_1m(d: dict[str, Any]) -> dict[str, Any]:
    run = d["runs"][0]
    return {"whole": run["baseline"]["seconds"] / run["tokenmill"]["seconds"],
            "cluster": run["ray_cluster"]["coordinator_peak_mb"],
            "lost": run["ray_cluster_node_lost"]["seconds"], "cluster_s": run["ray_cluster"]["seconds"]}


def datatrove(d: dict[str, Any]) -> dict[str, Any]:
    run = d["runs"][0]
    return {"dt": run["datatrove"]["seconds"], "tm": run["tokenmill"]["seconds"],
            "x": run["datatrove"]["seconds"] / run["tokenmill"]["seconds"],
            "recall": run["datatrove"]["near_recall"], "precision": run["datatrove"]["precision"]}


def time_to_loss(d: dict[str, Any]) -> dict[str, Any]:
    """The LR-6e-4 pair of a bench_time_to_loss.py file: bpb ratio at equal seconds, tokenmill's
    seconds to nanoGPT's final bpb over nanoGPT's (with and without first steps), step medians."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from curves import time_to_reach

    peer, ours = d["tuning"]["nanoGPT"]["0.0006"], d["tuning"]["tokenmill"]["0.0006"]

    def share(drop: bool) -> float:
        t = time_to_reach(ours["curve"], peer["bpb"], ours["first_step_s"] if drop else 0.0)
        assert t is not None
        return t / (peer["seconds"] - (peer["first_step_s"] if drop else 0.0))

    return {"ratio": ours["bpb"] / peer["bpb"], "t": share(False), "tn": share(True),
            "ms_t": ours["s_per_step"] * 1000, "ms_p": peer["s_per_step"] * 1000, "speed": peer["s_per_step"] / ours["s_per_step"]}


def hf_reference_no_stop(d: dict[str, Any]) -> dict[str, Any]:
    """The no-stop rows of eval_hf_reference.json (every answer not empty, so the prose says "all")."""
    r = res(d)
    q, c = (next(t for t in r["tasks"] if t["name"] == f"{name}, no stop") for name in ("quiz-qa", "python-code"))
    assert q["nonempty"] == q["n"] and c["nonempty"] == c["n"] and q["n_differing"] == c["n_differing"] == 0
    return {"qn": q["n"], "qd": q["distinct"], "cn": c["n"], "cd": c["distinct"],
            "qm": r["settings"][q["name"]]["max_new_tokens"], "cm": r["settings"][c["name"]]["max_new_tokens"]}


def eval_tiers_costs(d: dict[str, Any]) -> dict[str, Any]:
    """The paired a/c and b/c medians of eval_tiers.json, as the prose rounds them."""
    import statistics

    r = res(d)

    def paired(arm: str) -> float:
        return statistics.median(x["wall_tokens_per_s"] / c["wall_tokens_per_s"] for x, c in zip(r["runs"][arm], r["runs"]["c"]))

    a, b = paired("a"), paired("b")
    assert b - a < max(paired_range(r, "a")) - min(paired_range(r, "a"))  # "smaller than arm a's own spread"
    return {"ac": 1 - a, "a": a, "bc": 1 - b, "b": b}


def eval_tiers_heavy(d: dict[str, Any]) -> dict[str, Any]:
    """eval_tiers_heavy.json: the paired medians and ranges, and the per-repetition b/a speed-ups."""
    import statistics

    r = res(d)
    a, b = paired_range(r, "a"), paired_range(r, "b")
    gain = [x["wall_tokens_per_s"] / y["wall_tokens_per_s"] for x, y in zip(r["runs"]["b"], r["runs"]["a"])]
    assert min(gain) - 1 > max(max(a) - min(a), max(b) - min(b))  # "far outside either arm's spread"
    return {"ac": 1 - statistics.median(a), "a": statistics.median(a), "alo": min(a), "ahi": max(a),
            "bc": 1 - statistics.median(b), "b": statistics.median(b), "blo": min(b), "bhi": max(b),
            "glo": min(gain), "ghi": max(gain)}


def paired_range(r: dict[str, Any], arm: str) -> list[float]:
    return [x["wall_tokens_per_s"] / c["wall_tokens_per_s"] for x, c in zip(r["runs"][arm], r["runs"]["c"])]


def sandbox_cost(d: dict[str, Any]) -> dict[str, Any]:
    """bench_sandbox.py's medians for the code item: namespaces against the earlier audit-hook sandbox."""
    med = {row["isolation"]: row["median_ms"] for row in d["result"]["rows"] if row["program"] != "trivial"}
    return {"ns": med["namespaces"], "before": med["before"], "diff": med["namespaces"] - med["before"],
            "ratio": med["namespaces"] / med["before"]}


def hostile_baseline(d: dict[str, Any]) -> dict[str, Any]:
    """The baseline's tracebacks over every case and its largest trace / BIG-bench peaks and rendezvous time."""
    base = {r["case"]: r for r in d["result"]["records"] if r["source"] == "baseline"}
    return {"tb": sum(r["traceback"] for r in base.values()),
            "trace": max(base["trace_long_line"]["rss_by_size_mb"].values()) / 1000,
            "bb": max(base["bigbench_huge_task"]["rss_by_size_mb"].values()) / 1000,
            "rdzv": int(base["rdzv_unresolvable"]["seconds"] // 10 * 10)}


def _demo(d: dict[str, Any]) -> dict[str, Any]:
    """bench_demo's wall-clock as the table renders it, and its worst bucket ratio."""
    wall = d["result"]["wall_s"]
    return {"m": f"{wall // 60:.0f}", "s": f"{wall % 60:.0f}", "wall": wall, "worst": d["result"]["worst_ratio"]}


def _demo_both(_: dict[str, Any]) -> dict[str, Any]:
    worst = max(load(f)["result"]["worst_ratio"] for f in ("demo_wallclock_xeon_bf16.json", "demo_wallclock_emulated_avx2_fp32.json"))
    return {"worst": worst}


CLAIMS = (
    # issue 55's documentation-kept baseline
    Claim("docs kept: rows", "docs_kept_baseline.json", "the evaluation rows: {n} language folders",
          lambda d: {"n": len(d["result"]["rows"])}),
    Claim("docs kept: load and commit", "docs_kept_baseline.json", "(commit {c}, clean tree; other processes used {load:.0%} of the cores",
          lambda d: {"c": d["commit"][:7], "load": d["load"]["others_cpu_share"]["mean"]}),
    # issue 55's PII names, scored once on the frozen collections
    Claim("pii: old default in Austen and Shakespeare", "pii_private_before.json", "old default replaced {a:,} and {s:,}",
          lambda d: {"a": d["result"]["buckets"]["fiction"]["books/austen"]["names"],
                     "s": d["result"]["buckets"]["fiction"]["books/shakespeare"]["names"]}),
    Claim("pii: documentation check", "pii_private.json", "{v} names per 100k words with no contact details on their line",
          lambda d: {"v": next(c["value"] for c in d["result"]["verdict"]["checks"] if c["check"].startswith("documentation"))}),
    Claim("pii: mail recall", "pii_private.json", "contact recall is {r:.3f} of {n} display names",
          lambda d: {"r": d["result"]["buckets"]["mail_changelogs"]["pii/email-messages"]["contact_recall"],
                     "n": d["result"]["buckets"]["mail_changelogs"]["pii/email-messages"]["gold"]}),
    Claim("pii: kernel process names", "pii_private.json", "Of the {n:,} names replaced in the kernel's process documents",
          lambda d: {"n": d["result"]["buckets"]["documentation"]["web_html/linux-doc/process"]["names"]}),
    Claim("pii: fiction zero", "pii_private.json", "No names are replaced in Austen or Shakespeare{unless}",
          lambda d: {"unless": "" if d["result"]["buckets"]["fiction"]["books/austen"]["names"] == 0
                     and d["result"]["buckets"]["fiction"]["books/shakespeare"]["names"] == 0 else " (they are)"}),
    # issue 54's demo: this Xeon in bf16, and in fp32 on AVX2-capped kernels; README repeats them
    Claim("plan on a CPU: real / predicted", "plan_time.json", "(real / predicted {a:.2f} and {b:.2f})",
          lambda d: {"a": d["result"]["sizes"][0]["ratio_real_over_predicted"],
                     "b": d["result"]["sizes"][1]["ratio_real_over_predicted"]}),
    Claim("first hour: real / predicted", "first_hour.json", "(real / predicted {r:.2f}; the real time",
          lambda d: {"r": d["result"]["ratio_real_over_predicted"]}),
    Claim("demo 54: bf16 wall-clock and worst ratio", "demo_wallclock_xeon_bf16.json",
          "in bf16 (worst {worst:.3f}×)", _demo),
    Claim("demo 54: fp32 worst ratio", "demo_wallclock_emulated_avx2_fp32.json", "in fp32 (worst {worst:.3f}×)", _demo),
    Claim("demo 54: bf16 minutes", "demo_wallclock_xeon_bf16.json", "This machine has bf16 ({m} min {s} s)", _demo),
    Claim("demo 54: emulated minutes", "demo_wallclock_emulated_avx2_fp32.json", "speed ({m} min {s} s here)", _demo),
    Claim("demo 54: README bf16 seconds", "demo_wallclock_xeon_bf16.json", "2 CPU cores: {wall:.0f} s on an Intel Xeon",
          _demo, doc="README.md"),
    Claim("demo 54: README fp32 seconds", "demo_wallclock_emulated_avx2_fp32.json", "{wall:.0f} s there with fp32",
          _demo, doc="README.md"),
    Claim("demo 54: README worst ratio", "demo_wallclock_xeon_bf16.json", "at most {worst:.3f}× its unigram baseline in both",
          _demo_both, doc="README.md"),
    # make demo under 5 minutes: the two CPUs' wall-clocks, as the tables render them
    Claim("demo: wall-clock with and without native bf16", "demo_wallclock_bf16.json",
          "met where the CPU has native bf16 ({m} min {s} s)",
          lambda d: {"m": int(round(d["seconds"]) // 60), "s": int(round(d["seconds"]) % 60)}),
    Claim("demo: wall-clock on the AVX2-only CPU", "demo_wallclock.json",
          "not met on the AVX2-only CPU ({m} min {s} s)",
          lambda d: {"m": int(round(d["seconds"]) // 60), "s": int(round(d["seconds"]) % 60)}),
    # Time to loss on an H200: the reading's figures, seed 0 (chose the LRs) and seed 1
    Claim("time to loss: seed 0", "time_to_loss_h200.json",
          "at equal seconds is {ratio:.3f}× nanoGPT's", time_to_loss),
    Claim("time to loss: seed 1", "time_to_loss_h200_seed1.json", "and {ratio:.3f}× on seed 1", time_to_loss),
    Claim("time to loss: seconds to nanoGPT's final bpb", "time_to_loss_h200.json",
          "reaches nanoGPT's final bpb in {t:.2f}× of nanoGPT's seconds on seed 0", time_to_loss),
    Claim("time to loss: seconds without first steps", "time_to_loss_h200_seed1.json",
          "and {t:.2f}× on seed 1 (", time_to_loss),
    Claim("time to loss: step medians", "time_to_loss_h200.json",
          "{ms_t:.1f} against {ms_p:.1f} ms median ({speed:.2f}× nanoGPT's tokens/s", time_to_loss),
    # Quality per compute: one seed, a margin inside the seed spread
    Claim("quality per compute: ratios", "train_quality.json",
          "≤ 0.9: not established — {ratio:.3f} overall** (code {code:.3f}, reference {reference:.3f}, web {web:.3f})",
          train_quality),
    Claim("quality per compute: margin under the target", "train_quality.json",
          "{margin:.3f} bpb under the target's {target:.3f} (0.9 × the baseline's {base:.3f})", train_quality),
    Claim("quality per compute: the gap", "train_quality.json", "the {gap:.3f} bpb gap is far outside", train_quality),
    Claim("quality per compute: steps", "train_quality.json",
          "the default recipe took {steps} steps to the baseline's {base_steps}", train_quality),
    Claim("nanoGPT: held-out bpb ratio over three seeds", "vs_nanogpt_demo.json",
          "not met — {mean:.3f} ± {sd:.3f} over three seeds** ({s1:.3f}, {s2:.3f}, {s3:.3f})", nanogpt_quality),
    Claim("nanoGPT 25M: fp32 speed ratios", "vs_nanogpt_25m.json",
          "fp32 against fp32 at this size tokenmill is {lo:.2f}–{hi:.2f}× nanoGPT's tokens/s",
          lambda d: {"lo": res(d)["rows"][2]["speedup_vs_nanogpt"], "hi": res(d)["rows"][1]["speedup_vs_nanogpt"]}),
    # Dedup at scale
    Claim("dedup: datatrove vs tokenmill seconds", "dedup_datatrove_1m.json",
          "**{dt:,.0f} s against tokenmill's {tm:.0f} s, {x:.1f}×**", datatrove),
    Claim("dedup: datatrove recall/precision", "dedup_datatrove_1m.json",
          "datatrove recall {recall:.3f} and precision {precision:.3f} at J ≥ 0.8", datatrove),
    Claim("docs/curation.md: datatrove seconds and recall", "dedup_datatrove_1m.json",
          "took {dt:,.0f} s where tokenmill's exact, MinHash and line dedup took {tm:.0f} s, and, removing LSH "
          "candidates unverified, reached recall / precision {recall:.3f} / {precision:.3f}", datatrove, "docs/curation.md"),
    Claim("dedup: whole 1M run new/previous", "dedup_scale.json", "the whole run {whole:.2f}× faster", dedup_1m),
    Claim("dedup: node loss seconds", "dedup_scale.json",
          "Ray's health checks: {lost:.0f} s instead of {cluster_s:.0f} s)", dedup_1m),
    Claim("docs/curation.md: cluster coordinator at 1M", "dedup_scale.json",
          "on a two-node Ray cluster (both nodes on one machine) {cluster:.0f} MB", dedup_1m, "docs/curation.md"),
    # Semantic contamination
    Claim("semantic: test-half mean F1 at the chosen and the old threshold", "semantic_contamination.json",
          "(mean F1 {chosen:.3f} vs {default:.3f} at 0.75), bought with precision (paraphrases {pp:.3f} vs {pd:.3f}, "
          "verbatim {vp:.3f} vs {vd:.3f})", semantic_test_half),
    Claim("semantic: tuning-half mean F1", "semantic_contamination.json",
          "**0.70** (mean F1 {a:.3f}, against {b:.3f} at 0.75 and {c:.3f} at 0.80)",
          lambda d: dict(zip("abc", (d["threshold"]["tune_mean_f1"][t] for t in ("0.7", "0.75", "0.8"))))),
    Claim("semantic: AUC over every item", "semantic_contamination.json",
          "{p:.3f} paraphrased, {v:.3f} verbatim",
          lambda d: {"p": d["paraphrased"]["auc"], "v": d["verbatim_control"]["auc"]}),
    Claim("semantic: 13-gram rule finds", "semantic_contamination.json",
          "it found {tp} of {n} planted paraphrases",
          lambda d: {"tp": d["paraphrased"]["ngram13"]["tp"], "n": d["paraphrased"]["planted"]}),
    # CUDA
    Claim("H100: metrics fix measured by run 4", "train_cuda_h100_metrics_fixed.json",
          "the metrics now cost {cost:.1%} of a step ({on:.1f} vs {off:.1f} ms; {before:.1%} in run 3), tokenmill "
          "compiled {r:.2f}× nanoGPT compiled with them and {r_off:.2f}× without; run 5, at a later commit, "
          "{r5:.2f}× and {r5_off:.2f}×",
          lambda d: {"cost": ms(d, OURS) / ms(d, METRICS_OFF) - 1, "on": ms(d, OURS), "off": ms(d, METRICS_OFF),
                     "before": ms(h100(3), OURS) / ms(h100(3), METRICS_OFF) - 1, "r": vs(d, OURS),
                     "r_off": vs(d, METRICS_OFF), "r5": vs(h100(5), OURS), "r5_off": vs(h100(5), METRICS_OFF)}),
    Claim("H100: HF Llama compiled ratio range", "train_cuda_h100_651842b.json",
          "1.35× in run 5: {lo:.2f}–{hi:.2f}× over the H100 runs",
          lambda d: {"lo": min(vs(h100(i), OURS, HF) for i in (1, 2, 5)),
                     "hi": max(vs(h100(i), OURS, HF) for i in (1, 2, 5))}),
    Claim("train speed: H100 HF range", "train_cuda_h100_651842b.json",
          "{lo:.2f}–{hi:.2f}× HF Llama compiled (runs 1, 2 and 5)",
          lambda d: {"lo": min(vs(h100(i), OURS, HF) for i in (1, 2, 5)),
                     "hi": max(vs(h100(i), OURS, HF) for i in (1, 2, 5))}),
    Claim("nanoGPT entry: H100 compiled range", "train_cuda_h100_651842b.json",
          "0.89× nanoGPT on an H200 and {lo:.2f}–{hi:.2f}× on an H100 ({r4:.2f}× and {r5:.2f}× after the metrics fix",
          lambda d: {"lo": min(vs(h100(i), OURS) for i in range(1, 6)), "hi": max(vs(h100(i), OURS) for i in range(1, 6)),
                     "r4": vs(h100(4), OURS), "r5": vs(d, OURS)}),
    Claim("H200 run 3: compiled vs nanoGPT and HF", "train_cuda_h200_run3.json",
          "compiled {hf:.2f}× ({ours:.1f} vs {hf_ms:.1f} ms)",
          lambda d: {"hf": vs(d, OURS, HF), "ours": ms(d, OURS), "hf_ms": ms(d, HF)}),
    Claim("docs/training.md: metrics cost before and after the fix", "train_cuda_h100_metrics_fixed.json",
          "they were {before:.1%} of a compiled step before their launches were batched, {after:.1%} after",
          lambda d: {"before": ms(h100(3), OURS) / ms(h100(3), METRICS_OFF) - 1,
                     "after": ms(d, OURS) / ms(d, METRICS_OFF) - 1}, "docs/training.md"),
    # Fault recovery, tokenize, health detectors
    Claim("fault recovery: rewind bucket gaps", "fault_recovery.json",
          "bucket gaps from {alo}% to {ahi}% on placement A (2 seeds) and from {blo}% to {bhi}% on placement B",
          fault_gaps),
    Claim("fault recovery: clean seed spread", "fault_recovery.json",
          "clean runs' own seed-to-seed spread ({slo:.2f}–{shi:.2f}%)", fault_gaps),
    Claim("tokenize: ratios on 2 cores", "tokenize.json",
          "met on the 4× corpus ({copies4:.2f}×) and without the held-out check ({nocheck:.2f}×); not on the demo "
          "corpus as the stage runs by default ({demo:.2f}×)", tokenize_ratios),
    Claim("tokenize: encoding with the overlap tried", "tokenize_overlap_tried.json",
          "the parts' encoding summed to {parts:.2f} s across threads in a {stage:.2f} s stage", first_repeat_2_cores),
    Claim("tokenize: encoding without the overlap", "tokenize.json",
          "{parts:.2f} s of part encoding after the check in a {stage:.2f} s stage", first_repeat_2_cores),
    Claim("health: poisoned bucket warning", "health_detectors.json",
          "at step {step} (the third poisoned batch): reference at {ratio:.2f}× its median while code and web stayed "
          "at {code:.2f}× and {web:.2f}×", health),
    Claim("health: embedding collapse", "health_detectors.json",
          "`embedding_collapse`** at step {sv_step} (sv1/sv2 = {sv:.1f})", health),
    # Curation ablation
    Claim("ablate: raw − full over all slices", "ablate.json",
          "{d64} at d64, {d128} at d128 bits per byte over all slices, intervals ±{w64:.2f} and ±{w128:.2f}",
          raw_vs_full),
    Claim("ablate: web slice at d128", "ablate.json",
          "raw {raw}, no-quality {nq}, no-model-quality {nmq} on web at d128", ablate_web),
    Claim("ablate: bpb-vs-compute slopes", "ablate.json", "(slopes {flat} to {steep};", ablate_slopes),
    Claim("eval tiers: the cost of in-training evaluation with and without tiers", "eval_tiers.json",
          "{ac:.1%} of its wall throughput (arm a against c, paired within each repetition: {a:.3f}×), with tiers\n  "
          "{bc:.1%} ({b:.3f}×)", eval_tiers_costs),
    Claim("eval tiers, heavy expensive tier: the cost with and without tiers", "eval_tiers_heavy.json",
          "costs {ac:.1%} of the trainer's wall throughput\n  ({a:.3f}×, range {alo:.3f}–{ahi:.3f}), with tiers {bc:.1%} "
          "({b:.3f}×, {blo:.3f}–{bhi:.3f}); paired within each\n  repetition the trainer runs {glo:.2f}–{ghi:.2f}× faster",
          eval_tiers_heavy),
    Claim("sandbox: the kernel boundary's cost per candidate over the audit hook", "sandbox.json",
          "costs {diff:.1f} ms a candidate over the audit-hook sandbox it replaces: the code item takes "
          "{ns:.1f} ms against {before:.1f} ms before ({ratio:.2f}×)", sandbox_cost),
    Claim("docs/evaluation.md: the sandbox's cost per candidate", "sandbox.json",
          "{ns:.1f} ms under `namespaces` against {before:.1f} ms", sandbox_cost, "docs/evaluation.md"),
    Claim("hostile inputs: what the baseline did with the new cases", "hostile_inputs.json",
          "ended in a traceback in {tb} cases, held {trace:.1f} GB for a 16 MB `trace --file` line and {bb:.1f} GB for a "
          "2 GB task file, and retried an unresolvable rendezvous host for over {rdzv} s", hostile_baseline),
    Claim("hf reference: answers compared without stop strings", "eval_hf_reference.json",
          "all {qn} quiz answers ({qd} distinct) and all {cn} code answers ({cd} distinct) are text the model wrote, "
          "up to {qm} and {cm} tokens", hf_reference_no_stop),
)


@cache
def text(doc: str) -> str:
    return " ".join((ROOT / doc).read_text().split())


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.name)
def test_the_prose_states_what_its_results_file_says(claim: Claim):
    phrase = " ".join(claim.phrase.format(**claim.values(load(claim.source))).split())
    doc = text(claim.doc)
    if phrase in doc:
        return
    # name the claim and show where the prose says something close, so the fix is one look away
    head = phrase[:24]
    near = [doc[max(0, m.start() - 40):m.start() + len(phrase) + 40] for m in re.finditer(re.escape(head), doc)]
    pytest.fail(f"claim {claim.name!r}: {claim.doc} should say {phrase!r} (from benchmarks/results/{claim.source}); "
                + (f"it says {near[0]!r}" if near else "no sentence starts like it"))


def test_a_number_changed_in_a_results_file_fails_its_claim():
    claim = next(c for c in CLAIMS if c.name == "dedup: datatrove vs tokenmill seconds")
    changed = json.loads(json.dumps(load(claim.source)))
    changed["runs"][0]["datatrove"]["seconds"] *= 1.05
    phrase = claim.phrase.format(**claim.values(changed))
    assert phrase not in text(claim.doc)


def test_there_are_enough_claims_and_each_names_a_results_file():
    assert len(CLAIMS) >= 20 and len({c.name for c in CLAIMS}) == len(CLAIMS)
    assert all((RESULTS / c.source).is_file() for c in CLAIMS)


def test_the_gate_cost_readings_hold_for_their_results() -> None:
    """BENCHMARKS "What each curation gate costs": the reading's orderings and its quiet-machine
    statement, checked against gate_costs.json (they are words, not numbers the claims can fill)."""
    d = load("gate_costs.json")
    cost = {name: g["us_per_doc"] for name, g in d["gates"].items()}
    ranked = sorted(cost, key=cost.__getitem__, reverse=True)
    assert ranked[:2] == ["pii: default", "classify"]  # "PII ... is the dearest gate ...; the classify gate comes next"
    assert cost["license"] < 0.01 * min(v for k, v in cost.items() if k != "license")  # "costs nothing next to ..."
    assert cost["pii: default"] > 2 * cost["pii: six patterns"]  # "names and addresses are most of the PII step's cost"
    assert d["load"]["others_cpu_share"]["mean"] < 0.01  # "other processes used under 1% of the two cores"
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert "Other processes used under 1% of the two\ncores while it ran" in text
