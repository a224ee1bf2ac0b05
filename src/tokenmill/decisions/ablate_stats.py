"""What an ablation measured: paired differences with confidence intervals, loss-vs-compute lines,
data-efficiency multipliers and the ranking of curation steps.

Every arm trains the same seeds at every size, and a seed fixes the initialization and the
batch order, so arm − reference is taken seed by seed (a paired design: the seed's own effect
cancels) and its mean gets a Student-t interval over the seeds. Bits-per-byte over all slices
is the byte-weighted mean of the slices' (the total NLL over the total bytes).

A line per arm: log bpb = a + b·log C through the per-size means, C the training FLOPs
(`scaling.flops.flops_per_token` × tokens, the formula of every tokenmill FLOP count). The
data-efficiency multiplier of an arm is C*/C, where the arm's line reaches the reference's bpb
at the largest size at C*: how much more compute the arm needs for the reference's quality
(the same multiple of tokens when the sizes keep tokens per parameter fixed). It is marked
extrapolated when C* lies outside the measured compute range.

Power. With n paired seeds whose differences spread by sd, the smallest true Δ the design finds
(two-sided, at the confidence level, with probability `POWER`) is (t_{(1+c)/2} + t_{power}) · sd/√n
on n − 1 degrees of freedom; it is stated per size from the measured paired spread. A multiplier
or a ranking place is a claim about a difference, so it is given only where the paired interval
at the largest size excludes zero; elsewhere the arm is "not resolved at this size".
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from scipy import stats as scistats

ALL = "all"  # the byte-weighted slice over every evaluation slice
POWER = 0.8  # the chance of finding a true difference of the stated detectable size
UNRESOLVED = "not resolved at this size"


def overall(slices: dict[str, dict[str, float]]) -> float:
    """Bits-per-byte over every slice: Σ bpb·bytes / Σ bytes (= Σ NLL / (ln 2 · Σ bytes))."""
    total = sum(s["bytes"] for s in slices.values())
    return sum(s["bpb"] * s["bytes"] for s in slices.values()) / total


def paired_ci(deltas: list[float], confidence: float) -> dict[str, Any]:
    """Mean of the per-seed differences and its two-sided Student-t interval."""
    n = len(deltas)
    mean = statistics.fmean(deltas) if deltas else math.nan
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n, "per_seed": deltas}
    sd = statistics.stdev(deltas)
    half = scistats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return {
        "mean": mean,
        "low": mean - half,
        "high": mean + half,
        "n": n,
        "per_seed": deltas,
        "sd": sd,
        "detectable": detectable_delta(sd, n, confidence),
    }


def detectable_delta(sd: float, n: int, confidence: float, power: float = POWER) -> float | None:
    """The smallest true paired difference that n seeds with this spread detect with `power`
    (two-sided at 1 − confidence): (t_{(1+c)/2} + t_{power}) · sd / √n, n − 1 degrees of freedom."""
    if n < 2:
        return None
    return (scistats.t.ppf(0.5 + confidence / 2, n - 1) + scistats.t.ppf(power, n - 1)) * sd / math.sqrt(n)


def design_power(deltas: dict[str, Any], sizes: list[str], confidence: float) -> dict[str, Any]:
    """Per size, what the design could see: seeds, the median paired spread over the arms (bpb
    over all slices) and the smallest Δ it detects with that spread."""
    out = {}
    for size in sizes:
        cis = [d["delta"][ALL][size] for d in deltas.values() if size in d["delta"].get(ALL, {})]
        sds = [ci["sd"] for ci in cis if ci.get("sd") is not None]
        if sds:
            n = min(ci["n"] for ci in cis)
            sd = statistics.median(sds)
            out[size] = {"seeds": n, "paired_sd": sd, "detectable_bpb": detectable_delta(sd, n, confidence), "power": POWER}
    return out


def verdict(ci: dict[str, Any], better: str = "lower") -> str:
    """Where the interval lies: 'better' / 'worse' than the reference, or 'within noise'. For
    bpb lower is better; for accuracy higher."""
    if ci["low"] is None or ci["low"] <= 0 <= ci["high"]:
        return "within noise"
    below = ci["high"] < 0
    return "better" if below == (better == "lower") else "worse"


def metric_of(run: dict[str, Any], metric: str) -> float | None:
    """A run's figure: a slice's bpb, 'all', or 'task:<name>' accuracy."""
    if metric == ALL:
        return overall(run["slices"])
    if metric.startswith("task:"):
        return run["tasks"].get(metric[5:])
    return run["slices"][metric]["bpb"] if metric in run["slices"] else None


def paired(runs: list[dict[str, Any]], arm: str, ref: str, size: str, metric: str) -> list[float]:
    """Per seed both arms ran at `size`: arm − reference."""
    theirs = {r["seed"]: metric_of(r, metric) for r in runs if r["arm"] == ref and r["size"] == size}
    out = []
    for r in sorted((r for r in runs if r["arm"] == arm and r["size"] == size), key=lambda r: r["seed"]):
        ours, base = metric_of(r, metric), theirs.get(r["seed"])
        if ours is not None and base is not None:
            out.append(ours - base)
    return out


def fit_line(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """log L = a + b·log C by least squares over (C, L) points (None: fewer than 2 computes)."""
    if len({c for c, _ in points}) < 2:
        return None
    xs, ys = [math.log(c) for c, _ in points], [math.log(v) for _, v in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return {"a": my - b * mx, "b": b}


def multiplier(line: dict[str, float] | None, target: float, compute: float, lo: float, hi: float) -> dict[str, Any]:
    """C*/compute where the line reaches `target`; None when it never does (flat or rising)."""
    if line is None or line["b"] >= 0:
        return {"value": None, "extrapolated": None, "why": "its loss does not fall with compute"}
    c_star = math.exp((math.log(target) - line["a"]) / line["b"])
    return {"value": c_star / compute, "compute": c_star, "extrapolated": not lo <= c_star <= hi}


def trend(per_size: dict[str, list[float]], sizes: list[str], confidence: float) -> dict[str, Any]:
    """Does the gap hold, grow or shrink from the smallest to the largest size? The per-seed
    change of the paired Δ, with its interval: 'holds' (a parallel shift) when it contains 0."""
    small, large = per_size[sizes[0]], per_size[sizes[-1]]
    n = min(len(small), len(large))
    change = paired_ci([large[i] - small[i] for i in range(n)], confidence)
    if change["low"] is None or change["low"] <= 0 <= change["high"]:
        word = "holds"
    else:
        mean_small = statistics.fmean(small[:n])
        word = "grows" if abs(statistics.fmean(large[:n])) > abs(mean_small) else "shrinks"
    return {"change": change, "trend": word}


def summarize(
    runs: list[dict[str, Any]],
    arms: dict[str, dict[str, Any]],
    sizes: list[dict[str, Any]],
    reference: str,
    baseline: str | None,
    confidence: float,
) -> dict[str, Any]:
    """Everything ablate.json reports, from the finished runs (arm, size, seed, slices, tasks,
    flops) and each arm's training tokens and steps."""
    size_names = [s["name"] for s in sizes if any(r["size"] == s["name"] for r in runs)]  # sizes run so far
    slices = sorted({s for r in runs for s in r["slices"]})
    tasks = sorted({t for r in runs for t in r["tasks"]})
    metrics = [ALL, *slices, *(f"task:{t}" for t in tasks)]
    means: dict[str, dict[str, dict[str, float]]] = {}
    for arm in arms:
        means[arm] = {}
        for size in size_names:
            mine = [r for r in runs if r["arm"] == arm and r["size"] == size]
            means[arm][size] = {
                m: statistics.fmean(v for r in mine if (v := metric_of(r, m)) is not None)
                for m in metrics
                if any(metric_of(r, m) is not None for r in mine)
            }
    flops = {
        s: statistics.fmean(r["flops"] for r in runs if r["size"] == s) for s in size_names if any(r["size"] == s for r in runs)
    }
    lines = {arm: fit_line([(flops[s], means[arm][s][ALL]) for s in size_names if ALL in means[arm].get(s, {})]) for arm in arms}
    lo, hi = min(flops.values()), max(flops.values())
    largest = size_names[-1]
    target = means[reference].get(largest, {}).get(ALL)
    deltas: dict[str, Any] = {}
    for arm in arms:
        if arm == reference:
            continue
        per_metric, gap = {}, None
        for m in metrics:
            per_size = {s: paired(runs, arm, reference, s, m) for s in size_names}
            per_metric[m] = {
                s: {**(ci := paired_ci(v, confidence)), "verdict": verdict(ci, "higher" if m.startswith("task:") else "lower")}
                for s, v in per_size.items()
                if v
            }
            if m == ALL and all(per_size[s] for s in (size_names[0], largest)):
                gap = trend(per_size, size_names, confidence)
        line = lines[arm]
        mult = (
            multiplier(line, target, flops[largest], lo, hi)
            if target is not None
            else {"value": None, "extrapolated": None, "why": "the reference has no run at the largest size"}
        )
        at_largest = per_metric.get(ALL, {}).get(largest)
        if mult["value"] is not None and (at_largest is None or at_largest["verdict"] == "within noise"):
            # the point estimate sits inside the noise: kept for the record, not printed as a result
            mult = {"value": None, "extrapolated": None, "why": UNRESOLVED, "point": mult["value"]}
        deltas[arm] = {"delta": per_metric, "trend": gap, "multiplier": mult, "slope": line["b"] if line else None}
    return {
        "slices": slices,
        "tasks": tasks,
        "metrics": metrics,
        "flops": flops,
        "means": means,
        "lines": lines,
        "deltas": deltas,
        "power": design_power(deltas, size_names, confidence),
        "ranking": rank(arms, deltas, reference, largest),
        "headline": headline(deltas, baseline, largest),
    }


