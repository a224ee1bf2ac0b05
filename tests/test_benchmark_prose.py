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
from collections import Counter
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


# --- helpers for issue 41-era entries (dirty web, kinds, gate, toxicity, PII, classify, hostile inputs,
# parallel memory, time to loss) ---

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def word(n: int) -> str:
    """A small count as the prose spells it."""
    return NUMBER_WORDS[n]


def sci(x: float) -> str:
    """An LR as the prose writes it: 6e-4, 1.5e-3, 3.75e-3."""
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def tox(d: dict[str, Any], config: str) -> dict[str, Any]:
    """One configuration of toxicity_layers.json: clean removed and offensive caught by each pass."""
    t = d["configs"][config]["total"]
    return {"fp1": t["first_pass"]["false_positives"], "fp2": t["both_passes"]["false_positives"],
            "tp1": t["first_pass"]["true_positives"], "tp2": t["both_passes"]["true_positives"], "toxic": t["toxic"]}


def tox_costs(d: dict[str, Any]) -> dict[str, Any]:
    """The reading's cost ranges: the classifier's share and amortised cost over the default band, per list,
    the list's own cost over every configuration, and the classifier's cost per scored document (to tens)."""
    cfg = d["configs"]
    band = {lst: [c for k, c in cfg.items() if k.startswith(f"{lst}_default")] for lst in ("builtin", "broad")}
    amort = {lst: [c["cost"]["classifier_us_per_doc_amortised"] for c in cs] for lst, cs in band.items()}
    first = [c["cost"]["first_pass_us_per_doc"] for c in cfg.values()]
    scored = [c["cost"]["classifier_us_per_scored_doc"] for c in cfg.values()]
    return {"share_in": band["builtin"][0]["cost"]["share_to_classifier"], "share_br": band["broad"][0]["cost"]["share_to_classifier"],
            "a_in_lo": min(amort["builtin"]), "a_in_hi": max(amort["builtin"]), "a_br_lo": min(amort["broad"]),
            "a_br_hi": max(amort["broad"]), "l_lo": min(first), "l_hi": max(first),
            "s_lo": round(min(scored), -1), "s_hi": round(max(scored), -1),
            "chars": round(cfg["builtin_default_p0.5"]["cost"]["mean_chars"], -1)}


def agreed(a: Any, b: Any) -> Any:
    """One figure the prose states for two results files: the value where they agree, else both (so the claim fails)."""
    return a if a == b else f"{a} / {b}"


def tox_broad_default(d: dict[str, Any]) -> dict[str, Any]:
    """The broad list at the default P > 0.5: what its second pass keeps and loses against the list alone."""
    t = tox(d, "broad_default_p0.5")
    return {**t, "kept": t["fp1"] - t["fp2"], "lost": word(t["tp1"] - t["tp2"])}


def pii_false_names(d: dict[str, Any]) -> dict[str, Any]:
    """How many false names the dictionary texts hold, and the two place names the prose quotes."""
    held = pii_heldout(d)
    names = [re.search(r"name '(.+)'", e)[1] for e in held["false_span_examples"]]
    return {"n": word(held["false_spans_where_labels_complete"]["name|bucket=dictionary"]["false"]),
            "a": next(n for n in names if n.startswith("Sri")), "b": next(n for n in names if n.startswith("Rio"))}


def pii_heldout(d: dict[str, Any]) -> dict[str, Any]:
    """pii_names.json's held-out set (the one with false spans where the labels are complete)."""
    return res(d)["heldout"]


def hostile(d: dict[str, Any], source: str = "tokenmill") -> dict[str, dict[str, Any]]:
    """A hostile_inputs*.json file's records of one side, by case."""
    return {r["case"]: r for r in d["result"]["records"] if r["source"] == source}


def hostile_growth(d: dict[str, Any]) -> int:
    """How many times the growth cases' hostile input grows between their two sizes (one figure for all)."""
    growth = {max(map(float, r["rss_by_size_mb"])) / min(map(float, r["rss_by_size_mb"]))
              for f in ("hostile_inputs.json", "hostile_inputs_labelled.json") for r in load(f)["result"]["records"]
              if r.get("rss_by_size_mb")}
    assert len(growth) == 1
    return int(growth.pop())


def mib(row: dict[str, Any]) -> float:
    return row["measured_peak"] / 2**20


def pm_rows(d: dict[str, Any], dtype: str, layout: str) -> list[dict[str, Any]]:
    rows = [r for r in res(d)["rows"] if r["dtype"] == dtype and r["layout"] == layout]
    assert rows, (dtype, layout)
    return rows


def pm_ratio(d: dict[str, Any], layout: str) -> tuple[float, float]:
    """estimate / measured over a layout's ranks, both dtypes."""
    ratios = [r["estimate_over_measured"] for r in res(d)["rows"] if r["layout"] == layout]
    return min(ratios), max(ratios)


def pm_busiest(d: dict[str, Any], layout: str, stage: int | None = None) -> float:
    """The busiest bf16 rank's measured peak (of one pipeline stage, if named) over one process's."""
    rows = [r for r in pm_rows(d, "bfloat16", layout) if stage is None or r["stage"] == stage]
    return max(map(mib, rows)) / mib(pm_rows(d, "bfloat16", "one process")[0])


def parallel_memory(d: dict[str, Any]) -> dict[str, Any]:
    worst = max(res(d)["rows"], key=lambda r: 1 / r["estimate_over_measured"])
    job = pm_rows(d, worst["dtype"], worst["layout"])
    others = [mib(r) for r in job if r is not worst]
    sp = [r["estimate_over_measured"] for r in res(d)["rows"] if "SP" in r["layout"] and "no SP" not in r["layout"]]
    sp_layouts = {r["layout"] for r in res(d)["rows"] if "SP" in r["layout"] and "no SP" not in r["layout"]}
    spread = max(max(map(mib, pm_rows(d, t, lay))) - min(map(mib, pm_rows(d, t, lay)))
                 for t in ("bfloat16", "float32") for lay in sp_layouts)
    return {"n": len(res(d)["rows"]), "layouts": len({r["layout"] for r in res(d)["rows"]}), "dtypes": len({r["dtype"] for r in res(d)["rows"]}),
            "worst": 1 / worst["estimate_over_measured"], "w_rank": worst["rank"], "w_mib": mib(worst),
            "w_dtype": {"bfloat16": "bf16", "float32": "fp32"}[worst["dtype"]],
            "w_est": worst["estimate"]["peak"] / 2**20, "o_lo": min(others), "o_hi": max(others),
            "z1": pm_ratio(d, "dp=2, ZeRO-1 (DDP + owned optimizer state)"), "z2": pm_ratio(d, "dp=2, ZeRO-2 (FSDP2, no reshard)"),
            "z3": pm_ratio(d, "dp=2 × pp=2, ZeRO-3 inside the stages"), "cp": pm_ratio(d, "cp=2"),
            "sp": pm_ratio(d, "tp=2 + SP"), "nosp": pm_ratio(d, "tp=2, no SP"),
            "lean_lo": 1 - max(sp), "lean_hi": 1 - min(sp), "spread": spread,
            "load": d["load"]["others_cpu_share"]["mean"], "p95": d["load"]["others_cpu_share"]["p95"]}


def parallel_savings(d: dict[str, Any]) -> dict[str, Any]:
    return {"one": mib(pm_rows(d, "bfloat16", "one process")[0]), "sp": pm_busiest(d, "tp=2 + SP"),
            "nosp": pm_busiest(d, "tp=2, no SP"), "f2": pm_busiest(d, "pp=2, 1F1B, m=2", 0),
            "f4": pm_busiest(d, "pp=2, 1F1B, m=4", 0), "gp": pm_busiest(d, "pp=2, GPipe, m=4"),
            "cp": pm_busiest(d, "cp=2"), "dptp": pm_busiest(d, "dp=2 × tp=2 (FSDP2 + TP + SP)"),
            "tppp": pm_busiest(d, "tp=2 × pp=2"), "z1": pm_busiest(d, "dp=2, ZeRO-1 (DDP + owned optimizer state)"),
            "z2": pm_busiest(d, "dp=2, ZeRO-2 (FSDP2, no reshard)"), "rep": pm_busiest(d, "dp=2 × pp=2 (replicated stages)"),
            "z3": pm_busiest(d, "dp=2 × pp=2, ZeRO-3 inside the stages")}


TTL_FILES = ("time_to_loss_h200.json", "time_to_loss_h200_seed1.json")


def ttl_runs(side: str) -> list[dict[str, Any]]:
    """Every tuning run of one side over both time-to-loss files."""
    return [r for f in TTL_FILES for r in load(f)["tuning"][side].values()]


def ttl_reading(_: dict[str, Any]) -> dict[str, Any]:
    """The time-to-loss reading's gaps, seed spreads, token counts, first steps and stalls."""
    s0, s1 = (load(f)["tuning"] for f in TTL_FILES)
    bpb = {side: [t[side]["0.0006"]["bpb"] for t in (s0, s1)] for side in ("nanoGPT", "tokenmill")}
    gaps = [n - t for n, t in zip(bpb["nanoGPT"], bpb["tokenmill"])]
    spread_t, spread_n = abs(bpb["tokenmill"][0] - bpb["tokenmill"][1]), abs(bpb["nanoGPT"][0] - bpb["nanoGPT"][1])
    times = [word(n) for n in sorted({round(g / spread_t) for g in gaps})]
    shape = load(TTL_FILES[0])["shape"]
    per_step = shape["batch"] * shape["seq_len"] / 1e6
    peer, ours = ttl_runs("nanoGPT"), ttl_runs("tokenmill")
    stall = [r["seconds"] - r["steps"] * r["s_per_step"] for r in ours]
    return {"g0": gaps[0], "g1": gaps[1], "st": spread_t, "sn": spread_n, "times": " to ".join(times),
            "peer_s": s0["nanoGPT"]["0.0006"]["seconds"], "peer_tok": s0["nanoGPT"]["0.0006"]["steps"] * per_step,
            "tok_lo": min(r["steps"] for r in s0["tokenmill"].values()) * per_step,
            "tok_hi": max(r["steps"] for r in s0["tokenmill"].values()) * per_step,
            "f_lo": min(r["first_step_s"] for r in ours), "f_hi": max(r["first_step_s"] for r in ours),
            "pf_lo": min(r["first_step_s"] for r in peer), "pf_hi": max(r["first_step_s"] for r in peer),
            "pf_share": statistics.fmean(r["first_step_s"] / r["seconds"] for r in peer),
            "steps_lo": min(r["steps"] for r in ours), "steps_hi": max(r["steps"] for r in ours),
            "ms_lo": min(r["s_per_step"] for r in ours) * 1000, "ms_hi": max(r["s_per_step"] for r in ours) * 1000,
            "stall_lo": min(stall), "stall_hi": max(stall)}


def ttl_setup(d: dict[str, Any]) -> dict[str, Any]:
    shape, grid = d["shape"], d["grids"]
    assert grid["nanoGPT"] == grid["tokenmill"]
    return {**shape, "peer": d["nanogpt"]["commit"][:7], "train": d["peer_data_tokens"]["train"] / 1e6,
            "val": d["peer_data_tokens"]["val"] / 1e6, "docs": d["eval_docs"], "seconds": d["seconds"],
            "g0": sci(grid["nanoGPT"][0]), "g1": sci(grid["nanoGPT"][1]), "g2": sci(grid["nanoGPT"][2]),
            "best_n": sci(d["summary_tune_seed"]["best_lr"]["nanoGPT"]), "best_t": sci(d["summary_tune_seed"]["best_lr"]["tokenmill"])}


def command_args(d: dict[str, Any]) -> str:
    """A bench_time_to_loss.py command up to its --json (the output path differs between machines)."""
    return d["command"].split(" --json")[0]


def dirty_web(d: dict[str, Any]) -> dict[str, Any]:
    r = res(d)
    return {**r, "kept_t": r["verdicts"]["tokenmill"]["clean_kept"], "kept_d": r["verdicts"]["datatrove"]["clean_kept"],
            "moji": r["mojibake"]["share"], "met_d": len(r["verdicts"]["datatrove"]["junk_kinds_met"]),
            "junk": sum(1 for k in r["kinds"].values() if not k["clean"])}


def dwm(d: dict[str, Any]) -> dict[str, Any]:
    """dirty_web_model.json: the recovered shares, the default − datatrove gaps, the datatrove arm and the power."""
    r = res(d)
    gap, corpus, arm, power = r["gap"], r["corpus"], r["ablate"]["arms"]["datatrove"], r["ablate"]["power"]
    rec = {size: gap[size]["recovered"]["default"] for size in ("small", "large")}
    salad_kept = round(res(load("dirty_web.json"))["kinds"]["shuffled_words"]["n"]
                       * (1 - res(load("dirty_web.json"))["kinds"]["shuffled_words"]["datatrove_removed"]))
    return {"rs": rec["small"]["mean"], "rl": rec["large"]["mean"], "ls": rec["small"]["low"], "ll": rec["large"]["low"],
            "ds": minus(gap["small"]["default_minus_datatrove"]["mean"], ".3f"),
            "dl": minus(gap["large"]["default_minus_datatrove"]["mean"], ".3f"),
            "kept": corpus["datatrove_junk_kept"], "junk": corpus["docs"] - corpus["oracle_docs"], "salad": salad_kept,
            "ktok": arm["train_tokens"] / 1000, "epochs": arm["epochs"]["large"],
            "ps": power["small"]["detectable_bpb"], "pl": power["large"]["detectable_bpb"],
            "pw": power["small"]["power"], "held": corpus["heldout_docs"], "mb": corpus["heldout_bytes"] / 1e6,
            "junk_share": (corpus["docs"] - corpus["oracle_docs"]) / corpus["docs"]}


def dwm_setup(d: dict[str, Any]) -> dict[str, Any]:
    r = res(d)
    train, sizes = r["configs"]["base"]["train"], {s["name"]: s for s in r["configs"]["ablate"]["sizes"]}
    return {"vocab": r["configs"]["base"]["tokenizer"]["vocab_size"], "threads": train["threads"], "lr": train["lr"],
            "batch": train["global_batch_tokens"], "dtype": {"float32": "fp32"}[train["dtype"]],
            "s": f"d{sizes['small']['d_model']}×{sizes['small']['n_layers']}",
            "l": f"d{sizes['large']['d_model']}×{sizes['large']['n_layers']}"}


def ablate_token_shares(d: dict[str, Any]) -> dict[str, Any]:
    """ablate.json: how much each arm's training tokens differ from the full pipeline's."""
    arms = ablate(d)["arms"]
    full = arms["full"]["train_tokens"]
    diff = [abs(a["train_tokens"] - full) / full for name, a in arms.items() if name != "full"]
    return {"lo": min(diff), "hi": max(diff)}


def _removed(group: dict, rule: str) -> int:
    """Documents one rule removed from a group of bench_quality_signal.py's result."""
    return next((x["docs"] for x in group["removed_by"] if x["rule"] == rule), 0)


def _peer_reason(d: dict, reason: str) -> int:
    """Documents one datatrove step removed over a whole bench_peer_datatrove.py run."""
    return next((x["docs"] for x in d["result"]["removed_by"] if x["reason"] == reason), 0)


def _docs_rule(d: dict, rule: str) -> int:
    """Pages one rule removed over every row of bench_docs_kept.py's run without a reference."""
    rows = d["result"]["variants"]["a_no_reference"].values()
    return sum(x["pages"] for v in rows for x in v["top_rejections"] if x["rule"] == rule)


def kind_fresh_man_range(d: dict[str, Any]) -> dict[str, Any]:
    """The lowest and highest share of a man-page language detected as reference."""
    man = [v for row, v in res(d)["rows"].items() if row.startswith("man:")]
    misses = Counter(k for v in man for k, n in v["kinds"].items() if k != "reference" for _ in range(n))
    assert misses.most_common(1)[0][0] == "books"  # "The commonest miss is `books`"
    return {"lo": min(v["reference"] for v in man), "hi": max(v["reference"] for v in man)}


def kind_fresh_dicts(d: dict[str, Any]) -> dict[str, Any]:
    """The kind most of each dictionary's pages were detected as."""
    rows = res(d)["rows"]
    return {k: max(rows[f"dict:{k}"]["kinds"].items(), key=lambda kv: kv[1])[0] for k in ("jargon", "foldoc")}


def manpage_english(d: dict[str, Any]) -> dict[str, Any]:
    """The range of the English originals' keep rates over the paired languages; mostly under 97%."""
    rates = [v["keep_en"] for v in res(d)["languages"].values()]
    assert sum(r < 0.97 for r in rates) > len(rates) / 2
    removed = Counter()
    for v in res(d)["languages"].values():
        removed.update(v["removed_in_english"])
    return {"lo": min(rates), "hi": max(rates), "mh": removed["minhash_dedup/near_duplicate_of"],
            "alpha": removed["quality/min_alpha_word_frac"], "lid": removed["langid/low_language_score"]}


def dwm_big(d: dict[str, Any]) -> dict[str, Any]:
    """dirty_web_model_big.json: the big size's shares, gap, default − datatrove, setup and provenance."""
    r = res(d)
    g, big = r["gap"]["big"], next(s for s in r["configs"]["ablate"]["sizes"] if s["name"] == "big")
    rec, dt, gap, dmd = g["recovered"]["default"], g["recovered"]["datatrove"], g["raw_minus_oracle"], g["default_minus_datatrove"]
    train = r["configs"]["base"]["train"]
    assert train["dtype"] == "bfloat16" and train["compile"] is True and train["global_batch_tokens"] == 4096
    assert rec["low"] < 1.0  # "so that is not claimed"
    assert dmd["high"] < 0  # "beats datatrove's full recipe beyond noise"
    assert dt["low"] < 0 < dt["high"]  # "recovers none of the gap"
    small_then = res(load("dirty_web_model.json"))["gap"]["small"]["bpb"]
    drift = max(abs(a - b) for arm, now in r["gap"]["small"]["bpb"].items() for a, b in zip(now, small_then[arm]))
    return {"rec": rec["mean"], "lo": rec["low"], "hi": rec["high"], "hw": (rec["high"] - rec["low"]) / 2,
            "gap": gap["mean"], "glo": gap["low"], "ghi": gap["high"],
            "dmd": minus(dmd["mean"], ".3f"), "dmdlo": minus(dmd["low"], ".3f"), "dmdhi": minus(dmd["high"], ".3f"),
            "dt": minus(100 * dt["mean"], ".0f"), "dtlo": minus(100 * dt["low"], ".0f"), "dthi": minus(100 * dt["high"], ".0f"),
            "tokens": big["tokens"], "params": _params(big, r["configs"]["base"]["tokenizer"]["vocab_size"]),
            "dt_epochs": r["ablate"]["arms"]["datatrove"]["epochs"]["big"], "tol": 0.01 if drift < 0.01 else drift,
            "minutes": round(d["seconds"] / 60), "load": d["load"]["others_cpu_share"]["mean"]}


def _params(size: dict[str, Any], vocab: int) -> int:
    """The parameter count of the size's model, built as the trainer builds it."""
    from tokenmill.model.config import ModelConfig
    from tokenmill.model.transformer import Transformer

    cfg = ModelConfig(vocab_size=vocab, d_model=size["d_model"], n_layers=size["n_layers"], n_heads=size["n_heads"], max_seq_len=256)
    return sum(p.numel() for p in Transformer(cfg).parameters())


def dwm_big_power(d: dict[str, Any]) -> dict[str, Any]:
    """The power statement, from section 4's runs: the per-seed spread of the share recovered and the half-width it gives."""
    g = res(d)["gap"]
    sd = {s: g[s]["recovered"]["default"]["sd"] for s in ("small", "large")}
    t = 4.303  # Student t, 0.975, 2 degrees of freedom
    return {"ss": sd["small"], "sl": sd["large"], "hs": t * sd["small"] / 3**0.5, "hl": t * sd["large"] / 3**0.5,
            "plo": g["small"]["default_minus_datatrove"]["detectable"], "phi": g["large"]["default_minus_datatrove"]["detectable"]}


def docs_fresh(d: dict) -> dict:
    """bench_docs_fresh.py: pages kept per row without a reference, and SQLite's top removals."""
    a = res(d)["variants"]["a_no_reference"]
    top = {t["rule"]: t["pages"] for t in a["sqlite3-doc/en"]["top_rejections"]}
    return {"pg1": f"{a['postgresql-doc-15/en']['kept']:,}", "pgn": f"{a['postgresql-doc-15/en']['read']:,}",
            "git1": a["git-doc/en"]["kept"], "gitn": a["git-doc/en"]["read"],
            "sq_chars": top["quality/min_chars"], "sq_mh": top["minhash_dedup/near_duplicate_of"]}


def docs_fresh_base(d: dict) -> dict:
    a = res(d)["variants"]["a_no_reference"]
    return {"pg0": f"{a['postgresql-doc-15/en']['kept']:,}", "git0": a["git-doc/en"]["kept"]}


def dirty_web_generators(d: dict) -> dict:
    k, old = res(d)["kinds"], res(load("dirty_web.json"))["kinds"]
    return {"b0": old["boilerplate_only"]["tokenmill_removed"], "b1": k["boilerplate_only"]["tokenmill_removed"],
            "t0": old["tag_cloud"]["tokenmill_removed"], "t1": k["tag_cloud"]["tokenmill_removed"]}


def docs_fresh_rates(d: dict) -> dict:
    a, b = res(d)["variants"]["a_no_reference"], res(load("docs_kept_fresh_baseline.json"))["variants"]["a_no_reference"]
    return {"pga": b["postgresql-doc-15/en"]["keep_rate"], "pgb": a["postgresql-doc-15/en"]["keep_rate"],
            "gita": b["git-doc/en"]["keep_rate"], "gitb": a["git-doc/en"]["keep_rate"]}


def docs_fresh2(d: dict) -> dict:
    """bench_docs_fresh.py on the second set: the largest gap to English, Node.js's and Django's pages."""
    r = res(d)
    a = r["variants"]["a_no_reference"]
    base = res(load("docs_kept_fresh2_baseline.json"))["variants"]["a_no_reference"]
    node = {t["rule"]: t["pages"] for t in a["nodejs-doc/en"]["top_rejections"]}
    dj = {t["rule"]: t["pages"] for t in a["python-django-doc/en"]["top_rejections"]}
    gaps = [c["value"] for c in r["verdict"]["checks"] if "|keep - keep of en@" in c["check"]]
    return {"gap": max(gaps), "n_gaps": len(gaps) // 2, "node_k": a["nodejs-doc/en"]["kept"], "node_n": a["nodejs-doc/en"]["read"],
            "node_dup": node["quality/max_dup_line_char_frac"] + node["quality/max_dup_line_frac"],
            "dj0": base["python-django-doc/en"]["kept"], "dj1": a["python-django-doc/en"]["kept"], "djn": a["python-django-doc/en"]["read"],
            "dj_chars": dj["quality/min_chars"], "dj_alpha": dj["quality/min_alpha_word_frac"]}


def docs_round2_design(d: dict) -> dict:
    return {"pg_design": res(d)["variants"]["a_no_reference"]["postgresql-doc-15/en"]["keep_rate"]}


def dirty_web_round2(d: dict) -> dict:
    return {"bo": res(d)["kinds"]["boilerplate_only"]["tokenmill_removed"]}