def rank(arms: dict[str, dict[str, Any]], deltas: dict[str, Any], reference: str, largest: str) -> list[dict[str, Any]]:
    """Arms that turn steps off, ranked by what the step buys at the largest size: the bpb the
    arm loses without it (Δ > 0: the step helps), beside the share of tokens the step removes
    from the arm's data (1 − reference tokens / arm tokens)."""
    ref_tokens = arms[reference]["train_tokens"]
    rows = []
    for arm, info in arms.items():
        if arm == reference or not info["without"] or largest not in deltas[arm]["delta"][ALL]:
            continue
        ci = deltas[arm]["delta"][ALL][largest]
        rows.append(
            {
                "arm": arm,
                "steps": info["without"],
                "contribution_bpb": ci["mean"],
                "low": ci["low"],
                "high": ci["high"],
                "verdict": {"worse": "helps", "better": "hurts"}.get(ci["verdict"], UNRESOLVED),
                "tokens_removed_share": 1 - ref_tokens / info["train_tokens"] if info["train_tokens"] else None,
            }
        )
    # a place in the ranking is a claim: resolved steps first, by what they buy; the rest after, unranked
    return sorted(rows, key=lambda r: (r["verdict"] == UNRESOLVED, -r["contribution_bpb"]))


def headline(deltas: dict[str, Any], baseline: str | None, largest: str) -> dict[str, Any] | None:
    """The baseline against the reference at the largest size, and its multiplier."""
    if baseline is None or baseline not in deltas:
        return None
    d = deltas[baseline]
    return {
        "arm": baseline,
        "size": largest,
        "delta_all": d["delta"][ALL].get(largest),
        "per_size": d["delta"][ALL],
        "trend": d["trend"],
        "multiplier": d["multiplier"],
    }