def docs_fresh3(d: dict) -> dict:
    """bench_docs_fresh.py on the third set: the rows the prose quotes, and their top removals."""
    a = res(d)["variants"]["a_no_reference"]

    def top(row: str) -> dict:
        return {t["rule"]: t["pages"] for t in a[row]["top_rejections"]}

    rb, std, pr = top("rust-book/en"), top("rust-std/en"), top("pandas-reference/en")
    rest = [a[r]["keep_rate"] for r in ("sphinx-doc/en", "pandas-guide/en", "debian-policy/en", "debian-policy/ja")]
    return {"rb_k": a["rust-book/en"]["kept"], "rb_n": a["rust-book/en"]["read"], "rb_mh": rb["minhash_dedup/near_duplicate_of"],
            "rb_ld": rb["line_dedup/too_short_after_line_dedup"], "std_k": a["rust-std/en"]["kept"], "std_n": a["rust-std/en"]["read"],
            "std_chars": std["quality/min_chars"], "std_dup": std["quality/max_dup_line_char_frac"],
            "pr_k": a["pandas-reference/en"]["kept"], "pr_n": a["pandas-reference/en"]["read"],
            "pr_lid": pr["langid/low_language_score"], "pr_chars": pr["quality/min_chars"], "lo": min(rest), "hi": max(rest)}


def docs_fresh4(d: dict) -> dict:
    """bench_docs_fresh.py on the fourth set: pages kept before -> after per row the prose quotes."""
    a = res(d)["variants"]["a_no_reference"]
    b = res(load("docs_kept_fresh4_baseline.json"))["variants"]["a_no_reference"]
    top = {t["rule"]: t["pages"] for t in a["java-base-api/en"]["top_rejections"]}
    out = {"java": a["java-base-api/en"]["kept"], "javan": a["java-base-api/en"]["read"],
           "java_chars": top["quality/min_chars"], "java_dup": top["quality/max_dup_text_line_char_frac"]}
    for key, row in (("gtk", "gtk3-api/en"), ("cpp", "libstdc++-api/en"), ("erl", "erlang-lib/en")):
        out.update({f"{key}0": b[row]["kept"], f"{key}1": a[row]["kept"], f"{key}n": a[row]["read"]})
    return out


def after_docs_rounds(d: dict) -> dict:
    """The spent quality-signal set before (quality_signal.json) and after the documentation rounds."""
    new, old = res(d)["variants"], res(load("quality_signal.json"))["variants"]

    def rate(v: dict, variant: str, group: str) -> float:
        return v[variant]["groups"][group]["keep_rate"]

    return {"a0": rate(old, "a_no_reference", "word_substitution"), "a1": rate(new, "a_no_reference", "word_substitution"),
            "b0": rate(old, "b_reference", "word_substitution"), "b1": rate(new, "b_reference", "word_substitution"),
            "m0": rate(old, "a_no_reference", "clean/manpages"), "m1": rate(new, "a_no_reference", "clean/manpages")}


def manpage_after_docs(d: dict) -> dict:
    r = res(d)
    shares = [x["kept_en"] / x["pairs"] for x in r["languages"].values()]
    return {"met": r["checks_met"], "total": r["checks_total"], "lo": min(shares), "hi": max(shares)}


def _gate(g: dict) -> int:
    """Documents a quality-signal group lost to the auto perplexity gate."""
    return sum(x["docs"] for x in g["removed_by"] if x["rule"] == "model_quality/perplexity")


def word_salad_scored(d: dict) -> dict:
    """The second quality-signal judgement: before (the freeze) and after the word-order test."""
    after, before = res(d)["variants"], res(load("quality_signal2_baseline.json"))["variants"]
    b1, b0 = after["b_reference"]["groups"], before["b_reference"]["groups"]
    clean_gate = {row: (_gate(b0[row]), _gate(b1[row])) for row in b1 if row.startswith("clean/")}
    de = {x["rule"]: x["docs"] for x in b1["clean/gimp-help-de"]["removed_by"]}
    peer = res(load("peer_datatrove_quality_signal2.json"))["groups"]
    junk = [k for k in b1 if "/" not in k and k != "shuffled_words"]
    return {"s0": b0["shuffled_words"]["keep_rate"], "s1": b1["shuffled_words"]["keep_rate"],
            "w0": b1["shuffled_words"]["wilson95"][0], "w1": b1["shuffled_words"]["wilson95"][1],
            "g0": _gate(b0["shuffled_words"]), "g1": _gate(b1["shuffled_words"]),
            "reached": b1["shuffled_words"]["perplexity_judged"],
            "es_gate": clean_gate["clean/gimp-help-es"][1], "foca_gate": clean_gate["clean/focalinux"][0],
            "others_gate": sum(a + b for row, (a, b) in clean_gate.items()) - clean_gate["clean/gimp-help-es"][1]
            - clean_gate["clean/focalinux"][0],
            "de_dedup": de.get("minhash_dedup/near_duplicate_of", 0) + de.get("exact_dedup/duplicate_of", 0),
            "ocr": _gate(b1["ocr_damage"]), "sub": _gate(b1["word_substitution"]),
            "untouched": sum(_gate(b1[k]) for k in ("markov_chain", "event_listing", "sentence_splice")),
            "peer_more": sum(peer[k]["keep_rate"] < b1[k]["keep_rate"] for k in junk),
            "peer_rows": all(peer[r]["keep_rate"] < b1[r]["keep_rate"] for r in b1 if r.startswith("clean/")),
            "foca_peer": peer["clean/focalinux"]["kept"], "foca_n": peer["clean/focalinux"]["docs"],
            "peer_shuf": peer["shuffled_words"]["keep_rate"], "peer_event": peer["event_listing"]["keep_rate"],
            "a_same": after["a_no_reference"]["groups"] == before["a_no_reference"]["groups"]}


def word_salad_design(d: dict) -> dict:
    """The word-order test on the dirty-web design corpus, and the old cut there."""
    new, old = res(d), res(load("perplexity_gate.json"))
    shuf = {s: new[s]["pipeline"]["shuffled_words"] for s in ("seed_41", "seed_7")}
    clean = sum(new[s]["pipeline"][k]["removed_by_gate"] for s in shuf for k in ("clean_docs", "clean_prose"))
    return {"r41": shuf["seed_41"]["removed_by_gate"], "r7": shuf["seed_7"]["removed_by_gate"],
            "n": shuf["seed_41"]["reached_gate"], "n7": shuf["seed_7"]["reached_gate"], "clean": clean,
            "old": min(old[s]["pipeline"]["shuffled_words"]["removed_by_gate"] for s in shuf),
            "old_n": max(old[s]["pipeline"]["shuffled_words"]["reached_gate"] for s in shuf)}


def word_salad_spent(d: dict) -> dict:
    """The spent first quality-signal judgement, with a reference, before and after the test."""
    new = res(d)["variants"]["b_reference"]["groups"]
    old = res(load("quality_signal_after_docs.json"))["variants"]["b_reference"]["groups"]
    return {"ocr1": _gate(new["ocr_damage"]), "sub1": _gate(new["word_substitution"]),
            "ocr0": _gate(old["ocr_damage"]), "sub0": _gate(old["word_substitution"]),
            "es0": _gate(old["clean/bible-es-rv1909"]), "es1": _gate(new["clean/bible-es-rv1909"])}


def word_salad_docs(d: dict) -> dict:
    """The four spent documentation sets with a reference, before and after the word-order test."""
    out = {"b0": 0, "b1": 0, "n": 0, "gained": 0, "same": True}
    for i in ("", "2", "3", "4"):
        after, before = load(f"docs_kept_fresh{i}_word_order.json"), load(f"docs_kept_fresh{i}_before_word_order.json")
        assert not after["dirty"] and not before["dirty"] and after["commit"].startswith("5d4db62")
        a, b = res(after)["variants"], res(before)["variants"]
        for row, r in a["b_reference"].items():
            out["b1"] += r["kept"]
            out["b0"] += b["b_reference"][row]["kept"]
            out["n"] += r["read"]
            out["gained"] += r["kept"] > b["b_reference"][row]["kept"]
            out["same"] &= a["a_no_reference"][row]["kept"] == b["a_no_reference"][row]["kept"]
        if i == "2":
            django = (b["b_reference"]["python-django-doc/en"]["kept"], a["b_reference"]["python-django-doc/en"]["kept"])
    out["django"] = django[0] - django[1]
    return out


def nonword_round(d: dict) -> dict:
    """The third quality-signal judgement: the non-word rule, scored once, changed nothing."""
    after, before = res(d), res(load("quality_signal3_baseline.json"))
    design = res(load("design_nonword_cut.json"))
    values = res(load("quality_signal3_nonword_values.json"))["kinds"]
    junk_min = min(v["q0.0"] for k, v in values.items() if k in ("ocr_damage", "keyboard_typos"))
    junk_max = max(v["q1.0"] for k, v in values.items() if k != "clean")
    same = all(after["variants"][v]["groups"] == before["variants"][v]["groups"] for v in after["variants"])
    removed = sum(x["docs"] for g in after["variants"]["b_reference"]["groups"].values() for x in g["removed_by"]
                  if x["rule"] == "model_quality/nonword_frac")
    assert same and removed == 0 and junk_max < 0.45 < 1 and design["all"]["max"] < 0.45
    assert values["clean"]["q1.0"] < junk_min  # the signal separates on this set
    return {"c0": before_commit(), "c1": load("quality_signal3.json")["commit"][:7],
            "h0": sum(c["holds"] for c in before["verdict"]["checks"]), "h1": sum(c["holds"] for c in after["verdict"]["checks"]),
            "n": len(after["verdict"]["checks"]), "docs": design["documents"], "med": design["all"]["q0.5"], "max": design["all"]["max"]}


def before_commit() -> str:
    return load("quality_signal3_baseline.json")["commit"][:7]


def nonword_round4(d: dict) -> dict:
    """The fourth quality-signal judgement: the non-word rule on the 1,000 commonest words."""
    after, before = res(d), res(load("quality_signal4_baseline.json"))
    b1, b0 = after["variants"]["b_reference"]["groups"], before["variants"]["b_reference"]["groups"]
    design = res(load("design_nonword_cut_1k.json"))
    values = res(load("quality_signal4_nonword_values.json"))["kinds"]

    def rule(g: dict) -> int:
        return sum(x["docs"] for x in g["removed_by"] if x["rule"] == "model_quality/nonword_frac")

    clean_removed = {row: rule(g) for row, g in b1.items() if row.startswith("clean/")}
    assert after["variants"]["a_no_reference"]["groups"] == before["variants"]["a_no_reference"]["groups"]
    assert sum(clean_removed.values()) == clean_removed["clean/libreoffice-help-es"] == 1
    return {"c0": load("quality_signal4_baseline.json")["commit"][:7], "c1": load("quality_signal4.json")["commit"][:7],
            "o0": b0["ocr_damage"]["keep_rate"], "o1": b1["ocr_damage"]["keep_rate"],
            "t0": b0["keyboard_typos"]["keep_rate"], "t1": b1["keyboard_typos"]["keep_rate"],
            "on": rule(b1["ocr_damage"]), "tn": rule(b1["keyboard_typos"]),
            "docs": design["documents"], "med": design["all"]["q0.5"], "q999": design["all"]["q0.999"], "max": design["all"]["max"],
            "under": max(values["ocr_damage"]["q0.5"], values["keyboard_typos"]["q0.5"]) < 0.11,
            "load": load("quality_signal4_baseline.json")["load"]["others_cpu_share"]["mean"]}


def nonword_docs(d: dict) -> dict:
    """The four spent documentation sets with a reference: before the non-word rule (the word-order
    runs) and with it."""
    out: dict = {"b0": 0, "b1": 0, "n": 0, "lost": {}}
    for i in ("", "2", "3", "4"):
        after, before = load(f"docs_kept_fresh{i}_nonwords.json"), load(f"docs_kept_fresh{i}_word_order.json")
        assert not after["dirty"] and after["commit"].startswith("f79e13b")
        a, b = res(after)["variants"], res(before)["variants"]
        for row, r in a["b_reference"].items():
            out["b1"] += r["kept"]
            out["b0"] += b["b_reference"][row]["kept"]
            out["n"] += r["read"]
            if r["kept"] != b["b_reference"][row]["kept"]:
                out["lost"][row] = b["b_reference"][row]["kept"] - r["kept"]
            assert a["a_no_reference"][row]["kept"] == b["a_no_reference"][row]["kept"]
    lost = out.pop("lost")
    assert lost == {"postgresql-doc-15/en": 1, "rust-reference/en": 1, "rust-std/en": 2, "pandas-reference/en": 1, "libstdc++-api/en": 3}
    return out


def word_order_cost(d: dict) -> dict:
    r = res(d)
    return {"us": r["us_per_doc_median"]["word_order_test (now)"], "pp": r["word_order_over_perplexity"],
            "cr": r["word_order_over_context_ratio"], "rounds": r["rounds"], "docs": r["documents"],
            "tokens": round(r["mean_tokens"])}


def word_salad_provenance(d: dict) -> dict:
    files = ("quality_signal2_baseline.json", "quality_signal2.json", "peer_datatrove_quality_signal2.json")
    loads = [load(f)["load"]["others_cpu_share"]["mean"] for f in files]
    assert not any(load(f)["dirty"] for f in files) and max(loads) < 0.01
    return {"c0": load(files[0])["commit"][:7], "c1": load(files[1])["commit"][:7], "c2": load(files[2])["commit"][:7]}


def docs_fresh5(d: dict) -> dict:
    """bench_docs_fresh.py on the fifth set: pages kept before -> after, in all and per row the prose quotes."""
    after, before = res(d)["variants"], res(load("docs_kept_fresh5_baseline.json"))["variants"]
    assert not d["dirty"] and d["load"]["others_cpu_share"]["mean"] < 0.01  # "clean tree, under 1% of the cores"
    out = {"n": sum(r["read"] for r in after["a_no_reference"].values()), "c0": load("docs_kept_fresh5_baseline.json")["commit"][:7],
           "c1": d["commit"][:7]}
    for variant, key in (("a_no_reference", "a"), ("b_reference", "b")):
        out[f"{key}0"] = sum(r["kept"] for r in before[variant].values())
        out[f"{key}1"] = sum(r["kept"] for r in after[variant].values())
        assert all(after[variant][row]["kept"] >= r["kept"] for row, r in before[variant].items())  # "no row lost a page"
    for key, row in (("gio", "gio-api/en"), ("glib", "glib-api/en"), ("sqla", "sqlalchemy/en")):
        out.update({f"{key}0": before["a_no_reference"][row]["kept"], f"{key}1": after["a_no_reference"][row]["kept"],
                    f"{key}n": after["a_no_reference"][row]["read"]})
    sdl = after["a_no_reference"]["sdl2-api/en"]
    out.update({"sdl_chars": {t["rule"]: t["pages"] for t in sdl["top_rejections"]}["quality/min_chars"], "sdln": sdl["read"]})
    out.update({"h0": res(load("docs_kept_fresh5_baseline.json"))["verdict"]["holds"], "h1": res(d)["verdict"]["holds"],
                "checks": res(d)["verdict"]["of"]})
    return out


def manual_repetition_design(d: dict) -> dict:
    """design_manual_repetition.py: the two shares over the spent sets' manual pages and the dirty-web design corpus."""
    m, dw = res(d)["manuals"], res(d)["dirty_web"]
    assert not d["dirty"] and m["limit"] == 0.5
    assert dw["reference_between_limits"] == {"clean_docs": 1}  # "a clean documentation page"
    assert dw["repeated_paragraph_measured"] == 300
    over = m["pages_over_limit"]
    fn = next(p for p in over if p["page"].endswith("primitive.fn.html"))
    assert fn["dup_para_char_frac"] == max(max(p["dup_para_char_frac"], p["dup_text_line_char_frac"]) for p in over)  # "the most repeated"
    return {"pages": m["pages"], "para999": m["dup_para_char_frac"]["percentiles"]["99.9"],
            "line999": m["dup_text_line_char_frac"]["percentiles"]["99.9"], "over": len(over), "fnmax": fn["dup_para_char_frac"],
            "rp": dw["repeated_paragraph_smallest_share"], "between": sum(dw["reference_between_limits"].values())}


MANUAL_REPETITION_SETS = ("docs_kept_fresh", "docs_kept_fresh2", "docs_kept_fresh3", "docs_kept_fresh4")


def manual_repetition_spent(d: dict) -> dict:
    """The four spent documentation sets before (the non-word rule's runs) and after the manuals' repetition limit."""
    out = {"d0": 0, "d1": 0, "dn": 0}
    for name in MANUAL_REPETITION_SETS:
        after, before = load(f"{name}_manual_repetition.json"), load(f"{name}_nonwords.json")
        assert not after["dirty"] and not before["dirty"]
        a, b = res(after)["variants"]["a_no_reference"], res(before)["variants"]["a_no_reference"]
        for row, r in b.items():
            assert a[row]["kept"] >= r["kept"]  # "No row loses a page"
            if "@" not in row:
                out["d0"] += r["kept"]
                out["d1"] += a[row]["kept"]
                out["dn"] += r["read"]
    for key, name, row in (("std", "docs_kept_fresh3", "rust-std/en"), ("java", "docs_kept_fresh4", "java-base-api/en")):
        a = res(load(f"{name}_manual_repetition.json"))["variants"]["a_no_reference"][row]
        b = res(load(f"{name}_nonwords.json"))["variants"]["a_no_reference"][row]
        out.update({f"{key}0": b["kept"], f"{key}1": a["kept"], f"{key}n": a["read"]})
    return out


def manual_repetition_signal(d: dict) -> dict:
    """The spent fourth quality-signal set before (its score) and after the manuals' repetition limit."""
    new, old = res(d)["variants"], res(load("quality_signal4.json"))["variants"]
    assert not d["dirty"]
    gain = 0
    for variant in ("a_no_reference", "b_reference"):
        for group, g in old[variant]["groups"].items():
            if group.startswith("clean/"):
                gain += (new[variant]["groups"][group]["kept"] - g["kept"]) if variant == "a_no_reference" else 0
            else:
                assert new[variant]["groups"][group]["kept"] == g["kept"]  # "no junk kind moves in either variant"
    en = "clean/libreoffice-help-en"
    return {"qs_gain": gain, "en0": old["b_reference"]["groups"][en]["keep_rate"], "en1": new["b_reference"]["groups"][en]["keep_rate"]}


CLAIMS = (
    # issue 55: the two dirty-web results re-recorded on a clean tree
    Claim("dirty web rerun commit", "dirty_web.json", "were rerun on a clean tree (commit {c}). They ran with",
          lambda d: {"c": d["commit"][:7]} if d["dirty"] is False else {"c": "dirty"}),
    Claim("dirty web confirmation rerun commit", "dirty_web_confirm.json", "were rerun on a clean tree (commit {c}). They ran with",
          lambda d: {"c": d["commit"][:7]} if d["dirty"] is False else {"c": "dirty"}),
    Claim("perplexity gate rerun commit", "perplexity_gate.json", "on a clean tree (commit {c}, quiet)",
          lambda d: {"c": d["commit"][:7]} if d["dirty"] is False else {"c": "dirty"}),
    # issue 55's documentation-kept baseline
    Claim("docs kept: rows", "docs_kept_baseline.json", "the evaluation rows: {n} language folders",
          lambda d: {"n": len(d["result"]["rows"])}),
    Claim("docs kept: load and commit", "docs_kept_baseline.json", "(commit {c}, clean tree; other processes used {load:.0%} of the cores",
          lambda d: {"c": d["commit"][:7], "load": d["load"]["others_cpu_share"]["mean"]}),
    Claim("decisions: dirty web model", "dirty_web_model.json",
          "recovered {rs:.0%} and {rl:.0%} of the raw → oracle gap at\ntwo tiny sizes (95% lower bounds {ls:.0%} and {ll:.0%}", dwm,
          doc="docs/decisions.md"),
    Claim("decisions: dirty web model, default − datatrove", "dirty_web_model.json", "trained on its own output, by {a}-{b} bpb",
          lambda d: {"a": f"{-res(d)['gap']['small']['default_minus_datatrove']['mean']:.2f}",
                     "b": f"{-res(d)['gap']['large']['default_minus_datatrove']['mean']:.2f}"}, doc="docs/decisions.md"),
    # issue 55's documentation kept, scored once with the frozen file
    Claim("docs kept scored: commit and load", "docs_kept.json", "(commit {c}, clean tree; other processes used {load:.0%} of the cores)",
          lambda d: {"c": d["commit"][:7], "load": d["load"]["others_cpu_share"]["mean"]} if d["dirty"] is False else {"c": "dirty"}),
    Claim("docs kept scored: length floor", "docs_kept.json", "takes most: {n} pages under `min_chars`",
          lambda d: {"n": _docs_rule(d, "quality/min_chars")}),
    Claim("docs kept scored: line dedup", "docs_kept.json", "**Line dedup** takes {n} pages",
          lambda d: {"n": _docs_rule(d, "line_dedup/too_short_after_line_dedup")}),
    Claim("docs kept scored: web rules", "docs_kept.json", "`max_dup_5gram_char_frac` {a} and\n  FineWeb's `min_line_punct_frac` {b}",
          lambda d: {"a": _docs_rule(d, "quality/max_dup_5gram_char_frac"), "b": _docs_rule(d, "quality/min_line_punct_frac")}),
    Claim("docs kept scored: Japanese gap before", "docs_kept_baseline.json", "(every translation within\n0.00 of English, from {g:.2f} for Japanese)",
          lambda d: {"g": next(c["value"] for c in d["result"]["verdict"]["checks"]
                               if c["variant"] == "a_no_reference" and c["check"].startswith("debian-reference/ja: |"))}),
    # issue 55's quality-signal freeze and its baseline
    Claim("quality signal baseline: commit and load", "quality_signal_baseline.json",
          "(commit {c}, clean tree; other processes used {load:.0%} of the cores",
          lambda d: {"c": d["commit"][:7], "load": d["load"]["others_cpu_share"]["mean"]} if d["dirty"] is False else {"c": "dirty"}),
    Claim("quality signal baseline: sizes", "quality_signal_baseline.json", "spliced ({n} of each)",
          lambda d: {"n": d["result"]["variants"]["a_no_reference"]["groups"]["ocr_damage"]["docs"]}),
    Claim("quality signal, docs rules: commit", "quality_signal_baseline_docs_rules.json", "(commit {c}, clean tree). They keep",
          lambda d: {"c": d["commit"][:7]} if d["dirty"] is False else {"c": "dirty"}),
    # issue 55's quality signal, scored once, and datatrove's full recipe beside it
    Claim("quality signal scored: commit and load", "quality_signal.json", "(commit {c}, clean tree; other processes used {load:.0%} of the cores). The change",
          lambda d: {"c": d["commit"][:7], "load": d["load"]["others_cpu_share"]["mean"]} if d["dirty"] is False else {"c": "dirty"}),
    Claim("quality signal scored: garble on OCR", "quality_signal.json", "the garbled-word rule removes {n} of the {of} documents",
          lambda d: {"n": _removed(d["result"]["variants"]["a_no_reference"]["groups"]["ocr_damage"], "quality/max_near_miss_word_frac"),
                     "of": d["result"]["variants"]["a_no_reference"]["groups"]["ocr_damage"]["docs"]}),
    Claim("quality signal scored: Shakespeare", "quality_signal.json", "Shakespeare still loses {n} of its {of} passages",
          lambda d: {"n": _removed(d["result"]["variants"]["a_no_reference"]["groups"]["clean/shakespeare"], "quality/max_char_dup_frac"),
                     "of": d["result"]["variants"]["a_no_reference"]["groups"]["clean/shakespeare"]["docs"]}),
    Claim("quality signal scored: garble cut design", "design_garble_cut.json", "Over {n:,} clean design pages and passages in 24 languages the largest value is {v:.3f}",
          lambda d: {"n": d["result"]["documents"], "v": d["result"]["largest"][0]["value"]}),
    Claim("peer on quality signal: commit", "peer_datatrove_quality_signal.json", "`peer_datatrove_quality_signal.json` (commit {c}, clean tree)",
          lambda d: {"c": d["commit"][:7]} if d["dirty"] is False else {"c": "dirty"}),
    Claim("peer on quality signal: alpha rule", "peer_datatrove_quality_signal.json", "which counts punctuation as words: {n}",
          lambda d: {"n": _peer_reason(d, "GopherQualityFilter:gopher_below_alpha_threshold")}),
    Claim("peer on docs: commit", "peer_datatrove_docs_kept.json", "`peer_datatrove_docs_kept.json`, commit {c}, clean tree",
          lambda d: {"c": d["commit"][:7]} if d["dirty"] is False else {"c": "dirty"}),
    Claim("peer on docs: reasons", "peer_datatrove_docs_kept.json",
          "remove them for punctuation counted as words ({a} pages), CJK text unsplit into words ({b})\nand length ({c}). C4's curly bracket removes {d} and Trafilatura finds {e} pages empty",
          lambda d: {"a": _peer_reason(d, "GopherQualityFilter:gopher_below_alpha_threshold"),
                     "b": _peer_reason(d, "GopherQualityFilter:gopher_above_avg_threshold"),
                     "c": _peer_reason(d, "GopherQualityFilter:gopher_short_doc"),
                     "d": _peer_reason(d, "C4QualityFilter:curly_bracket"), "e": _peer_reason(d, "Trafilatura:empty")}),
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
    # Classifiers from your labels (classify_topic.json)
    Claim("classify: labelled passages", "classify_topic.json", "`benchmarks/labels/topic_format.jsonl`, {n:,} passages",
          lambda d: {"n": d["train"]["passages"] + d["held_out"]["passages"]}),
    Claim("classify: held out by file", "classify_topic.json", "Every {k}th file of each class (sorted by path) is held out",
          lambda d: {"k": re.search(r"every (\d+)th file", d["split"])[1]}),
    # Toxicity in layers (toxicity_layers.json)
    Claim("toxicity: load", "toxicity_layers.json", "other processes used {load:.0%} of the 2 cores on average",
          lambda d: {"load": d["load"]["others_cpu_share"]["mean"]}),
    Claim("toxicity: training and measured sets", "toxicity_layers.json",
          "Trained on {n:,} ({t} offensive; held-out AUC {auc:.2f}), measured on {m:,} ({mt} offensive)",
          lambda d: {"n": sum(d["configs"]["builtin_default_p0.5"]["classifier"]["examples"].values()),
                     "t": d["configs"]["builtin_default_p0.5"]["classifier"]["examples"]["toxic"],
                     "auc": d["configs"]["builtin_default_p0.5"]["classifier"]["auc"],
                     "m": d["configs"]["builtin_default_p0.5"]["total"]["docs"], "mt": d["configs"]["builtin_default_p0.5"]["total"]["toxic"]}),
    Claim("toxicity: built-in list at the default", "toxicity_layers.json",
          "({fp1} clean texts removed → {fp2}, offensive caught {tp1} → {tp2})", lambda d: tox(d, "builtin_default_p0.5")),
    Claim("toxicity: broad list at P > 0.25", "toxicity_layers.json",
          "at P > 0.25 ({fp1} → {fp2}, {tp1} → {tp2})", lambda d: tox(d, "broad_default_p0.25")),
    Claim("toxicity: broad list at P > 0.5", "toxicity_layers.json",
          "second pass keeps {kept} more clean texts and loses {lost} of its {tp1} offensive catches", tox_broad_default),
    Claim("toxicity: the classifier's share and costs", "toxicity_layers.json",
          "runs on {share_in:.1%} (built-in) or {share_br:.0%} (broad) of the documents, so its amortised cost is "
          "{a_in_lo:.1f}–{a_in_hi:.0f} µs (built-in) or {a_br_lo:.0f}–{a_br_hi:.0f} µs (broad) per document beside the "
          "list's {l_lo:.0f}–{l_hi:.0f} ({s_lo:.0f}–{s_hi:.0f} µs per document it scores; ~{chars:.0f} characters a document",
          tox_costs),
    Claim("toxicity: every document to the classifier", "toxicity_layers.json",
          "catches {tp2} of {toxic} but removes {fp2} clean texts", lambda d: tox(d, "builtin_from_zero_p0.5")),
    Claim("toxicity: offensive training examples", "toxicity_layers.json", "with {t} offensive training examples",
          lambda d: {"t": d["configs"]["broad_from_zero_p0.5"]["classifier"]["examples"]["toxic"]}),
    # Person names and postal addresses in PII (pii_names.json)
    Claim("pii names: repeats", "pii_names.json", "benchmarks/bench_pii_names.py --repeat {r}`",
          lambda d: {"r": re.search(r"--repeat (\d+)", d["command"])[1]}),
    Claim("pii names: false names in dictionary texts", "pii_names.json",
          "The {n} false names in the dictionary texts are places and institutions (\"{a}\", \"{b}\")", pii_false_names),
    # What each curation gate costs per document (gate_costs.json)
    Claim("gate costs: document cut", "gate_costs.json", "each file one document, cut at {n:,} characters",
          lambda d: {"n": res(d)["documents"]["max_chars"]}),
    Claim("gate costs: gates trained in the driver", "gate_costs.json", "the {n} classifier gates train once in the driver",
          lambda d: {"n": word(sum(g["prepare_seconds"] > 0 for g in res(d)["gates"].values()))}),
    # Hostile inputs (hostile_inputs.json, hostile_inputs_labelled.json, hostile_inputs_normal.json)
    Claim("hostile: normal pages in the command", "hostile_inputs_normal.json", "--normal-files {n} --only normal_html",
          lambda d: {"n": re.search(r"--normal-files (\d+)", d["command"])[1]}),
    Claim("hostile: load", "hostile_inputs.json",
          "other processes' share of the cores at most {main:.1%}; {lab:.0%} on average while the labelled-file cases ran",
          lambda d: {"main": max(load(f)["load"]["others_cpu_share"]["max"] for f in ("hostile_inputs.json", "hostile_inputs_normal.json")),
                     "lab": load("hostile_inputs_labelled.json")["load"]["others_cpu_share"]["mean"]}),
    Claim("hostile: nesting depths", "hostile_inputs.json", "JSON nested {lo} to {hi} deep in curate input",
          lambda d: {"lo": re.search(r"nested ([\d,]+) levels", hostile(d)["jsonl_deep_line"]["what"])[1],
                     "hi": re.search(r"nested ([\d,]+) levels", hostile(d)["bigbench_deep_task"]["what"])[1]}),
    Claim("hostile: repeats", "hostile_inputs.json", "tokenmill's time is the median of {n} runs; the baseline's hostile cases run {b}",
          lambda d: {"n": hostile(d)["jsonl_nul_line"]["repeats"],
                     "b": {1: "once"}[hostile(d, "baseline")["jsonl_nul_line"]["repeats"]]}),
    Claim("hostile: normal pages", "hostile_inputs_normal.json", "`normal_html` is no attack: {n} ordinary pages",
          lambda d: {"n": hostile(d)["normal_html"]["kept"] + sum(hostile(d)["normal_html"]["rejected"].values())}),
    Claim("hostile: refusal lengths and growth", "hostile_inputs.json",
          "every refusal {lo} to {hi} lines (the trainer's banner and its peak-FLOPs line come before a bad batch is met), "
          "and the growth cases' peak RSS barely moves when their input grows {g} times",
          lambda d: {"lo": word(min(r["stderr_lines"] for r in hostile(d).values() if r["exit"] != 0)),
                     "hi": word(max(r["stderr_lines"] for r in hostile(d).values() if r["exit"] != 0)),
                     "g": word(hostile_growth(d))}),
    Claim("hostile: paths lost to a typo", "hostile_inputs.json", "lost the run's checkpoints and evaluations to a typo ({n} paths)",
          lambda d: {"n": hostile(d, "baseline")["mixture_weight_typo"]["paths_lost"]}),
    Claim("hostile: cases bounded already", "hostile_inputs.json", "The first {n} cases were bounded already",
          lambda d: {"n": list(hostile(d)).index("hf_index_escapes") + 1}),
    # Memory per rank of data-, tensor-, pipeline- and context-parallel training (parallel_memory.json)
    Claim("parallel memory: load", "parallel_memory.json",
          "other processes took {load:.0%} of the 2 cores on average (95th percentile {p95:.0%}", parallel_memory),
    Claim("parallel memory: the worst rank", "parallel_memory.json",
          "{n} ranks over {layouts} layouts and {dtypes} dtypes: worst {worst:.3f}×** (rank {w_rank} of dp=2 × tp=2 with SP, "
          "{w_dtype}, measured above the estimate: {w_mib:.1f} MiB against {w_est:.1f}, while the other three ranks of that job "
          "measured {o_lo:.1f}–{o_hi:.1f})", parallel_memory),
    Claim("parallel memory: the new modes", "parallel_memory.json",
          "ZeRO-1 over dp=2 {z1[1]:.2f}×", parallel_memory),
    Claim("parallel memory: ZeRO-2, ZeRO-3 in stages, cp, SP", "parallel_memory.json",
          "ZeRO-2 {z2[0]:.2f}–{z2[1]:.2f}×, FSDP2 inside the stages of dp=2 × pp=2 {z3[0]:.2f}–{z3[1]:.2f}×", parallel_memory),
    Claim("parallel memory: cp and tp", "parallel_memory.json",
          "cp=2 {cp[0]:.2f}–{cp[1]:.2f}×, tp=2 with SP {sp[0]:.2f}–{sp[1]:.2f}× (without SP {nosp[0]:.2f}–{nosp[1]:.2f}×)",
          parallel_memory),
    Claim("parallel memory: SP lean and rank spread", "parallel_memory.json",
          "under the estimate by {lo:.0f}–{hi:.0f}%, and identical ranks of one job differ by up to {spread:.0f} MiB",
          lambda d: {"lo": parallel_memory(d)["lean_lo"] * 100, "hi": parallel_memory(d)["lean_hi"] * 100,
                     "spread": parallel_memory(d)["spread"]}),
    Claim("parallel memory: what the layouts save", "parallel_memory.json",
          "against one process ({one:.0f} MiB): tp=2 with SP {sp:.2f}× ({nosp:.2f}× without), pp=2 with 1F1B "
          "{f2:.2f}–{f4:.2f}× on the first stage (it holds two micro-batches in flight), GPipe with 4 micro-batches {gp:.2f}× "
          "(all four in flight), cp=2 {cp:.2f}×, dp=2 × tp=2 {dptp:.2f}×, tp=2 × pp=2 {tppp:.2f}×; on this small model ZeRO-1 "
          "({z1:.2f}×) and ZeRO-2 ({z2:.2f}×)", parallel_savings),
    Claim("parallel memory: dp × pp", "parallel_memory.json",
          "dp=2 × pp=2 holds what pp=2 does with replicated stages ({rep:.2f}×) and {z3:.2f}× with FSDP2 inside them",
          parallel_savings),
    # Time to loss on one GPU (time_to_loss_h200.json, time_to_loss_h200_seed1.json)
    Claim("time to loss: seed 0 command", "time_to_loss_h200.json", "`python3 {args} --json $OUT/time_to_loss_h200.json",
          lambda d: {"args": command_args(d)}),
    Claim("time to loss: seed 1 command", "time_to_loss_h200_seed1.json", "then the same with `{extra}` (",
          lambda d: {"extra": command_args(d).split(f"--seconds {d['seconds']:.0f} ")[1]}),
    Claim("time to loss: machine", "time_to_loss_h200.json",
          "one {gpu}, torch {torch} (CUDA {cuda}), Python {python}, {cores} CPU cores, load {l0:.2f} and {l1:.2f} at start",
          lambda d: {"gpu": d["device"], "torch": d["torch"], "cuda": d["cuda"], "python": d["python"],
                     "cores": d["cpu_cores"], "l0": d["load_avg"], "l1": load(TTL_FILES[1])["load_avg"]}),
    Claim("time to loss: shape", "time_to_loss_h200.json",
          "(d {d_model}, {n_layers} layers, {n_heads} heads, context {seq_len}, batch {batch} × {seq_len} tokens, no "
          "accumulation, vocabulary {vocab:,}", ttl_setup),
    Claim("time to loss: peer commit and seconds", "time_to_loss_h200.json",
          "`train.py` of commit {peer} (sha256 recorded) in a fresh process per run, max_iters = {seconds:.0f} s", ttl_setup),
    Claim("time to loss: tokens and held-out documents", "time_to_loss_h200.json",
          "{train:.2f} M training / {val:.2f} M held-out tokens", ttl_setup),
    Claim("time to loss: eval documents and grid", "time_to_loss_h200.json",
          "(up to {docs} per bucket): byte-weighted bits per byte. One LR grid for both sides ({g0}, nanoGPT's default, "
          "{g1}, {g2})", ttl_setup),
    Claim("time to loss: best LR", "time_to_loss_h200.json", "Both sides' best LR on seed 0 is {best_n}",
          lambda d: {"best_n": agreed(ttl_setup(d)["best_n"], ttl_setup(d)["best_t"])}),
    Claim("time to loss: without first steps", "time_to_loss_h200.json", "({a:.2f}× and {b:.2f}× leaving out each side's first",
          lambda d: {"a": time_to_loss(d)["tn"], "b": time_to_loss(load(TTL_FILES[1]))["tn"]}),
    Claim("time to loss: gap and seed spread", "time_to_loss_h200.json",
          "The gap between the sides ({g0:.2f} and {g1:.2f} bpb) is {times} times the spread between tokenmill's two seeds "
          "({st:.2f} bpb; nanoGPT's is {sn:.4f} bpb)", ttl_reading),
    Claim("time to loss: short runs", "time_to_loss_h200.json",
          "{peer_s:.0f} s is about {peer_tok:.0f} M tokens for nanoGPT and {tok_lo:.0f}–{tok_hi:.0f} M for tokenmill", ttl_reading),
    Claim("time to loss: first steps", "time_to_loss_h200.json",
          "first step reuses compiled graphs ({f_lo:.2f}–{f_hi:.2f} s); each nanoGPT run is a new process compiling from a warm "
          "Inductor cache, {pf_lo:.1f}–{pf_hi:.1f} s inside its seconds", ttl_reading),
    Claim("time to loss: first steps' share", "time_to_loss_h200.json", "(about {pf_share:.0%} of nanoGPT's seconds)", ttl_reading),
    Claim("time to loss: stalls", "time_to_loss_h200.json",
          "its runs took {steps_lo}–{steps_hi:,} steps in the same seconds at a {ms_lo:.0f}–{ms_hi:.0f} ms median step, so "
          "{stall_lo:.0f}–{stall_hi:.0f} s of each went to slower steps", ttl_reading),
    Claim("time to loss: tokens/s target", "time_to_loss_h200.json", "tokens/s ≥ 1.05× nanoGPT is not met ({speed:.2f}×)",
          time_to_loss),
    # Curation that shows in the model: a dirty-web corpus (dirty_web*.json, kind_detect.json, perplexity_gate.json,
    # dirty_web_model.json, ablate.json)
    Claim("dirty web: corpus", "dirty_web.json", "{docs:,} labelled documents ({per_kind} per kind, seed {seed})", dirty_web),
    Claim("dirty web: datatrove version and machine", "dirty_web.json",
          "{cores} cores of an {cpu}, load). tokenmill runs as a newcomer", lambda d: d["machine"]),
    Claim("dirty web: datatrove version", "dirty_web.json", "datatrove {datatrove_version}'s GopherRepetitionFilter", dirty_web),
    Claim("dirty web: confirmation seed", "dirty_web_confirm.json", "the same with `--seed {seed}` into `dirty_web_confirm.json`",
          dirty_web),
    Claim("dirty web: datatrove's junk kinds", "dirty_web.json", "on both corpora (datatrove: {a} of {junk};",
          lambda d: {"a": agreed(dirty_web(d)["met_d"], dirty_web(load("dirty_web_confirm.json"))["met_d"]),
                     "junk": dirty_web(d)["junk"]}),
    Claim("dirty web: clean kept and mojibake", "dirty_web.json",
          "tokenmill keeps about {a:.0%} of the clean text (datatrove about half) and repairs and keeps {m:.0%} of the "
          "mojibake'd pages", lambda d: {"a": dirty_web(d)["kept_t"], "m": dirty_web(d)["moji"]}),
    Claim("dirty web: confirmation agrees", "dirty_web_confirm.json",
          "tokenmill keeps about {a:.0%} of the clean text (datatrove about half) and repairs and keeps {m:.0%} of the "
          "mojibake'd pages", lambda d: {"a": dirty_web(d)["kept_t"], "m": dirty_web(d)["moji"]}),
    Claim("dirty web: tag clouds and boilerplate now", "dirty_web.json", "to {tc:.0%} and {bp:.1%} removed)",
          lambda d: {"tc": res(d)["kinds"]["tag_cloud"]["tokenmill_removed"], "bp": res(d)["kinds"]["boilerplate_only"]["tokenmill_removed"]}),
    Claim("dirty web: word salad by the gate", "perplexity_gate.json", "→ {share:.0%} removed, {n} of {rows} by the gate)",
          lambda d: {"share": res(load("dirty_web.json"))["kinds"]["shuffled_words"]["tokenmill_removed"],
                     "n": d["result"]["seed_41"]["pipeline"]["shuffled_words"]["removed_by_gate"],
                     "rows": d["result"]["seed_41"]["pipeline"]["shuffled_words"]["rows"]}),
    Claim("kinds: code files per language", "kind_detect.json", "files of code/* ({n} per language)",
          lambda d: {"n": d["result"]["per_group"]}),
    Claim("perplexity gate: quantile and minimum", "perplexity_gate.json",
          "the first's {q} quantile and the second's median, per language (a language with fewer than {m} held-out passages",
          lambda d: {"q": d["result"]["seed_41"]["calibration"]["quantile"], "m": d["result"]["seed_41"]["calibration"]["min_held_out"]}),
    Claim("dirty web model: training setup", "dirty_web_model.json",
          "{dtype} on the CPU, {threads} threads, lr {lr} for every arm, {batch:,} tokens per step", dwm_setup),
    Claim("dirty web model: tokenizer", "dirty_web_model.json", "one {vocab:,}-token BPE", dwm_setup),
    Claim("dirty web model: recovered shares", "dirty_web_model.json",
          "point estimates {rs:.0%} (small) and {rl:.0%} (large); 95% lower bounds {ls:.0%} and {ll:.0%}.", dwm),
    Claim("dirty web model: model sizes", "dirty_web_model.json", "The models are tiny ({s} and {l})", dwm_setup),
    Claim("dirty web model: default − datatrove", "dirty_web_model.json", "(default − datatrove {ds} and {dl} bpb", dwm),
    Claim("dirty web model: datatrove's arm", "dirty_web_model.json",
          "they keep {kept} of the {junk:,} junk documents ({salad} of them word salad", dwm),
    Claim("dirty web model: datatrove's tokens", "dirty_web_model.json",
          "so its arm trains on {ktok:.0f} k tokens, {epochs:.0f} epochs at the large size", dwm),
    Claim("dirty web model: power", "dirty_web_model.json",
          "the smallest Δ detectable with {pw:.0%} power is {ps:.3f} bpb at the small size and {pl:.2f} bpb at the large", dwm),
    Claim("dirty web model: the earlier ablation's token shares", "ablate.json",
          "whose arms differed in {lo:.1%}-{hi:.0%} of their tokens", ablate_token_shares),
    Claim("dirty web model: held-out text and junk share", "dirty_web_model.json",
          "Held-out text: {held} documents, {mb:.2f} MB. The corpus is {junk_share:.0%} junk by documents", dwm),
    Claim("dirty web model big: provenance", "dirty_web_model_big.json",
          "1 h {mm} min; other processes used {load:.0%} of the cores on average", lambda d: {**dwm_big(d), "mm": dwm_big(d)["minutes"] - 60}),
    Claim("dirty web model big: size", "dirty_web_model_big.json",
          "{params:,} parameters, {tokens:,} tokens per run, 3 seeds", dwm_big),
    Claim("dirty web model big: datatrove's epochs", "dirty_web_model_big.json", "up to datatrove's {dt_epochs:.1f} epochs", dwm_big),
    Claim("dirty web model big: power stated before", "dirty_web_model.json",
          "recovered was {ss:.2f} (small) and {sl:.2f} (large), so 3 seeds would give a 95% half-width of about {hs:.2f} or {hl:.2f}; "
          "default − datatrove was detectable at 80% power down to about {plo:.2f}-{phi:.2f} bpb", dwm_big_power),
    Claim("dirty web model big: share recovered", "dirty_web_model_big.json",
          "recovers {rec:.0%} of the raw → oracle gap, 95% interval [{lo:.0%}, {hi:.0%}].** So it recovers at least {lo:.0%};", dwm_big),
    Claim("dirty web model big: the gap", "dirty_web_model_big.json", "The gap itself is {gap:.3f} bpb [{glo:.3f}, {ghi:.3f}];", dwm_big),
    Claim("dirty web model big: half-width", "dirty_web_model_big.json", "The half-width came out at {hw:.2f}, near the", dwm_big),
    Claim("dirty web model big: default − datatrove", "dirty_web_model_big.json",
          "default − datatrove is {dmd} bpb [{dmdlo}, {dmdhi}]", dwm_big),
    Claim("dirty web model big: datatrove's share", "dirty_web_model_big.json",
          "recovers none of the gap ({dt}%, interval [{dtlo}%, {dthi}%])", dwm_big),
    Claim("dirty web model big: the small size again", "dirty_web_model_big.json",
          "matches section 4's fp32 figures to within {tol} bpb per arm and seed", dwm_big),
    Claim("kinds held out: man pages per language", "kind_detect_fresh.json",
          "between {lo:.0%} and {hi:.0%} of each language's pages", kind_fresh_man_range),
    Claim("kinds held out: the dictionaries' kinds", "kind_detect_fresh.json",
          "the Jargon File's pages come out `{jargon}` and FOLDOC's come out `{foldoc}`", kind_fresh_dicts),
    Claim("man-page parity: what removes the English originals", "manpage_parity_baseline.json",
          "MinHash removed {mh} originals as near-copies of other man pages, Gopher's alphabetic-word share {alpha} and language ID {lid}.",
          manpage_english),
    Claim("man-page parity: English originals kept", "manpage_parity_baseline.json",
          "The English originals themselves are kept at {lo:.0%} to {hi:.0%}, mostly under the 97% documentation target", manpage_english),
    Claim("docs fresh: PostgreSQL and git after", "docs_kept_fresh.json",
          "to {pg1} of {pgn}, and git's from", docs_fresh),
    Claim("docs fresh: git after", "docs_kept_fresh.json", "to {git1} of {gitn}. Their pages name DocBook and AsciiDoc.", docs_fresh),
    Claim("docs fresh: PostgreSQL and git before", "docs_kept_fresh_baseline.json",
          "PostgreSQL's pages kept went from {pg0} to", docs_fresh_base),
    Claim("docs fresh: git before", "docs_kept_fresh_baseline.json", "and git's from {git0} to", docs_fresh_base),
    Claim("docs fresh: SQLite's losses", "docs_kept_fresh.json",
          "{sq_chars} pages fall under the length floor and {sq_mh} are near-copies", docs_fresh),
    Claim("docs fresh: the frozen table's row", "docs_kept_fresh.json",
          "PostgreSQL {pga:.3f} → {pgb:.3f} and git {gita:.3f} → {gitb:.3f} of pages kept", docs_fresh_rates, doc="docs/decisions.md"),
    Claim("docs fresh 2: parity", "docs_kept_fresh2.json", "All {n_gaps} translations keep within {gap:.2f} of the same English pages.", docs_fresh2),
    Claim("docs fresh 2: the Securing Debian Manual", "docs_kept_fresh2.json", "keeps {lo:.0%}–{hi:.0%} of its pages per language.",
          lambda d: {"lo": min(v["keep_rate"] for k, v in res(d)["variants"]["a_no_reference"].items() if k.startswith("harden-doc/")),
                     "hi": max(v["keep_rate"] for k, v in res(d)["variants"]["a_no_reference"].items() if k.startswith("harden-doc/"))}),
    Claim("docs fresh 2: Node.js", "docs_kept_fresh2.json",
          "Node.js's API reference keeps {node_k} of {node_n}.** Duplicated-line rules remove {node_dup} pages", docs_fresh2),
    Claim("docs fresh 2: Django", "docs_kept_fresh2.json",
          "Django keeps {dj0} → {dj1} of {djn}.** The losses are the length floor ({dj_chars}), Gopher's words-with-a-letter floor "
          "on pages detected as `web` ({dj_alpha})", docs_fresh2),
    Claim("docs fresh 2: PostgreSQL, design", "docs_kept_fresh_round2.json", "PostgreSQL keeps {pg_design:.1%} of its pages", docs_round2_design),
    Claim("docs fresh 2: dirty-web cost", "dirty_web_docs_round2.json", "{bo:.1%} of the boilerplate-only pages are removed", dirty_web_round2),
    Claim("docs fresh 2: the frozen table's row", "docs_kept_fresh2.json", "`docs_kept_fresh2.json`: missed ({h0} → {h1} of {n} checks)",
          lambda d: {"h0": res(load("docs_kept_fresh2_baseline.json"))["verdict"]["holds"], "h1": res(d)["verdict"]["holds"],
                     "n": res(d)["verdict"]["of"]}, doc="docs/decisions.md"),
    Claim("docs fresh 3: the Rust book", "docs_kept_fresh3.json",
          "The Rust book** keeps {rb_k} of {rb_n}. Most of its pages", docs_fresh3),
    Claim("docs fresh 3: the Rust book's removals", "docs_kept_fresh3.json", "MinHash ({rb_mh}) and line dedup ({rb_ld}) remove them", docs_fresh3),
    Claim("docs fresh 3: rustdoc", "docs_kept_fresh3.json",
          "rustdoc's API pages** keep {std_k} of {std_n}. - The length floor removes {std_chars}, mostly redirect stubs", docs_fresh3),
    Claim("docs fresh 3: rustdoc labels", "docs_kept_fresh3.json", "The duplicated-line character share removes {std_dup} whose", docs_fresh3),
    Claim("docs fresh 3: pandas", "docs_kept_fresh3.json",
          "pandas' API reference** keeps {pr_k} of {pr_n}. - Language ID removes {pr_lid}, most of them", docs_fresh3),
    Claim("docs fresh 3: pandas floor", "docs_kept_fresh3.json", "The length floor removes {pr_chars}.", docs_fresh3),
    Claim("docs fresh 3: the rest", "docs_kept_fresh3.json", "keep {lo:.0%}–{hi:.0%}, mostly losing pages to the length floor", docs_fresh3),
    Claim("docs fresh 3: the frozen table's row", "docs_kept_fresh3.json", "`docs_kept_fresh3.json`: missed ({h0} → {h1} of {n} checks)",
          lambda d: {"h0": res(load("docs_kept_fresh3_baseline.json"))["verdict"]["holds"], "h1": res(d)["verdict"]["holds"],
                     "n": res(d)["verdict"]["of"]}, doc="docs/decisions.md"),
    Claim("docs fresh 4: GTK", "docs_kept_fresh4.json", "GTK's API reference** keeps {gtk0} → {gtk1} of {gtkn} pages.", docs_fresh4),
    Claim("docs fresh 4: libstdc++ and Erlang", "docs_kept_fresh4.json",
          "libstdc++'s API pages** keep {cpp0} → {cpp1} of {cppn}, and Erlang's library {erl0} → {erl1} of {erln}.", docs_fresh4),
    Claim("docs fresh 4: java.base", "docs_kept_fresh4.json",
          "java.base's pages are unchanged** at {java} of {javan}. The length floor removes {java_chars}, and the text-line share removes {java_dup}",
          docs_fresh4),
    Claim("docs fresh 4: dirty-web cost", "dirty_web_docs_round4.json", "{bo:.1%} of the boilerplate-only pages are still removed", dirty_web_round2),
    Claim("docs fresh 4: the frozen table's row", "docs_kept_fresh4.json",
          "`docs_kept_fresh4.json`: missed ({h0} → {h1} of {n} checks); GTK's API reference {gtk0} → {gtk1} of {gtkn} pages kept",
          lambda d: {"h0": res(load("docs_kept_fresh4_baseline.json"))["verdict"]["holds"], "h1": res(d)["verdict"]["holds"],
                     "n": res(d)["verdict"]["of"], **docs_fresh4(d)}, doc="docs/decisions.md"),
    Claim("docs rounds: word substitution kept", "quality_signal_after_docs.json",
          "Word substitution kept went from {a0:.3f} to {a1:.3f} without a reference, and from {b0:.3f} to {b1:.3f} with one.",
          after_docs_rounds),
    Claim("docs rounds: clean man pages", "quality_signal_after_docs.json", "Clean man pages went from {m0:.3f} to {m1:.3f}", after_docs_rounds),
    Claim("docs rounds: man-page parity", "manpage_parity_after_docs.json",
          "still {met} of {total} languages within 10 points. The English originals are now kept at {lo:.0%} to {hi:.0%}.", manpage_after_docs),
    Claim("docs fresh: the dirty-web cost", "dirty_web_doc_generators.json",
          "boilerplate-only pages {b0:.1%} → {b1:.1%} removed, tag clouds {t0:.1%} → {t1:.1%}", dirty_web_generators),
    Claim("word salad: provenance", "quality_signal2.json",
          "committed at {c0}, before any change to the gate", word_salad_provenance),
    Claim("word salad: commits", "quality_signal2.json",
          "The change was scored once at {c1} (`quality_signal2.json`)", word_salad_provenance),
    Claim("word salad: peer commit", "quality_signal2.json", "The peer ran at {c2} (`peer_datatrove_quality_signal2.json`)",
          word_salad_provenance),
    Claim("word salad: shuffled kept", "quality_signal2.json",
          "kept {s0:.3f} → {s1:.3f} [{w0:.2f}, {w1:.2f}]. The gate removes {g1} of the {reached} shuffled texts that reach it, against {g0} before.",
          word_salad_scored),
    Claim("word salad: clean pages the gate removed", "quality_signal2.json",
          "the gate removed {es_gate} clean page, a Spanish GIMP page (before: {foca_gate} FocaLinux passage)",
          lambda d: {**word_salad_scored(d), "es_gate": "one" if word_salad_scored(d)["es_gate"] == 1 else "?",
                     "foca_gate": "one" if word_salad_scored(d)["foca_gate"] == 1 and word_salad_scored(d)["others_gate"] == 0 else "?"}),
    Claim("word salad: German dedup", "quality_signal2.json", "French manuals ({de_dedup} in German)", word_salad_scored),
    Claim("word salad: other junk", "quality_signal2.json",
          "It removes {ocr} OCR-damaged and {sub} word-substituted texts, and no Markov-chain text",
          lambda d: {**word_salad_scored(d), "ocr": word_salad_scored(d)["ocr"] if word_salad_scored(d)["untouched"] == 0 else "?"}),
    Claim("word salad: no reference unchanged", "quality_signal2.json", "**Without a reference** nothing changes",
          lambda d: {} if word_salad_scored(d)["a_same"] else {"x": "?"}),
    Claim("word salad: peer", "peer_datatrove_quality_signal2.json",
          "The peer removes more of {n} junk kinds and keeps much less clean text on every row.** It keeps {foca_peer} of {foca_n} FocaLinux",
          lambda d: {**word_salad_scored(load("quality_signal2.json")),
                     "n": {5: "five", 4: "four", 6: "six"}[word_salad_scored(load("quality_signal2.json"))["peer_more"]]
                     if word_salad_scored(load("quality_signal2.json"))["peer_rows"] else "?"}),
    Claim("word salad: peer shuffled", "peer_datatrove_quality_signal2.json",
          "Its shuffled words are kept at {peer_shuf:.3f}, and its event listings at {peer_event:.0f}.",
          lambda d: word_salad_scored(load("quality_signal2.json"))),
    Claim("word salad: dirty web", "perplexity_gate_word_order.json",
          "the gate removes {r41} and {r7} of the {n} shuffled texts that reach it, and no clean row",
          lambda d: {**word_salad_design(d), "n": word_salad_design(d)["n"] if word_salad_design(d)["n7"] == word_salad_design(d)["n"]
                     and word_salad_design(d)["clean"] == 0 else "?"}),
    Claim("word salad: old cut on dirty web", "perplexity_gate_word_order.json",
          "The old cut removed {old} of {old_n} on the dirty-web corpus", word_salad_design),
    Claim("word salad: spent set", "quality_signal_after_word_order.json",
          "removes {ocr1} OCR-damaged and {sub1} word-substituted texts, against {ocr0} and {sub0} before, and no longer removes {es0} Spanish scripture passages",
          lambda d: {**word_salad_spent(d), "es0": word_salad_spent(d)["es0"] if word_salad_spent(d)["es1"] == 0 else "?"}),
    Claim("word salad: documentation with a reference", "docs_kept_fresh2_word_order.json",
          "{b0:,} → {b1:,} of {n:,} pages kept. Django's documentation loses {django} release-notes pages to the new gate, and {gained_w} rows gain pages",
          lambda d: {**word_salad_docs(d), "gained_w": {6: "six", 5: "five", 7: "seven"}.get(word_salad_docs(d)["gained"], "?")}
          if word_salad_docs(d)["same"] else {}),
    Claim("templates: baseline provenance", "template_pages_baseline.json",
          "(`template_pages_baseline.json`, clean tree; another process used {load:.0%} of the cores on average)",
          lambda d: {"load": d["load"]["others_cpu_share"]["mean"]} if not d["dirty"] and d["commit"].startswith("29e2f9d") else {}),
    Claim("templates: octave", "template_pages_baseline.json",
          "Octave's manual keeps {k} of its {n} sampled pages.** The length floor removes {floor} of them",
          lambda d: {"k": res(d)["variants"]["a_no_reference"]["octave-doc/en"]["kept"], "n": res(d)["variants"]["a_no_reference"]["octave-doc/en"]["read"],
                     "floor": {t["rule"]: t["pages"] for t in res(d)["variants"]["a_no_reference"]["octave-doc/en"]["top_rejections"]}["quality/min_chars"]}),
    Claim("templates: every page kept", "template_pages_baseline.json", "**Every templated page is kept, with and without a reference.**",
          lambda d: {} if all(r["keep_rate"] == 1.0 for v in res(d)["variants"].values() for k, r in v.items() if k.startswith("template/")) else {"x": 1}),
    Claim("templates: the frozen table's row", "template_pages_baseline.json",
          "not scored: no change designed; the baseline holds {h} of {n} checks",
          lambda d: {"h": res(d)["verdict"]["holds"], "n": res(d)["verdict"]["of"]}, doc="docs/decisions.md"),
    Claim("nonwords: freeze", "quality_signal3.json", "`benchmarks/frozen/quality_signal3.json` was committed at {c0}, before", nonword_round),
    Claim("nonwords: scored", "quality_signal3.json", "The change was scored at {c1} (`quality_signal3.json`, clean tree, quiet machine)",
          lambda d: {**nonword_round(d)} if not d["dirty"] and d["load"]["others_cpu_share"]["mean"] < 0.01 else {}),
    Claim("nonwords: null", "quality_signal3.json", "**The result: nothing changed, {h0} → {h1} of {n} checks.**", nonword_round),
    Claim("nonwords: design", "design_nonword_cut.json",
          "sits above the largest of {docs:,} clean design texts (`design_nonword_cut.json`: median {med:.3f}, largest {max:.3f}, the 1909 Spanish Bible",
          lambda d: nonword_round(load("quality_signal3.json"))),
    Claim("nonwords: cost", "word_order_cost.json", "The rule costs {us:.0f} µs per document, {r:.2f}× the perplexity",
          lambda d: {"us": res(d)["us_per_doc_median"]["nonword_frac"], "r": res(d)["nonword_over_perplexity"]}),
    Claim("nonwords: the frozen table's row", "quality_signal3.json",
          "`quality_signal3.json`: a null result ({h0} → {h1} of {n} checks); the non-word rule removed nothing", nonword_round, doc="docs/decisions.md"),
    Claim("nonwords 1k: freeze and score", "quality_signal4.json",
          "committed at {c0}, before the change. The rule and the seven junk kinds are those of quality_signal3", nonword_round4),
    Claim("nonwords 1k: scored", "quality_signal4.json", "The change was scored at {c1} (`quality_signal4.json`, clean tree, quiet machine)",
          lambda d: nonword_round4(d) if not d["dirty"] and d["load"]["others_cpu_share"]["mean"] < 0.01 else {}),
    Claim("nonwords 1k: baseline load", "quality_signal4_baseline.json", "so another process used about half the cores",
          lambda d: {} if 0.4 < d["load"]["others_cpu_share"]["mean"] < 0.6 else {"x": 1}),
    Claim("nonwords 1k: design", "design_nonword_cut_1k.json",
          "percentile of {docs:,} clean design texts (`design_nonword_cut_1k.json`: median {med:.3f}, 99.9th percentile {q999:.4f}, largest {max:.3f}",
          lambda d: nonword_round4(load("quality_signal4.json"))),
    Claim("nonwords 1k: kept", "quality_signal4.json",
          "With a reference, OCR damage is kept {o0:.3f} → {o1:.3f} and keyboard typos {t0:.3f} → {t1:.3f}. The rule removes {on} and {tn} of them.",
          nonword_round4),
    Claim("nonwords 1k: one clean page", "quality_signal4.json", "It removes one clean page, a Spanish help page.", nonword_round4),
    Claim("nonwords 1k: medians", "quality_signal4_nonword_values.json", "Their median is under 0.11",
          lambda d: {} if nonword_round4(load("quality_signal4.json"))["under"] else {"x": 1}),
    Claim("nonwords 1k: the frozen table's row", "quality_signal4.json",
          "`quality_signal4.json`: missed ({h0} → {h1} of {n} checks); with a reference OCR damage kept {o0:.3f} → {o1:.3f}, keyboard typos {t0:.3f} → {t1:.3f}",
          lambda d: {**nonword_round4(d), "h0": sum(c["holds"] for c in res(load("quality_signal4_baseline.json"))["verdict"]["checks"]),
                     "h1": sum(c["holds"] for c in res(d)["verdict"]["checks"]), "n": len(res(d)["verdict"]["checks"])},
          doc="docs/decisions.md"),
    Claim("nonwords 1k: documentation cost", "docs_kept_fresh_nonwords.json", "the only code between them is this rule): {b0:,} → {b1:,} of {n:,} pages kept.",
          nonword_docs),
    Claim("word salad: cost", "word_order_cost.json",
          "median of {rounds} interleaved rounds over {docs} passages of {tokens} tokens): the test costs {us:.0f} µs per document. That is {pp:.2f}× the perplexity the step already computes, and {cr:.2f}× the context ratio",
          word_order_cost),
    Claim("word salad: FocaLinux's encoding", "quality_signal2_set_check.json",
          "I found this after scoring: {bad} of the row's {n} documents, clean and junk, hold U+FFFD",
          lambda d: {"bad": res(d)["rows"]["focalinux"]["with_replacement_char"], "n": res(d)["rows"]["focalinux"]["documents"]}
          if all(r["with_replacement_char"] == 0 for k, r in res(d)["rows"].items() if k != "focalinux") else {}),
    Claim("word salad: the frozen table's row", "quality_signal2.json",
          "`quality_signal2.json`: missed ({h0} → {h1} of {n} checks); shuffled words kept {s0:.3f} → {s1:.3f} with a reference",
          lambda d: {**word_salad_scored(d), "h0": sum(c["holds"] for c in res(load("quality_signal2_baseline.json"))["verdict"]["checks"]),
                     "h1": sum(c["holds"] for c in res(d)["verdict"]["checks"]), "n": len(res(d)["verdict"]["checks"])},
          doc="docs/decisions.md"),
    Claim("manual repetition: the freeze and the score", "docs_kept_fresh5.json",
          "was committed at {c0}, before the change and before any code ran on the set", docs_fresh5),
    Claim("manual repetition: scored at", "docs_kept_fresh5.json", "The change was scored at {c1} (`docs_kept_fresh5.json`, clean tree", docs_fresh5),
    Claim("manual repetition: checks", "docs_kept_fresh5.json", "7 rows at ≥ 97% of pages, without and with a reference, so {checks} checks",
          docs_fresh5),
    Claim("manual repetition: pages kept", "docs_kept_fresh5.json",
          "Without a reference, {a0} → {a1} of {n} pages are kept; with one, {b0} → {b1}.", docs_fresh5),
    Claim("manual repetition: rows", "docs_kept_fresh5.json",
          "GIO's reference keeps {gio0} → {gio1} of {gion} pages, GLib's {glib0} → {glib1} of {glibn}, and SQLAlchemy's {sqla0} → {sqla1} of {sqlan}.",
          docs_fresh5),
    Claim("manual repetition: SDL2's floor", "docs_kept_fresh5.json", "It takes {sdl_chars} of SDL2's {sdln} pages.", docs_fresh5),
    Claim("manual repetition: title", "docs_kept_fresh5.json", "{a0} → {a1} of {n} pages kept, every row still short", docs_fresh5),
    Claim("manual repetition: the frozen table's row", "docs_kept_fresh5.json",
          "`docs_kept_fresh5.json`: missed ({h0} → {h1} of {checks} checks); {a0} → {a1} of {n} pages kept without a reference, no row losing one",
          docs_fresh5, doc="docs/decisions.md"),
    Claim("manual repetition: design pages", "design_manual_repetition.json",
          "{pages:,} manual pages of the four spent documentation sets that pass the length floor, the 99.9th percentile is {para999:.2f} "
          "for paragraphs and {line999:.2f} for text lines. {over} pages are over 0.5;", manual_repetition_design),
    Claim("manual repetition: design fn", "design_manual_repetition.json", "the same 76 impls, at {fnmax:.2f}", manual_repetition_design),
    Claim("manual repetition: design dirty web", "design_manual_repetition.json",
          "every repeated-paragraph page measures {rp:.2f} or more (four or more copies of one paragraph), and {between} document judged as a manual",
          manual_repetition_design),
    Claim("manual repetition: the code's comment", "design_manual_repetition.json",
          "percentile of {pages:,} design manual pages over the length floor (paragraphs {para999:.2f}, text lines {line999:.2f}; # {over} pages are over,",
          manual_repetition_design, doc="src/tokenmill/data/steps/quality.py"),
    Claim("manual repetition: spent sets", "docs_kept_fresh_manual_repetition.json",
          "{d0:,} → {d1:,} of {dn:,} pages kept without a reference. No row loses a page.", manual_repetition_spent),
    Claim("manual repetition: spent rows", "docs_kept_fresh_manual_repetition.json",
          "rustdoc's API pages ({std0} → {std1} of {stdn}) and java.base's ({java0} → {java1} of {javan})", manual_repetition_spent),
    Claim("manual repetition: quality signal", "quality_signal4_manual_repetition.json",
          "Clean LibreOffice help gains {qs_gain} pages without a reference; English goes from {en0:.3f} to {en1:.3f} with one.",
          manual_repetition_signal),
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
    cost = {name: g["us_per_doc"] for name, g in res(d)["gates"].items()}
    gates = {k: v for k, v in cost.items() if k not in ("quality: defaults", "garbled words")}
    ranked = sorted(gates, key=gates.__getitem__, reverse=True)
    assert ranked[:2] == ["pii: default", "classify"]  # "PII ... is the dearest gate ...; the classify gate comes next"
    assert cost["quality: defaults"] > max(gates.values())  # "costs more than any gate"
    assert 0.15 < cost["garbled words"] / cost["quality: defaults"] < 0.35  # "about a quarter of it"
    assert cost["license"] < 0.01 * min(v for k, v in cost.items() if k != "license")  # "costs nothing next to ..."
    assert cost["pii: default"] > 2 * cost["pii: six patterns"]  # "names and addresses are most of the PII step's cost"
    assert d["load"]["others_cpu_share"]["mean"] < 0.01  # "other processes used under 1% of the two cores"
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert "Other processes used under 1% of the two\ncores while it ran" in text


def test_the_dirty_web_readings_hold_for_their_results() -> None:
    """BENCHMARKS "Curation that shows in the model" and the entries it leans on: the readings put in words
    (about half, under a third, two thirds, a tenth, intervals excluding zero), checked against their files."""
    for f in ("dirty_web.json", "dirty_web_confirm.json"):
        v = res(load(f))["verdicts"]["datatrove"]
        assert abs(v["clean_kept"] - 0.5) < 0.05  # "datatrove about half"
        assert abs(v["clean_kept_by_kind"]["mojibake"] - 0.5) < 0.05  # "its filters keep about half of them"
    assert round(3 * res(load("kind_detect.json"))["manual_rules"]["web"]["removed"]) == 2  # "two thirds of real manuals"
    gap = res(load("dirty_web_model.json"))["gap"]
    for size in ("small", "large"):
        default, datatrove = gap[size]["recovered"]["default"], gap[size]["recovered"]["datatrove"]
        assert default["low"] > 0.70  # "Both lower bounds are above the 70% target"
        assert datatrove["mean"] < 0 and datatrove["low"] < 0 < datatrove["high"]  # "below raw", "intervals include zero"
        assert gap[size]["default_minus_datatrove"]["high"] < 0  # "beyond noise", "intervals excluding zero"
    assert gap["small"]["raw_minus_oracle"]["high"] > gap["large"]["raw_minus_oracle"]["low"]  # "overlapping intervals"
