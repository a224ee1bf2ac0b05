"""The tables of BENCHMARKS.md entries whose benchmark writes one results file, rendered from it
(benchmarks/tables.py registers each between markers; the reading around a table stays
hand-written). Each function takes the loaded results file(s) and returns the table's lines.
"""

from __future__ import annotations

import statistics

from typing import Any

MIB = 2 ** 20


def pipeline_bubble(r: dict[str, Any]) -> list[str]:
    """bench_pipeline_bubble.py: per schedule and micro-batch count, the measured idle per stage
    beside the equal-stage formula and the imbalance-aware prediction."""
    lines = ["| schedule | micro-batches | formula (p−1)/(m+p−1) | idle stage 0 | idle stage 1 "
             "| r = stage 0 / stage 1 compute | stage 1 predicted r/(m+r) | s/step |",
             "|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        m = row["micro_batches"]
        idle = row["idle_by_stage"]
        lines.append(f"| {row['schedule'].upper()} | {m} × {16 // m} rows | {row['formula']:.3f} "
                     f"| {idle[0]:.3f} | {idle[1]:.3f} | {row['stage_time_ratio']:.2f} "
                     f"| {row['slower_stage_predicted']:.3f} | {row['s_per_step']:.3f} |")
    return lines


def eval_cost(r: dict[str, Any]) -> list[str]:
    """bench_eval_cost.py: the eval stage's seconds before and after, per interleaved run."""
    runs = len(r["seconds"]["baseline"])
    lines = ["| | " + " | ".join(f"run {i + 1}" for i in range(runs)) + " | **median** |",
             "|---|" + "---|" * (runs + 1)]
    for key, label in (("baseline", "before"), ("current", "after")):
        secs = " | ".join(f"{s:.1f} s" for s in r["seconds"][key])
        extra = f" ({r['speedup']:.2f}× faster)" if key == "current" else ""
        lines.append(f"| {label} | {secs} | **{r['median'][key]:.1f} s**{extra} |")
    return lines


def _thousands(x: float) -> str:
    return f"{x:,.0f}"


def critical_batch_seeds(r: dict[str, Any]) -> list[str]:
    """bench_critical_batch.py --only seeds: B_simple per seed for the demo and a scaling run."""
    rows = [("seeds_demo", "the demo's training (d256 × 4, 300 steps, its curriculum)", "the demo store", "(2 × 8 × 256)"),
            ("seeds_scaling", "a scaling-size run (d128 × 4, 3 M tokens, 367 steps)",
             "books / code / docs (20 M tokens)", "(4 × 8 × 256)")]
    n = max(len(r[k]["runs"]) for k, *_ in rows)
    lines = ["| run | data | batch (tokens) | " + " | ".join(f"seed {i + 1}" for i in range(n))
             + " | **mean ± std** | max / min |", "|---|---|---|" + "---|" * (n + 2)]
    for key, label, data, shape in rows:
        s = r[key]
        seeds = " | ".join(_thousands(x["b_simple"]) for x in s["runs"])
        lines.append(f"| {label} | {data} | {s['runs'][0]['batch_tokens']:,} {shape} | {seeds} | "
                     f"**{_thousands(s['mean'])} ± {_thousands(s['stdev'])}** ({s['relative_stdev']:.1%}) | "
                     f"{s['max_over_min']:.2f} |")
    return lines


def critical_batch_sweep(r: dict[str, Any]) -> list[str]:
    """bench_critical_batch.py --only sweep: the best run per batch and the fitted law."""
    best, fit = r["sweep"]["best"], r["sweep"]["fit"]
    target = r["sweep_settings"]["target"]
    law = [fit["s_min"] * (1 + fit["b_crit"] / b["batch"]) for b in best]
    return ["| batch B (tokens) | " + " | ".join(f"{b['batch']:,}" for b in best) + " |",
            "|---|" + "---|" * len(best),
            "| best LR | " + " | ".join(f"{b['lr']:.1e}".replace("e-0", "e-") for b in best) + " |",
            f"| steps S to loss {target} | " + " | ".join(f"{b['steps']:,}" for b in best) + " |",
            "| tokens E = B·S | " + " | ".join(f"{b['tokens'] / 1e6:.2f} M" for b in best) + " |",
            "| law S_min(1 + B_crit/B) | " + " | ".join(f"{s:,.0f}" for s in law) + " |"]


def parallel_memory(r: dict[str, Any]) -> list[str]:
    """bench_parallel_memory.py: each rank's measured peak beside scaling/rank_memory.py's estimate."""
    lines = ["| dtype | layout | rank (stage) | measured MiB | estimate MiB | estimate / measured |",
             "|---|---|---|---|---|---|"]
    for row in _result(r)["rows"]:
        lines.append(f"| {row['dtype']} | {row['layout']} | {row['rank']} ({row['stage']}) | "
                     f"{row['measured_peak'] / MIB:.1f} | {row['estimate']['peak'] / MIB:.1f} | "
                     f"{row['estimate_over_measured']:.3f} |")
    return lines


def model_collapse(r: dict[str, Any]) -> list[str]:
    """bench_model_collapse.py: per arm and generation, real-text bpb and the samples' statistics
    (generation 0 once; each arm's last generation in bold)."""
    lines = ["| arm | gen | synthetic share (guard) | real bpb | Δ vs gen 0 | distinct-1 / 2 / 3 / 4 of samples "
             "| vocab used | entropy (bits) | tail mass |", "|---|---|---|---|---|---|---|---|---|"]
    base = r["arms"]["replace"][0]["real_bpb"]["real"]

    def row(arm: str, g: dict[str, Any], last: bool) -> str:
        s = g["samples"]
        distinct = f"{s['distinct_1']:.4f} / {s['distinct_2']:.3f} / {s['distinct_3']:.3f} / {s['distinct_4']:.3f}"
        bpb = g["real_bpb"]["real"]
        if g["guard"] is None:
            return (f"| — | 0 | 0 | **{bpb:.4f}** | | {distinct} | {s['vocab_used']} | {s['entropy_bits']:.3f} "
                    f"| {s['tail_mass']:.3f} |")
        refused = g["refused_by_default_limits"] or ""
        why = (" (refused by default)" if "would draw" in refused  # the share: every generation of it
               else " (generation refused by default)" if refused else "")  # the generation alone
        b = "**" if last else ""
        return (f"| {arm} | {g['generation']} | {g['guard']['share']}{why} | {b}{bpb:.4f}{b} | {b}{bpb - base:+.3f}{b} "
                f"| {distinct} | {s['vocab_used']} | {s['entropy_bits']:.3f} | {s['tail_mass']:.3f} |")

    lines.append(row("—", r["arms"]["replace"][0], False))
    for arm, gens in r["arms"].items():
        later = [g for g in gens if g["generation"] > 0]
        lines += [row(arm, g, g is later[-1]) for g in later]
    return lines


def lr_transfer(r: dict[str, Any]) -> list[str]:
    """tokenmill scaling lr-transfer: final held-out loss per parameterization, width and LR (the
    grid optimum in bold); SP at the base width is μP's run (the same model), so it is shown once."""
    loss: dict[tuple[str, int], dict[float, float]] = {}
    for run in r["runs"]:
        loss.setdefault((run["param"], run["width"]), {})[run["lr"]] = run["loss"]
    lrs = sorted({lr for by_lr in loss.values() for lr in by_lr})
    base = min(w for _, w in loss)
    lines = ["| parameterization, width | " + " | ".join(f"{lr:.3g}" for lr in lrs) + " |", "|---|" + "---|" * len(lrs)]
    for (param, width), by_lr in sorted(loss.items(), key=lambda kv: (kv[0][0] != "mup", kv[0][1])):
        if param == "sp" and width == base:
            continue
        label = "μP" if param == "mup" else "SP"
        label += f", d{width}" + (" (= SP at the base width)" if param == "mup" and width == base else "")
        best = min(by_lr, key=by_lr.__getitem__)
        cells = [(f"**{by_lr[lr]:.3f}**" if lr == best else f"{by_lr[lr]:.3f}") if lr in by_lr else "—" for lr in lrs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _signed(x: float, digits: int) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def _arm_label(test: str, arm: str, phases: list[dict[str, Any]], source: str) -> str:
    """How an arm of `tokenmill source-value` mixed its data, in words."""
    last = phases[-1]
    if test == "anneal":
        share = f"last {last['fraction']:.0%}"
        if arm == "without":
            return f"without: {share} of steps LR → 0 on the same mix"
        return f"with: {share} on a mix of {last['weights'].get(source, 0):.0%} {source}"
    w = phases[0]["weights"]
    if arm == "without":
        return "without (" + ", ".join(f"{b} {x:.3f}" for b, x in w.items()) + ")"
    return f"with ({source} {w[source]:.2f}, the others × {1 - w[source]:.1f})"


def source_value_runs(r: dict[str, Any]) -> list[str]:
    """tokenmill source-value: held-out bpb per bucket of every run, by test, arm and seed."""
    tests = r["tests"]
    first = next(iter(tests.values()))
    seeds = [run["seed"] for run in first["runs"]["without"]]
    buckets = list(first["runs"]["with"][0]["bpb"])
    lines = ["| test | arm | " + " | ".join(f"seed {s}: {' / '.join(buckets)}" for s in seeds) + " |",
             "|---|---|" + "---|" * len(seeds)]
    for test, t in tests.items():
        for arm in ("without", "with"):
            cells = [" / ".join(f"{run['bpb'][b]:.4f}" for b in buckets) for run in t["runs"][arm]]
            lines.append(f"| {test} | {_arm_label(test, arm, t['phases'][arm], r['source'])} | " + " | ".join(cells) + " |")
    return lines


def source_value_verdicts(r: dict[str, Any]) -> list[str]:
    """tokenmill source-value: the deltas with the source, the noise band over seeds, the verdict."""
    source = r["source"]
    others = [b for b in next(iter(r["tests"].values()))["delta_bpb"] if b != source]
    lines = ["| test | " + " | ".join(f"Δ {b}" for b in others) + f" | Δ {source} (its own slice) | Δ other slices, per seed "
             "| noise band (2σ over seeds) | verdict |", "|---|" + "---|" * (len(others) + 4)]
    for test, t in r["tests"].items():
        lines.append(f"| {test} | " + " | ".join(_signed(t["delta_bpb"][b], 4) for b in others)
                     + f" | {_signed(t['source_slice'], 3)} | " + ", ".join(_signed(x, 4) for x in t["per_seed"])
                     + f" | ±{t['noise_band']:.4f} | **{t['verdict']}** |")
    return lines


TRAIN_SPEED_LABELS = {"tokenmill bf16 autocast (default)": "tokenmill bf16 autocast (the default here)",
                      "tokenmill bf16 + torch.compile": "tokenmill bf16 + `torch.compile` (the default from 1000 steps)"}


def train_speed(r: dict[str, Any]) -> list[str]:
    """bench_train_speed.py: s/step, tokens/s, speed-up over tokenmill fp32 eager and MFU against
    the calibrated peak of each run's dtype; the default recipe's row in bold."""
    lines = ["| run | s/step | tokens/s | × tokenmill fp32 | MFU (peak of its dtype) |", "|---|---|---|---|---|"]
    for row in r["rows"]:
        b = "**" if "(default)" in row["run"] else ""
        label = TRAIN_SPEED_LABELS.get(row["run"], row["run"])
        lines.append(f"| {b}{label}{b} | {b}{row['s_per_step']:.3f}{b} | {b}{row['tokens_per_s']:,.0f}{b} | "
                     f"{b}{row['speedup_vs_fp32_eager']:.2f}×{b} | {row['mfu']:.1%} |")
    return lines


def compile_speed(r: dict[str, Any]) -> list[str]:
    """bench_compile.py: eager vs compiled (cold and warm inductor cache) per dtype, with the
    compile overhead of the first step and the steps it takes to pay it back."""
    short = {"float32": "fp32", "bfloat16": "bf16"}
    lines = ["| dtype | run | s/step | × eager | compile overhead (s) | break-even steps |", "|---|---|---|---|---|---|"]
    for dtype, runs in r["summary"].items():
        for name, x in runs.items():
            overhead = "" if x["break_even_steps"] is None else f"{x['first_step_overhead_s']:.1f}"
            even = "" if x["break_even_steps"] is None else f"{x['break_even_steps']:.0f}"
            lines.append(f"| {short.get(dtype, dtype)} | {name} | {x['s_per_step']:.3f} | {x['speedup']:.2f}× | {overhead} | {even} |"
                         .replace("|  |", "| |").replace("|  |", "| |"))
    return lines


def substring_dedup(r: dict[str, Any]) -> list[str]:
    """bench_substring_dedup.py: the reference logic's one suffix array against tokenmill's
    substring_dedup at 1, 4 and 16 shards (byte units, k = 100 bytes)."""
    ref = r["reference"]
    lines = ["| run | time | peak RSS | bytes in repeated 100-byte spans, all copies | identical to the reference |",
             "|---|---|---|---|---|",
             f"| reference logic, one suffix array over all bytes | {ref['seconds']:.1f} s | {ref['peak_rss_mb']:.0f} MB | "
             f"{ref['marked_bytes']:,} ({ref['marked_bytes'] / ref['bytes']:.2%}) | — |"]
    for i, run in enumerate(r["ours_byte"]):
        units = run["units"] / run["shards"] / 1e6
        same = ("yes" if run["differs_from_reference_bytes"] == 0 else
                f"yes, but for {run['differs_from_reference_bytes']:,} bytes (below)" if i == 0 else "same")
        lines.append(f"| tokenmill, {run['shards']} shard{'s' if run['shards'] > 1 else ''} ({units:.1f} M units"
                     f"{' each' if run['shards'] > 1 else ''}) | {run['seconds']:.1f} s | {run['peak_rss_mb']:.0f} MB | "
                     f"{run['all_copies_units']:,} | {same} |")
    return lines


def semantic_contamination(r: dict[str, Any]) -> list[str]:
    """bench_semantic_contamination.py: the 13-gram rule and the semantic check on the test half
    (the items the threshold was not chosen on), at the threshold chosen on the tuning half and at
    the shipped default, for planted paraphrases and verbatim copies."""
    th = r["threshold"]
    lines = ["| planted as | detector | precision | recall | F1 | AUC |", "|---|---|---|---|---|---|"]
    for name, t in th["test"].items():
        label = "paraphrase" if name == "paraphrased" else name
        n = t["ngram13"]
        lines.append(f"| {label} | 13-gram rule | {n['precision']:.3f} | {n['recall']:.3f} | {n['f1']:.3f} | |")
        shown = [("chosen", f"semantic, threshold {th['chosen']:.2f} (chosen on the tuning half)")]
        if th["default"] != th["chosen"]:
            shown.append(("default", f"semantic, threshold {th['default']:.2f} (the default when this ran)"))
        for key, desc in shown:
            x = t[key]
            lines.append(f"| {label} | {desc} | {x['precision']:.3f} | {x['recall']:.3f} | {x['f1']:.3f} | {t['auc']:.3f} |")
    return lines


def semantic_contamination_all(r: dict[str, Any]) -> list[str]:
    """bench_semantic_contamination.py over every item (both halves): the 13-gram rule and the
    semantic check at each threshold of the grid — the curve the choice was made from."""
    lines = ["| planted as | detector | precision | recall | F1 |", "|---|---|---|---|---|"]
    for key, label in (("paraphrased", "paraphrase"), ("verbatim_control", "verbatim")):
        res = r[key]
        n = res["ngram13"]
        lines.append(f"| {label} | 13-gram rule | {n['precision']:.3f} | {n['recall']:.3f} | {n['f1']:.3f} |")
        for x in res["semantic"]:
            lines.append(f"| {label} | semantic, threshold {x['threshold']:.2f} | {x['precision']:.3f} | "
                         f"{x['recall']:.3f} | {x['f1']:.3f} |")
    return lines


def _result(r: dict[str, Any]) -> dict[str, Any]:
    """A record.py file holds the script's result under "result"; an older file is the result."""
    return r.get("result", r)


def vs_nanogpt_speed(r: dict[str, Any]) -> list[str]:
    """bench_vs_nanogpt.py: median s/step of the interleaved speed runs, tokens/s, ratio to
    nanoGPT and MFU, one FLOP formula (6·matmul params + 12·L·d·T) for both sides."""
    res = _result(r)
    lines = ["| run | s/step | tokens/s | × nanoGPT | MFU (peak of its dtype) | FLOP per token |", "|---|---|---|---|---|---|"]
    for row in res["rows"]:
        lines.append(f"| {row['run']} | {row['s_per_step']:.3f} | {row['tokens_per_s']:,.0f} | "
                     f"{row['speedup_vs_nanogpt']:.2f}× | {row['mfu']:.1%} | {row['flops_per_token'] / 1e6:.1f} M |")
    return lines


def vs_nanogpt_tuning(r: dict[str, Any]) -> list[str]:
    """bench_vs_nanogpt.py: each side's LR grid on the tuning seed (fp32 both), the chosen LR in bold."""
    q = _result(r)["quality"]
    lines = [f"| side (seed {q['tune_seed']}, fp32) | peak LR | steps | seconds | held-out bpb |", "|---|---|---|---|---|"]
    for side, runs in q["tuning"].items():
        for lr, run in runs.items():
            b = "**" if float(lr) == q["chosen_lr"][side] else ""
            lines.append(f"| {side} | {b}{float(lr):.3g}{b} | {run['steps']} | {run['seconds']:.1f} | {b}{run['bpb']:.4f}{b} |")
    return lines


def vs_nanogpt_quality(r: dict[str, Any]) -> list[str]:
    """bench_vs_nanogpt.py: the chosen LRs on the report seeds: each arm's bpb, steps and seconds
    per seed, the per-seed ratio to nanoGPT, and mean ± sd over the seeds."""
    q = _result(r)["quality"]
    seeds = [str(s) for s in q["report_seeds"]]
    arms = list(q["report"][seeds[0]])
    head = "| arm | peak LR | " + " | ".join(f"seed {s}: bpb (steps, s)" for s in seeds) + " | **mean ± sd bpb** | ratio to nanoGPT, mean ± sd |"
    lines = [head, "|---|---|" + "---|" * (len(seeds) + 2)]
    for arm in arms:
        cells = [f"{q['report'][s][arm]['bpb']:.4f} ({q['report'][s][arm]['steps']}, {q['report'][s][arm]['seconds']:.0f})"
                 for s in seeds]
        mean = q["summary"][arm]
        ratio = q["summary"].get(f"ratio {arm}")
        rtxt = f"**{ratio['mean']:.3f} ± {ratio['sd']:.3f}**" if ratio else "1"
        lines.append(f"| {arm} | {q['report'][seeds[0]][arm]['lr']:g} | " + " | ".join(cells)
                     + f" | {mean['mean']:.4f} ± {mean['sd']:.4f} | {rtxt} |")
    return lines


MIXTURE_LABELS = {"uniform": "uniform", "proportional": "token-proportional", "doremi": "DoReMi",
                  "regmix": "data mixing law (≤ 4 epochs)"}


def mixture_compare(c: dict[str, Any], uncapped: dict[str, Any] | None = None) -> list[str]:
    """mixture optimize's compare.json: every candidate's weights (books / code / docs), the epochs
    of its most repeated bucket, and mean held-out bpb per seed; `uncapped`: the first run's
    comparison, whose mixing law had no epoch bound (its row only)."""
    rows = {MIXTURE_LABELS.get(n, n): v for n, v in c.items()}
    if uncapped is not None:
        rows["data mixing law, unbounded (first run)"] = uncapped["regmix"]
    seeds = [run["seed"] for run in next(iter(rows.values()))["runs"]]
    buckets = " / ".join(next(iter(rows.values()))["weights"])
    lines = [f"| mixture | {buckets} weights | most epochs | " + " | ".join(f"seed {s}" for s in seeds)
             + " | **mean ± std** | paired Δ vs uniform | paired Δ vs proportional |",
             "|---|---|---|" + "---|" * (len(seeds) + 3)]
    for name, row in rows.items():
        epochs = row.get("epochs")
        most = f"{max(epochs.values()):.2f} ({max(epochs, key=epochs.get)})" if epochs else "—"
        by_seed = {run["seed"]: run["mean_bpb"] for run in row["runs"]}
        paired = row.get("paired", {})
        deltas = [f"{paired[o]['mean']:+.3f} ± {paired[o]['std']:.3f}" if o in paired and paired[o]["std"] is not None
                  else "" for o in ("uniform", "proportional")]
        std = f" ± {row['std_bpb']:.4f}" if row.get("std_bpb") is not None else ""
        lines.append(f"| {name} | {' / '.join(f'{w:.3f}' for w in row['weights'].values())} | {most} | "
                     + " | ".join(f"{by_seed[s]:.4f}" if s in by_seed else "—" for s in seeds)
                     + f" | {row['mean_bpb']:.4f}{std} | {deltas[0]} | {deltas[1]} |")
    return lines


def mixture_confirm(r: dict[str, Any]) -> list[str]:
    """bench_mixture_confirm.py: the chosen mixture and the baselines on the fresh seeds, with the
    paired Δ of the chosen one per seed (negative: the chosen mixture better)."""
    res = _result(r)
    seeds = res["seeds"]
    lines = ["| mixture (fresh seeds) | " + " | ".join(f"seed {s}" for s in seeds) + " | **mean** |",
             "|---|" + "---|" * (len(seeds) + 1)]
    for name, rows in res["runs"].items():
        by_seed = {row["seed"]: row["mean_bpb"] for row in rows}
        lines.append(f"| {name} | " + " | ".join(f"{by_seed[s]:.4f}" for s in seeds) + f" | {res['mean_bpb'][name]:.4f} |")
    for other, d in res["paired"].items():
        lines.append(f"| Δ {res['chosen']} − {other} | " + " | ".join(f"{x:+.4f}" for x in d["per_seed"])
                     + f" | **{d['mean']:+.4f} ± {d['std']:.4f}** |")
    return lines


def tokenize_stage(*files: dict[str, Any]) -> list[str]:
    """bench_tokenize.py runs: per corpus / variant and core count, the whole stage against bare
    HF encode_batch on the same cores, the held-out check's share, and the id mismatches."""
    lines = ["| corpus | held-out check | cores | tokenmill stage | HF `encode_batch` | **ratio** (target ≥ 3× on 2 cores) "
             "| of which held-out check | mismatched docs |", "|---|---|---|---|---|---|---|---|"]
    for r in files:
        res = _result(r)
        corpus = f"{res['docs']:,} docs, {res['bytes'] / 1e6:.1f} MB, {res['parts']} parts"
        for cores, v in res["by_cores"].items():
            check = "on" if res["heldout_check"] else "off"
            share = f"{v['heldout_check_s_median']:.2f} s of {v['tokenmill_s']:.2f} s" if res["heldout_check"] else "—"
            lines.append(f"| {corpus} | {check} | {cores} | {v['tokenmill_tokens_per_s'] / 1e6:.2f} M tokens/s "
                         f"({v['tokenmill_MB_per_s']:.1f} MB/s) | {v['hf_tokens_per_s'] / 1e6:.2f} M tokens/s "
                         f"({v['hf_MB_per_s']:.1f} MB/s) | **{v['speedup']:.2f}×** | {share} | {v['mismatched_docs']} |")
    return lines


def scaling_holdout(fit: dict[str, Any], sweep: dict[str, Any]) -> list[str]:
    """`tokenmill scaling fit`'s held-out runs: the registered prediction with its bootstrap
    interval against the loss the run reached, and the run's seconds from the sweep's results."""
    seconds = {r["name"]: r.get("seconds") for r in sweep["runs"]}
    lines = ["| held-out run (never seen by the fit) | N | D | predicted (5–95% bootstrap) | actual | error |",
             "|---|---|---|---|---|---|"]
    for h in fit["holdout"]:
        lo, hi = h["interval"]
        secs = f", {seconds[h['name']]:.0f} s" if seconds.get(h["name"]) else ""
        mantissa, exponent = f"{h['flops']:.1e}".split("e")
        lines.append(f"| {h['name'].split('-', 1)[1]}, {float(mantissa):g}e{int(exponent)} FLOPs{secs} | {h['params']:,} | "
                     f"{h['tokens'] / 1e6:.3g} M | {h['predicted']:.4f} [{lo:.3f}, {hi:.3f}] | {h['actual']:.4f} | "
                     f"**{h['relative_error']:+.2%}** |")
    return lines


def loader(r: dict[str, Any]) -> list[str]:
    """bench_loader.py: each packing mode's on-demand tokens/s against the trainer's consumption
    (the run's median train_step tokens/s), and what a consumer still waits with prefetch on."""
    res = _result(r)
    names = {"packed+doc_masking": "packed + document masking (default)", "packed": "packed, no masking",
             "padded": "padded"}
    lines = [f"| mode | loader tokens/s (on demand) | × trainer's {res['trainer_tokens_per_s']:,.0f} tokens/s "
             f"(target ≥ 50×) | wait per batch with prefetch behind {res['modes']['packed']['compute_ms_per_batch']:.0f} "
             "ms of compute |", "|---|---|---|---|"]
    for key, m in res["modes"].items():
        lines.append(f"| {names.get(key, key)} | {m['sync_tokens_per_s'] / 1e6:.1f} M | **{m['x_trainer_sync']:,.0f}×** "
                     f"| {m['blocked_ms_per_batch']:.2f} ms |")
    return lines


def train_memory(r: dict[str, Any]) -> list[str]:
    """bench_train_memory.py: one step's measured peak (torch's allocator; RSS with glibc's
    default and with a 64 KiB mmap threshold) against scaling/memory.py's estimate."""
    mib = 2 ** 20
    lines = ["| dtype | activation checkpointing | grad accum | estimate MiB | allocator peak (/ est.) "
             "| RSS, glibc default (/ est.) | RSS, mmap threshold 64 KiB (/ est.) |", "|---|---|---|---|---|---|---|"]
    for row in _result(r)["rows"]:
        peak = row["estimate"]["peak"]
        cells = [f"{row[k] / mib:.1f} ({row[k] / peak:.3f})" for k in ("allocator_peak", "rss_peak", "rss_peak_mmap")]
        lines.append(f"| {row['dtype']} | {'on' if row['checkpointing'] else 'off'} | {row['grad_accum']} "
                     f"| {peak / mib:.1f} | " + " | ".join(cells) + " |")
    return lines


def curate_vs_datatrove(r: dict[str, Any]) -> list[str]:
    """bench_curate_vs_datatrove.py: docs/s per core of each pipeline on the same pages, stage by
    stage, pages kept and boilerplate left, and tokenmill's ratios against both datatrove arms."""
    res = _result(r)
    labels = {"datatrove_default": "(a) datatrove default: Trafilatura → Gopher repetition → Gopher quality → C4 → FineWeb",
              "datatrove_our_extractor": "(b) datatrove with tokenmill's extractor, same four filters",
              "tokenmill": "(c) tokenmill `Extract → Normalize → Quality` (same rule families, published thresholds)"}
    lines = ["| pipeline | docs/s per core | ms/doc by stage | kept | navigation markers / chrome lines left |",
             "|---|---|---|---|---|"]
    for key, p in res["pipelines"].items():
        stages = ", ".join(f"{k} {v:.1f}" for k, v in p["stage_ms_per_doc"].items())
        lines.append(f"| {labels.get(key, key)} | {p['docs_per_s']:.2f} | {stages} | {p['kept']} "
                     f"| {p['nav_markers']} / {p['chrome_lines']} |")
    lines += [f"| **ratio (c)/(a)** | **{res['speedup_vs_datatrove_default']:.1f}×** (target ≥ 10×) | | | |",
              f"| **ratio (c)/(b)** | **{res['speedup_vs_datatrove_same_extractor']:.1f}×** (target ≥ 3×) | | | |"]
    return lines


def train_quality(r: dict[str, Any]) -> list[str]:
    """bench_train_quality.py: held-out bpb per bucket of the default recipe and the GPT-2-style
    baseline after the same training seconds, and their ratio."""
    res = _result(r)
    a, b = res["results"]["default recipe"], res["results"]["GPT-2-style baseline"]
    lines = ["| bucket | default recipe bpb | GPT-2-style bpb | **ratio** (target ≤ 0.9) |", "|---|---|---|---|"]
    for bucket in a["bpb"]:
        lines.append(f"| {bucket} | {a['bpb'][bucket]:.3f} | {b['bpb'][bucket]:.3f} | {a['bpb'][bucket] / b['bpb'][bucket]:.3f} |")
    lines += [f"| **all (byte-weighted)** | **{a['overall_bpb']:.3f}** | **{b['overall_bpb']:.3f}** "
              f"| **{res['ratio_overall']:.3f}** |",
              f"| steps / tokens / training seconds (budget {res['seconds']:.0f}) | {a['steps']:,} / "
              f"{a['tokens'] / 1e6:.2f} M / {a['train_seconds']:.0f} | {b['steps']:,} / {b['tokens'] / 1e6:.2f} M / "
              f"{b['train_seconds']:.0f} | |"]
    return lines


def demo_wallclock(r: dict[str, Any]) -> list[str]:
    """bench_demo.py: `tokenmill demo`'s wall-clock and each stage's seconds, the training setup,
    and the final held-out bpb against the unigram baseline."""
    res = _result(r)
    stages = " · ".join(f"{s} {v:.1f} s" for s, v in res["stage_seconds"].items())
    t = res["train"]
    target = f"target < {res.get('target_s', 600) // 60:.0f} min"
    lines = [f"| wall-clock ({target}) | stages | training | guard events |", "|---|---|---|---|",
             f"| **{res['wall_s'] // 60:.0f} min {res['wall_s'] % 60:.0f} s** | {stages} | {t['steps']} steps, "
             f"{t['tokens'] / 1e6:.2f} M tokens, {t['dtype']}, {t['threads']} threads, {t['params'] / 1e6:.2f} M params "
             f"| {res['guard_events']} |", "",
             f"| held-out bpb at step {res['eval_step']} | " + " | ".join(res["bpb"]) + " |",
             "|---|" + "---|" * len(res["bpb"]),
             "| model | " + " | ".join(f"{v:.3f}" for v in res["bpb"].values()) + " |",
             "| unigram baseline | " + " | ".join(f"{res['unigram_bpb'][b]:.3f}" for b in res["bpb"]) + " |"]
    if "ratio" in res:
        lines.append(f"| **model / unigram** (target ≤ {res['target_ratio']}) | "
                     + " | ".join(f"**{res['ratio'][b]:.3f}**" for b in res["bpb"]) + " |")
    return lines


def plan_time(r: dict[str, Any]) -> list[str]:
    """bench_plan_time.py: `tokenmill plan --config`'s predicted training time beside the real one."""
    res = _result(r)
    lines = ["| model | params | steps × tokens | plan: measured s/step (MFU) | predicted | real `train` "
             f"| **real / predicted** (target within {res['target_ratio']}×) |", "|---|---|---|---|---|---|---|"]
    for s in res["sizes"]:
        lines.append(f"| {s['size']} | {s['params'] / 1e6:.1f} M | {s['steps']} × {s['tokens_per_step']:,} "
                     f"| {s['measured_step_s']:.3f} ({s['measured_mfu']:.1%}) | {s['predicted_s']:.0f} s "
                     f"| {s['train_wall_s']:.0f} s | **{s['ratio_real_over_predicted']:.2f}** |")
    return lines


def first_hour(r: dict[str, Any]) -> list[str]:
    """bench_first_hour.py: a newcomer's session on the real corpora, each command and its exit code."""
    res = _result(r)
    steps = " · ".join(f"{s['name']} {s['rc']} ({s['seconds']:.0f} s)" for s in res["steps"])
    return ["| plan's predicted training | real training (both attempts) | **real / predicted** | commands (exit code, seconds) |",
            "|---|---|---|---|",
            f"| {res['predicted_train_s']:.0f} s | {res['real_train_s']:.0f} s | **{res['ratio_real_over_predicted']:.2f}** "
            f"| {steps} |"]


def minhash(r: dict[str, Any]) -> list[str]:
    """bench_minhash.py: signature speed on the same shingles, LSH index memory at 1 M documents,
    and pair recall / precision at Jaccard ≥ 0.8 against exact ground truth, beside datasketch."""
    res = _result(r)
    sp, mem, q = res["speed"], res["memory"], res["quality"]
    tm, ds = mem["tokenmill"], mem["datasketch"]
    ours, theirs = q["tokenmill"]["25x5"]["pair_level"], q["datasketch"]["pair_level"]
    scaled = ds["index_MB_scaled_to"][str(tm["docs"])]
    return ["| | tokenmill | datasketch | **ratio** / target |", "|---|---|---|---|",
            f"| signatures, text → 128 permutations, same word-5-gram shingles ({sp['docs']:,} real passages, "
            f"{sp['MB']} MB) | {sp['tokenmill_MBps']:.1f} MB/s | {sp['datasketch_MBps']:.2f} MB/s "
            f"| **{sp['speedup']:.1f}×** (≥ 5×) |",
            f"| the permutation step alone | {sp['perm_only_tokenmill_MBps']:.1f} MB/s "
            f"| {sp['perm_only_datasketch_MBps']:.2f} MB/s | {sp['perm_only_speedup']:.1f}× |",
            f"| LSH index for {tm['docs']:,} documents (25 bands × 5 rows) | peak RSS {tm['peak_rss_MB']:.0f} MB "
            f"(index {tm['index_MB']:.0f} MB), {tm['seconds']:.1f} s | {ds['index_MB']:.0f} MB per {ds['docs']:,} docs "
            f"(≈ {scaled / 1e3:.1f} GB per {tm['docs']:,}) | < {mem['target_MB'] / 1e3:.0f} GB "
            f"{'✓' if mem['meets_target'] else '✗'} |",
            f"| recall / precision of pairs at word-5-gram Jaccard ≥ 0.8 ({q['docs']:,} docs from real text with "
            f"mutated copies, {q['true_pairs']:,} true pairs, exact Jaccard known) | **{ours['recall']:.3f} / "
            f"{ours['precision']:.3f}** | {theirs['recall']:.3f} / {theirs['precision']:.3f} (MinHashLSH threshold "
            f"0.8, 128 perm) | ≥ 0.98 / ≥ 0.995 |"]


_QL_ARMS = ("before (English rules, web)", "after (own profile, web)", "after (own profile, reference)")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _pts(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}"


def quality_languages(r: dict[str, Any]) -> list[str]:
    """bench_quality_languages.py: keep rate per language on held-out translated pages, before
    (English rules for every language) and after (each language's profile), web and reference kinds."""
    res = _result(r)
    before, web, ref = (res["languages"][a] for a in _QL_ARMS)
    lines = ["| language | held-out pages (same page in English) | profile | keep rate before / after web / "
             "after reference | gap to English on the same pages, points: before / after web / after reference "
             "| low-quality pages removed, after web | rules that removed the most before | after (web) |",
             "|---|---|---|---|---|---|---|---|"]
    for lang, b in before["by_language"].items():
        w, f = web["by_language"][lang], ref["by_language"][lang]
        top_b = ", ".join(f"{k} {v}" for k, v in list(b["top_rules"].items())[:2])
        top_w = ", ".join(f"{k} {v}" for k, v in list(w["top_rules"].items())[:2])
        lines.append(f"| {lang} | {b['docs']} ({b['shared_with_english']}) | {w['profile']} | {_pct(b['keep_rate'])} / "
                     f"**{_pct(w['keep_rate'])}** / {_pct(f['keep_rate'])} | {_pts(b['gap_to_english'])} / "
                     f"**{_pts(w['gap_to_english'])}** / {_pts(f['gap_to_english'])} | "
                     f"{_pct(w.get('low_quality_removed'))} | {top_b} | {top_w} |")
    lines.append(f"| **all** | {res['held_out_pages']} | | spread {_pct(before['spread'])} / **{_pct(web['spread'])}** / "
                 f"{_pct(ref['spread'])} | largest gap {before['max_gap_to_english']:.1f} / "
                 f"**{web['max_gap_to_english']:.1f}** / {ref['max_gap_to_english']:.1f} | | translations judged "
                 f"alike: {_pct(before['agreement'])} before | {_pct(web['agreement'])} after (of {web['groups']} pages) |")
    return lines


def quality_kinds(r: dict[str, Any]) -> list[str]:
    """bench_quality_languages.py: books and code through their kinds' rules; segmentation cost."""
    res = _result(r)
    lines = ["| data | before | after | removed after |", "|---|---|---|---|"]
    (lb, b), (la, a) = res["books"].items()
    lines.append(f"| books/ ({b['files']} files: Austen, three Bibles, Shakespeare, Spurgeon, US founding documents), "
                 f"share of characters kept | {_pct(b['kept_char_share'])} ({b['kept_files']} files; {lb}) | "
                 f"**{100 * a['kept_char_share']:.1f}%** ({a['kept_files']} files; {la}) | "
                 f"{', '.join(f'{k}: {v}' for k, v in a['removed'].items()) or 'none'} |")
    for lang, c in res["code"].items():
        rules = ", ".join(f"{k} {v}" for k, v in c["removed_by"].items()) or "none"
        ex = "; ".join(p.split("/")[-1] for ps in c["examples"].values() for p in ps)
        lines.append(f"| code/{lang}: files kept by the code rules | skipped (no rules) | {c['kept']} of {c['files']} "
                     f"| {rules}{f' ({ex})' if ex else ''} |")
    for lang, s in res["segmentation"].items():
        ms = s["ms_per_doc"]
        lines.append(f"| measuring a {lang} page ({s['docs']} pages, {s['mean_chars']:,.0f} characters each), ms per "
                     f"page | {ms['whitespace words']:.1f} (whitespace words) | {ms['own profile']:.1f} (own profile"
                     f"{', segmented' if lang in ('zh', 'ja') else ''}) | |")
    return lines


def _ci(c: dict[str, Any] | None) -> str:
    from tokenmill.report.ablate_page import fmt_ci  # the page's own format, so table and page agree

    return fmt_ci(c)


def _multiplier(mult: dict[str, Any], at_largest: dict[str, Any] | None) -> str:
    """The data-efficiency multiplier, shown only where it is a result: its own interval excludes
    1, or (a file without one) the arm's Δ interval at the largest size excludes 0; otherwise the
    words `tokenmill ablate` prints (a point estimate inside the noise is not a multiplier)."""
    from tokenmill.decisions.ablate_stats import UNRESOLVED  # the words the ablate page uses

    if mult.get("value") is None:
        return mult.get("why") or "–"
    if "low" in mult and "high" in mult:
        resolved = mult["low"] > 1 or mult["high"] < 1
    else:
        resolved = at_largest is not None and (at_largest["low"] > 0 or at_largest["high"] < 0)
    if not resolved:
        return UNRESOLVED
    return f"{mult['value']:.2f}×" + (" (extrapolated)" if mult.get("extrapolated") else "")


def ablate_deltas(r: dict[str, Any]) -> list[str]:
    """bench_ablate.py: every arm against the full pipeline — Δ bpb over all slices at each size
    (paired 95% t interval over seeds), per slice at the largest, gap trend, multiplier."""
    a = _result(r)["ablate"]
    sizes = [s["name"] for s in a["sizes"]]
    largest = sizes[-1]
    lines = [f"| arm | training tokens (epochs at {' / '.join(sizes)}) | "
             + " | ".join(f"Δ bpb all slices, {s}" for s in sizes)
             + " | " + " | ".join(f"Δ bpb {sl}, {largest}" for sl in a["slices"])
             + " | gap from smallest to largest | data-efficiency multiplier |",
             "|---|---|" + "---|" * (len(sizes) + len(a["slices"]) + 2)]
    ref = a["reference"]

    def tokens(arm: str) -> str:
        info = a["arms"][arm]
        return f"{info['train_tokens']:,} (" + " / ".join(f"{info['epochs'][s]:.2f}" for s in sizes) + ")"

    ref_bpb = " / ".join(f"{a['means'][ref][s]['all']:.4f}" for s in sizes)
    lines.append(f"| **{ref}** (reference; bpb {ref_bpb}) | {tokens(ref)} | "
                 + " | ".join("0" for _ in sizes) + " | " + " | ".join("0" for _ in a["slices"]) + " | | 1× |")
    for arm, d in a["deltas"].items():
        info = a["arms"][arm]
        same = f" (= {info['same_data_as']}'s data)" if info.get("same_data_as") else ""
        m = _multiplier(d["multiplier"], d["delta"]["all"].get(largest))
        trend = d["trend"]
        lines.append(f"| {arm}{same} | {tokens(arm)} | "
                     + " | ".join(_ci(d["delta"]["all"].get(s)) for s in sizes) + " | "
                     + " | ".join(_ci(d["delta"][sl].get(largest)) for sl in a["slices"])
                     + f" | {trend['trend'] + ' (' + _ci(trend['change']) + ')' if trend else '–'} | {m} |")
    return lines


def ablate_ranking(r: dict[str, Any]) -> list[str]:
    """bench_ablate.py: the step-off arms ranked by what their step buys at the largest size."""
    a = _result(r)["ablate"]
    lines = ["| step | Δ bpb without it (95% interval) | verdict | share of tokens it removes |", "|---|---|---|---|"]
    for row in a["ranking"]:
        lines.append(f"| {', '.join(row['steps'])} | {_ci({'mean': row['contribution_bpb'], 'low': row['low'], 'high': row['high']})} "
                     f"| {row['verdict']} | {_pct(row['tokens_removed_share']) if row['tokens_removed_share'] is not None else '–'} |")
    lines.append(f"| cost | data stages {a['data_seconds'] / 60:.1f} min, training {a['train_seconds'] / 60:.1f} min "
                 f"({len(a['runs'])} runs) | | |")
    return lines


def _mean_spread(xs: list[float], digits: int = 3) -> str:
    """Mean over seeds, with the seeds' range when there is more than one."""
    if not xs:
        return "–"
    mean = sum(xs) / len(xs)
    return f"{mean:.{digits}f}" + (f" (±{(max(xs) - min(xs)) / 2:.{digits}f})" if len(xs) > 1 else "")


def _bucket_bpb(lc: dict[str, Any]) -> dict[tuple[int, int], float]:
    return {(b["from"], b["to"]): b["bpb"] for b in lc["positions"]["buckets"]}


def context_extension_positions(r: dict[str, Any]) -> list[str]:
    """bench_context_extension.py: bpb by position at 1024 tokens, zero-shot and after extension."""
    res = _result(r)
    arms = res["arms"]
    edges = sorted(_bucket_bpb(next(iter(arms.values()))["before"]))
    head = " | ".join(f"{lo}–{hi}" for lo, hi in edges)
    lines = [f"| method | when | bpb at positions {head} |", "|---|---|" + "---|" * len(edges)]
    for name, arm in arms.items():
        before = _bucket_bpb(arm["before"])
        lines.append(f"| {name} | before (zero-shot) | " + " | ".join(f"{before[e]:.3f}" for e in edges) + " |")
        after = [_bucket_bpb(x) for x in arm["after"]]
        lines.append(f"| {name} | after {arm['after'][0]['steps'] if arm['after'] else 0} steps "
                     f"(seeds {len(after)}) | " + " | ".join(_mean_spread([a[e] for a in after]) for e in edges) + " |")
    return lines


def context_extension_passkey(r: dict[str, Any]) -> list[str]:
    """bench_context_extension.py: passkey accuracy at 1024 tokens by distance, before and after."""
    arms = _result(r)["arms"]
    first = next(iter(arms.values()))["before"]["passkey"]
    bins = [(b["from"], b["to"]) for b in first["by_distance"]]
    lines = ["| method | passkey before (all) | passkey after (all) | after, by key distance "
             + " / ".join(f"{lo}–{hi}" for lo, hi in bins) + " | key log-prob before → after (nats) |",
             "|---|---|---|---|---|"]
    for name, arm in arms.items():
        after = [x["passkey"] for x in arm["after"]]
        by = []
        for lo, hi in bins:
            accs = [b["accuracy"] for p in after for b in p["by_distance"] if (b["from"], b["to"]) == (lo, hi)]
            by.append(_mean_spread(accs, 2))
        lines.append(f"| {name} | {arm['before']['passkey']['accuracy']:.2f} | "
                     f"{_mean_spread([p['accuracy'] for p in after], 2)} | {' / '.join(by)} | "
                     f"{arm['before']['passkey']['logprob']:.1f} → {_mean_spread([p['logprob'] for p in after], 1)} |")
    return lines


def continued_pretraining(r: dict[str, Any]) -> list[str]:
    """bench_continued_pretraining.py: code bpb gained and original-slice bpb lost per replay share."""
    res = _result(r)
    lines = ["| arm | tokens trained (code + replay) | code bpb after | code bpb gained | books bpb change "
             "| web bpb change |", "|---|---|---|---|---|---|"]
    for name, arm in res["arms"].items():
        runs = [x for x in arm["runs"] if x["after"]]
        if not runs:
            continue
        gained = [x["before"]["code"] - x["after"]["code"] for x in runs if x["before"]]
        change = {b: [x["after"][b] - x["before"][b] for x in runs if x["before"]] for b in ("books", "web")}
        lines.append(f"| {name} | {runs[0]['tokens']:,} | {_mean_spread([x['after']['code'] for x in runs])} | "
                     f"{_mean_spread(gained) if gained else '– (random init)'} | "
                     f"{_mean_spread(change['books']) if change['books'] else '–'} | "
                     f"{_mean_spread(change['web']) if change['web'] else '–'} |")
    return lines


def health_overhead(r: dict[str, Any]) -> list[str]:
    """bench_health_overhead.py: the median seconds of each part of the early-warning and
    run-health signals, and its share of the training step at the defaults."""
    res = _result(r)
    med, base = res["median_s"], res["median_s"]["base"]
    every = res["activation_stats_every"]
    parts = [("per-bucket loss bookkeeping (`BucketLoss.add` per micro-batch, one `result()`)", "bucket_add", 1),
             (f"activation probe (no-grad forward of {res['batch']['probe_rows']} rows, "
              f"{res['batch']['probe_queries']} queries per row scored per layer)", "probe", every),
             ("gradient-norm drift update", "drift", 1)]
    if "run_health" in med:
        parts.append(("run health (watchdog beat, rank clock, stop/rank-time agreement, bucket-loss warning)",
                      "run_health", 1))
    lines = ["| part | median | share of a step |", "|---|---|---|",
             f"| training step (compute_update + AdamW), without the signals | {base:.2f} s | — |"]
    for label, key, per in parts:
        when = "every step" if per == 1 else f"per call; {med[key] / per / base:.2%} at every {per} steps"
        lines.append(f"| {label} | {med[key] * 1000:.3g} ms | {med[key] / base:.2%} {when} |")
    lines.append(f"| **the defaults together** | | **{res['defaults_overhead_share']:.2%}** |")
    return lines


def health_detectors(r: dict[str, Any]) -> list[str]:
    """bench_health_detectors.py: per arm, each detector's first firing step and count (— silent),
    and the final held-out bpb."""
    res = _result(r)
    detectors = [d for d in res["detectors"] if any(d in rec["fired"] for rec in res["records"])]
    buckets = sorted({b for rec in res["records"] for b in rec["bpb"]})
    lines = ["| arm | seed | " + " | ".join(detectors) + " | " + " | ".join(f"{b} bpb" for b in buckets) + " |",
             "|---|---|" + "---|" * (len(detectors) + len(buckets))]
    for rec in res["records"]:
        cells = []
        for d in detectors:
            f = rec["fired"].get(d)
            cells.append("—" if f is None else f"step {f['first_step']}" + (f" (×{f['count']})" if f["count"] > 1 else ""))
        lines.append(f"| {rec['arm']} | {rec['seed']} | " + " | ".join(cells) + " | "
                     + " | ".join(f"{rec['bpb'].get(b, float('nan')):.3f}" for b in buckets) + " |")
    return lines


def fault_recovery(r: dict[str, Any]) -> list[str]:
    """bench_fault_recovery.py: per arm, the held-out bpb gap against the clean run of the same seed
    (per bucket and mean), the updates applied and the step attempts."""
    res = _result(r)
    arms, spec = res["summary"]["arms"], res["arms_spec"]
    buckets = sorted(res["summary"]["clean_mean_bpb"])
    lines = ["| arm | faults | guard | seeds | " + " | ".join(f"{b} gap" for b in buckets)
             + " | mean gap | updates applied / step attempts |", "|---|---|---|---|" + "---|" * (len(buckets) + 2)]
    for name, arm in arms.items():
        if name == "clean":
            continue
        guard = ", ".join(f"{k} {v}" for k, v in spec[name]["guard"].items()) or "defaults"
        gaps = " | ".join(f"{arm['paired_gap_pct'][b]:+.2f}%" for b in buckets)
        lines.append(f"| {name} | {spec[name]['faults'] or 'none'} | {guard} | {len(arm['seeds'])} | {gaps} | "
                     f"**{arm['paired_gap_pct_mean']:+.2f}%** | "
                     + ", ".join(f"{u}/{a}" for u, a in zip(arm["applied_updates"], arm["attempts"])) + " |")
    spread = res["summary"]["clean_spread_pct"]
    lines.append("| clean (seed-to-seed spread) | none | | 2 | " + " | ".join(f"{spread[b]:.2f}%" for b in buckets)
                 + " | | 300/300 |")
    return lines


def _hostile_outcome(rec: dict[str, Any]) -> str:
    """What one run of a hostile case did, in words a reader can check against the JSON."""
    if rec["killed_at_timeout"]:
        return "**killed at the time limit**"
    parts = []
    if rec["traceback"]:
        parts.append("**traceback**")
    if rec["group"] == "normal":
        parts.append(f"kept {rec['kept']}, quarantined {sum((rec.get('rejected') or {}).values())} (exit {rec['exit']})")
    elif rec["good"] is not None:
        rules = ", ".join(f"{k} {v}" for k, v in sorted((rec.get("rejected") or {}).items()))
        parts.append(f"kept {rec['kept']}/{rec['good']} good" + (f"; quarantined: {rules}" if rules else ""))
        if rec["exit"] != 0:
            parts.append(f"exit {rec['exit']}")
    elif rec["exit"] == 0:  # refused_expected False or None: succeeding is what a correct run may do
        parts.append("**accepted (exit 0)**" if rec.get("refused_expected", True) else "succeeded (exit 0)")
    else:
        parts.append(f"refused (exit {rec['exit']}, {rec['stderr_lines']} line{'s' if rec['stderr_lines'] != 1 else ''})")
    if rec.get("overran"):
        parts.append(f"**over its {rec['within_s']:g} s bound**")
    if rec["paths_lost"]:
        parts.append(f"**{rec['paths_lost']} of the user's paths deleted or changed**")
    if rec["paths_stray"]:
        parts.append(f"{rec['paths_stray']} path{'s' if rec['paths_stray'] != 1 else ''} written outside its output")
    return "; ".join(parts)


def _hostile_rss(rec: dict[str, Any]) -> str:
    """Peak RSS; a growth case's at each size of its hostile input (the same at both: bounded)."""
    sizes = rec.get("rss_by_size_mb")
    if not sizes:
        return f"{rec['peak_rss_mb']:.0f} MB"
    return ", ".join(f"{rss:.0f} MB at {size} MB" for size, rss in sizes.items())


def hostile_inputs(r: dict[str, Any], *reruns: dict[str, Any]) -> list[str]:
    """bench_hostile_inputs.py: per case, this checkout's median time, peak memory and outcome,
    beside the baseline commit's single run (killed at the time limit, capped in memory); each of
    `reruns` (a run of some cases alone, `--only …`) replaces the main run's rows of its cases."""
    res = _result(r)
    records = res["records"]
    for rerun in reruns:
        again = _result(rerun)["records"]
        names = {rec["case"] for rec in again}
        records = [rec for rec in records if rec["case"] not in names] + again
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in records:
        by_case.setdefault(rec["case"], {})[rec["source"]] = rec
    base = res.get("baseline_src") is not None
    head = "| case | tokenmill: time | peak RSS | outcome |" + (" baseline: time | peak RSS | outcome |" if base else "")
    lines = [head, "|---|---|---|---|" + ("---|---|---|" if base else "")]
    for case, recs in by_case.items():
        cells = [f"{case}: {recs['tokenmill']['what']}"]
        for src in ("tokenmill", "baseline") if base else ("tokenmill",):
            rec = recs.get(src)
            cells += ([f"{rec['seconds']:.2f} s", _hostile_rss(rec), _hostile_outcome(rec)] if rec else ["—", "—", "—"])
        lines.append("| " + " | ".join(cells) + " |")
    for src in ("tokenmill", "baseline") if base else ("tokenmill",):
        recs = [c[src] for c in by_case.values() if src in c and c[src]["group"] != "normal"]
        lost = [r for r in recs if r["good"] is not None and r["kept"] != r["good"]]
        lines += ["", f"{src}: of {len(recs)} hostile cases, {sum(r['killed_at_timeout'] for r in recs)} killed at the "
                  f"{res['timeout_s']:.0f} s limit, {sum(r['traceback'] for r in recs)} ended in a traceback, "
                  f"{len(lost)} lost good documents ({sum(r['good'] - (r['kept'] or 0) for r in lost)} of "
                  f"{sum(r['good'] for r in recs if r['good'] is not None)}), "
                  f"{sum(1 for r in recs if r['paths_lost'])} deleted or changed the user's files, "
                  f"{sum(1 for r in recs if r['refused_expected'] and r['exit'] == 0)} accepted what it must refuse, "
                  f"{sum(1 for r in recs if r.get('overran'))} overran its time bound; "
                  f"slowest {max(r['seconds'] for r in recs):.2f} s, largest peak RSS {max(r['peak_rss_mb'] for r in recs):.0f} MB "
                  f"(address space capped at {res['memory_gb']:.0f} GB)."]
    normal = by_case.get("normal_html", {})
    if "tokenmill" in normal and "baseline" in normal:
        new, old = normal["tokenmill"], normal["baseline"]
        lines += ["", f"Ordinary pages (normal_html, {new['repeats']} interleaved runs each, medians): "
                  f"{new['seconds']:.2f} s against {old['seconds']:.2f} s before, "
                  f"{new['seconds'] / old['seconds']:.3f}× the time (runs: {new['seconds_all']} vs {old['seconds_all']})."]
    return lines


def _by(pairs: list[list[Any]], top: int = 2) -> str:
    """The top removers as `step:rule k`, or — when nothing removed the kind."""
    return ", ".join(f"{name} {k}" for name, k in pairs[:top]) or "—"


def dirty_web(r: dict[str, Any], confirm: dict[str, Any] | None = None) -> list[str]:
    """bench_dirty_web.py: per labelled kind, the share tokenmill's defaults and datatrove's
    four filters remove and what removed it; then clean kept and mojibake repaired, vs targets;
    with `confirm`, the same verdicts on a corpus built with another seed."""
    res = _result(r)
    t = res["targets"]
    lines = ["| kind | n | should be | tokenmill removed | by (step:rule, top 2) | datatrove removed | by (filter:reason, top 2) |",
             "|---|---|---|---|---|---|---|"]
    for kind, v in res["kinds"].items():
        want = "kept" if v["clean"] else "removed"
        lines.append(f"| {kind} | {v['n']} | {want} | {100 * v['tokenmill_removed']:.1f}% | {_by(v['tokenmill_by'])} "
                     f"| {100 * v['datatrove_removed']:.1f}% | {_by(v['datatrove_by'])} |")
    verdicts = res["verdicts"]
    for name in ("tokenmill", "datatrove"):
        v = verdicts[name]
        per = ", ".join(f"{k} {100 * s:.1f}%" for k, s in v["clean_kept_by_kind"].items())
        lines += ["", f"{name}: clean kept {100 * v['clean_kept']:.1f}% (target ≥ {100 * t['clean_kept']:.0f}%: "
                  f"{'met' if v['clean_kept_met'] else 'missed'}; {per}); junk kinds ≥ {100 * t['junk_removed']:.0f}% removed: "
                  f"{len(v['junk_kinds_met'])} of {len(v['junk_kinds_met']) + len(v['junk_kinds_missed'])}"
                  + (f" (missed: {', '.join(v['junk_kinds_missed'])})" if v["junk_kinds_missed"] else "") + "."]
    m = res["mojibake"]
    lines += ["", f"Mojibake: {m['repaired_and_kept']} of {m['n']} repaired and kept ({100 * m['share']:.1f}%, target ≥ "
              f"{100 * t['mojibake_repaired_kept']:.0f}%: {'met' if verdicts['tokenmill']['mojibake_met'] else 'missed'}); "
              f"{m['identical_to_original']} of them identical to the original page (≥ 0.99 similar), the rest edited "
              f"by other default steps; {m['n'] - m['kept']} not kept. datatrove's filters repair nothing."]
    if confirm is not None:
        c = _result(confirm)
        lines += ["", f"Confirmation on a corpus built with seed {c['seed']} (other pages, passages and junk; "
                  "every choice above was made on seed " + f"{res['seed']}):"]
        for name in ("tokenmill", "datatrove"):
            v = c["verdicts"][name]
            lines.append(f"- {name} clean kept {100 * v['clean_kept']:.1f}%, junk kinds ≥ {100 * t['junk_removed']:.0f}% removed "
                         f"{len(v['junk_kinds_met'])} of {len(v['junk_kinds_met']) + len(v['junk_kinds_missed'])}"
                         + (f" (missed: {', '.join(v['junk_kinds_missed'])})" if v["junk_kinds_missed"] else "")
                         + (f", mojibake repaired and kept {100 * v['mojibake_repaired_kept']:.1f}%" if name == "tokenmill" else "")
                         + ".")
    return lines


def _share_ci(c: dict[str, Any]) -> str:
    """A share of a gap in percent, with its interval."""
    if c.get("low") is None:
        return f"{100 * c['mean']:.0f}%"
    return f"{100 * c['mean']:.0f}% [{100 * c['low']:.0f}%, {100 * c['high']:.0f}%]"


def dirty_web_model(r: dict[str, Any]) -> list[str]:
    """bench_dirty_web_model.py: per size, each arm's held-out bpb over seeds, its training data,
    the share of the raw -> oracle gap the default pipeline and datatrove's filters recover, and
    default − datatrove (paired 95% t intervals over seeds)."""
    res = _result(r)
    a, gap = res["ablate"], res["gap"]
    sizes = [s["name"] for s in a["sizes"]]
    shape = {s["name"]: f"d{s['d_model']}×{s['n_layers']}, {s['tokens']:,} tokens" for s in a["sizes"]}
    lines = ["| arm | training tokens (epochs at " + " / ".join(sizes) + ") | "
             + " | ".join(f"held-out bpb, {s} ({shape[s]})" for s in sizes) + " | "
             + " | ".join(f"share of raw → oracle gap recovered, {s}" for s in sizes) + " |",
             "|---|---|" + "---|" * (2 * len(sizes))]
    for arm in ("raw", "default", "datatrove", "oracle"):
        info = a["arms"][arm]
        epochs = " / ".join(f"{info['epochs'][s]:.2f}" for s in sizes)
        bpb = " | ".join(_mean_spread(gap[s]["bpb"][arm], 4) for s in sizes)
        rec = " | ".join("0% (by definition)" if arm == "raw" else "100% (by definition)" if arm == "oracle"
                         else _share_ci(gap[s]["recovered"][arm]) for s in sizes)
        lines.append(f"| {arm} ({info['note']}) | {info['train_tokens']:,} ({epochs}) | {bpb} | {rec} |")
    lines += ["", "Paired over seeds (95% t interval): raw − oracle "
              + "; ".join(f"{s} {_ci(gap[s]['raw_minus_oracle'])}" for s in sizes)
              + " bpb; default − datatrove " + "; ".join(f"{s} {_ci(gap[s]['default_minus_datatrove'])}" for s in sizes)
              + " bpb (negative: the default pipeline's model is better)."]
    return lines


def kind_detect_fresh(r: dict[str, Any]) -> list[str]:
    """bench_kind_fresh.py: per row of the frozen set (man pages per language, dictionaries), the
    share detected as reference with its 95% Wilson interval, the other kinds, and the rule's checks."""
    res = _result(r)
    lines = ["| row | documents | detected reference [95% interval] | detected otherwise | >= 0.95 |", "|---|---|---|---|---|"]
    for row, v in res["rows"].items():
        other = ", ".join(f"{k} {n}" for k, n in sorted(v["kinds"].items()) if k != "reference") or "none"
        low, high = (max(0.0, x) for x in v["interval"])
        met = "yes" if res["checks"][f"{row} >= 0.95"] else "no"
        lines.append(f"| {row} | {v['n']} | {100 * v['reference']:.1f}% [{100 * low:.1f}%, {100 * high:.1f}%] | {other} | {met} |")
    parity = [k.split(" ")[0] for k, ok in res["checks"].items() if "within" in k and not ok]
    lines += ["", f"Checks that hold: {res['checks_met']} of {res['checks_total']}. Man-page languages more than 10 points "
              f"below English: {', '.join(parity) if parity else 'none'}."]
    return lines


def manpage_parity(r: dict[str, Any]) -> list[str]:
    """bench_manpage_parity.py: per language, its paired man pages kept and their English
    originals kept (95% Wilson intervals), what removed its pages only, and the 10-point check."""
    res = _result(r)
    lines = ["| language | pages paired with English | kept [95% interval] | English originals kept [95% interval] | removed here, kept in English | within 10 points |",
             "|---|---|---|---|---|---|"]

    def rate(k: int, n: int, ci: list[float] | None) -> str:
        return f"{k}/{n} {100 * k / n:.1f}% [{100 * ci[0]:.1f}%, {100 * ci[1]:.1f}%]" if n and ci else "–"

    for lang, v in res["languages"].items():
        only = ", ".join(f"{rule} {n}" for rule, n in v["removed_here_not_in_english"].items()) or "none"
        small = " (small)" if v["small"] else ""
        lines.append(f"| {lang}{small} | {v['pairs']} | {rate(v['kept'], v['pairs'], v['interval'])} | "
                     f"{rate(v['kept_en'], v['pairs'], v['interval_en'])} | {only} | {'yes' if v['within_10_points'] else 'no'} |")
    lines += ["", f"Checks that hold: {res['checks_met']} of {res['checks_total']}."]
    return lines


def kind_detect(r: dict[str, Any]) -> list[str]:
    """bench_kind_detect.py: the confusion matrix of the kind detector on the held-out half of
    the labelled real documents, per-kind accuracy, and accuracy counting the cheap confusions."""
    res = _result(r)
    kinds = list(res["confusion"])
    lines = [f"| labelled \\ detected | {' | '.join(kinds)} | n | accuracy | with cheap confusions |",
             "|---|" + "---|" * (len(kinds) + 3)]
    for k in kinds:
        row = res["confusion"][k]
        pk = res["per_kind"][k]
        lines.append(f"| {k} | " + " | ".join(str(row.get(p, 0)) for p in kinds)
                     + f" | {pk['n']} | {100 * pk['accuracy']:.1f}% | {100 * pk['acceptable']:.1f}% |")
    cheap = "; ".join(f"{k}: {why}" for k, why in res["acceptable_confusions"].items())
    lines += ["", f"Half measured: {res['half']} ({res['docs']} documents; thresholds were set on the other half). "
              f"Cheap confusions: {cheap}. Detection: {res['detect_ms']['mean']:.2f} ms per document on average, "
              f"{res['detect_ms']['max']:.1f} ms at most."]
    if "manual_rules" in res:
        m = res["manual_rules"]
        lines += ["", f"| the {m['docs']:,} documents labelled reference, judged as | removed | the rules they break (share of documents) |",
                  "|---|---|---|"]
        for kind in ("web", "reference", "prose"):
            rules = ", ".join(f"{r} {100 * v:.1f}%" for r, v in m[kind]["rules"].items())
            lines.append(f"| {kind} | {100 * m[kind]['removed']:.1f}% | {rules} |")
    return lines


def perplexity_gate(r: dict[str, Any]) -> list[str]:
    """bench_perplexity_gate.py: per corpus seed, the auto cut per language and what the gate
    removed of each kind in the pipeline; then each candidate statistic at a cut set on the
    held-out passages alone (their maximum), over the documents that reached the gate."""
    res = _result(r)
    seeds = list(res)
    lines = ["| | " + " | ".join(seeds) + " |", "|---|" + "---|" * len(seeds)]
    cuts = lambda s: ", ".join(f"{lang} {v['threshold']:.3f} (held-out {v['clean_quantile']:.3f}, salad median "  # noqa: E731
                               f"{v['salad_median']:.3f})" for lang, v in res[s]["calibration"]["languages"].items()
                               if v.get("threshold") is not None)
    lines.append("| auto cut per language (context ratio) | " + " | ".join(cuts(s) for s in seeds) + " |")
    kinds = [k for k in res[seeds[0]]["pipeline"] if not k.startswith("_")]
    for k in kinds:
        cells = [res[s]["pipeline"][k] for s in seeds]
        if any(c["removed_by_gate"] for c in cells) or k in ("clean_prose", "clean_docs", "mojibake"):
            lines.append(f"| {k}: removed by the gate | " + " | ".join(
                f"{c['removed_by_gate']} of {c['rows']} ({c['reached_gate']} reached it)" for c in cells) + " |")
    lines += ["", "| statistic, cut at the held-out passages' maximum | " + " | ".join(
        f"{k} removed ({s})" for s in seeds for k in ("shuffled_words", "clean_docs", "clean_prose", "mojibake")) + " |",
              "|---|" + "---|" * (4 * len(seeds))]
    for name in res[seeds[0]]["candidates"]:
        lines.append(f"| {name} | " + " | ".join(
            f"{100 * res[s]['candidates'][name]['kinds'][k]['removed_at_q1.0']:.1f}%" for s in seeds
            for k in ("shuffled_words", "clean_docs", "clean_prose", "mojibake")) + " |")
    return lines


def time_to_loss(*files: dict[str, Any]) -> list[str]:
    """bench_time_to_loss.py: every run of each file (the tuning seed's LR grid, then seeds that
    did not choose), both sides' held-out bpb at equal wall-clock, and the seconds tokenmill's
    evaluations place it at nanoGPT's final bpb of the same seed and LR pair."""
    lines = ["| seed | LR (both sides) | nanoGPT: steps, s (first step) | nanoGPT bpb | tokenmill: steps, s (first step) "
             "| tokenmill bpb | bpb ratio at equal seconds | tokenmill's s to nanoGPT's final bpb: all / without first steps |",
             "|---|---|---|---|---|---|---|---|"]
    for res in map(_result, files):
        seed = res["command"].split("--tune-seed ")[1].split()[0] if "--tune-seed" in res["command"] else "0"
        for (peer_lr, peer), (our_lr, ours) in zip(res["tuning"]["nanoGPT"].items(), res["tuning"]["tokenmill"].items()):
            s = summarize_pair(peer, ours)
            lines.append(
                f"| {seed} | {peer_lr} / {our_lr} | {peer['steps']:,}, {peer['seconds']:.1f} ({peer['first_step_s']:.1f}) "
                f"| {peer['bpb']:.4f} | {ours['steps']:,}, {ours['seconds']:.1f} ({ours['first_step_s']:.2f}) | {ours['bpb']:.4f} "
                f"| {ours['bpb'] / peer['bpb']:.3f} | {s} |")
    return lines


def summarize_pair(peer: dict[str, Any], ours: dict[str, Any]) -> str:
    """tokenmill's seconds to the nanoGPT run's final bpb and their ratio to nanoGPT's, with and
    without each side's first (compiling) step; 'not reached' if its curve never gets there."""
    from curves import time_to_reach  # beside this file, on the path tables.py sets

    out = []
    for drop in (False, True):
        t = time_to_reach(ours["curve"], peer["bpb"], ours["first_step_s"] if drop else 0.0)
        base = peer["seconds"] - (peer["first_step_s"] if drop else 0.0)
        out.append("not reached" if t is None else f"{t:.1f} s = {t / base:.2f}×")
    return " / ".join(out)


def classify_topic(r: dict[str, Any]) -> list[str]:
    """bench_classify.py: per class, held-out passages (whole files), AUC and the confusion row; then
    the totals, the curate stage's routing and the costs."""
    m, names = r["model"], r["model"]["labels"]
    lines = ["| true \\ predicted | " + " | ".join(names) + " | held-out passages (files) | one-vs-rest AUC |",
             "|---|" + "---|" * (len(names) + 2)]
    files = r["held_out"].get("files_per_class", {})
    for name, row in zip(names, m["confusion"]):
        auc = m["auc"].get(name)
        lines.append(f"| {name} | " + " | ".join(str(c) for c in row)
                     + f" | {sum(row)} ({files.get(name, '?')}) | {'—' if auc is None else f'{auc:.4f}'} |")
    c = r["curate"]
    lines += ["", "| accuracy | macro AUC | routed to the right bucket by `curate` | training | scoring |", "|---|---|---|---|---|",
              f"| {m['accuracy']:.3f} | {m['macro_auc']:.5f} | {c['routed_accuracy']:.3f} of {c['docs_out']} documents "
              f"| {m['train_seconds']:.1f} s ({r['train']['passages']} passages) | {m['score_us_per_doc']:.0f} µs per document |"]
    return lines


def _pct1(x: float | None) -> str:
    """A share as a percentage with one decimal ("–" for none)."""
    return "–" if x is None else f"{100 * x:.1f}%"


def toxicity_layers(r: dict[str, Any]) -> list[str]:
    """bench_toxicity_layers.py: per configuration, false positives and recall of the word list
    alone vs with the second pass, the share sent to the classifier and each pass's µs per document."""
    toxic = next(iter(r["configs"].values()))["total"]["toxic"]
    lines = [f"| word list | band | P(toxic) > | clean removed: list alone → both passes | offensive caught (of {toxic}): alone → both "
             "| sent to classifier | µs/doc list | µs/doc classifier (per scored doc; amortised) |",
             "|---|---|---|---|---|---|---|---|"]
    for c in r["configs"].values():
        t, cost = c["total"], c["cost"]
        first, both = t["first_pass"], t["both_passes"]
        lines.append(f"| {c['word_list']} | [{c['band'][0]}, {c['band'][1]}] | {c['classifier_threshold']} "
                     f"| {first['false_positives']} ({_pct1(first['false_positive_rate'])}) → **{both['false_positives']}** "
                     f"({_pct1(both['false_positive_rate'])}) | {first['true_positives']} → **{both['true_positives']}** "
                     f"| {_pct1(t['to_classifier'] / t['docs'])} | {cost['first_pass_us_per_doc']:.0f} "
                     f"| {cost['classifier_us_per_scored_doc']:.0f}; {cost['classifier_us_per_doc_amortised']:.1f} |")
    return lines


def toxicity_slices(r: dict[str, Any]) -> list[str]:
    """bench_toxicity_layers.py: clean documents removed per topic slice, each list alone vs with
    the second pass in the default band at P > 0.5."""
    a, b = r["configs"]["builtin_default_p0.5"]["slices"], r["configs"]["broad_default_p0.5"]["slices"]
    lines = ["| slice | documents (clean / offensive) | clean removed, built-in list: alone → both "
             "| clean removed, broad list: alone → both |",
             "|---|---|---|---|"]
    for name in sorted(k for k in a if k.startswith("slice=")):
        x, y = a[name], b[name]
        cells = [f"{z['false_positives_first']} ({_pct1(z['fp_first'])}) → **{z['false_positives_both']}** ({_pct1(z['fp_both'])})"
                 for z in (x, y)]
        lines.append(f"| {name[6:]} | {x['clean']} / {x['toxic']} | {cells[0]} | {cells[1]} |")
    return lines


def pii_names(r: dict[str, Any]) -> list[str]:
    """bench_pii_names.py: recall of person names and addresses per annotated set, each marked by
    whether the detector's rules were written before the set was first scored (held out) or after
    (seen), then the words lost on texts without names."""
    res = r["result"]
    h, f, f2 = res["heldout"]["recall"], res["fresh_heldout"]["recall"], res["fresh2_heldout"]["recall"]
    rows = [
        ("trailer, header and copyright lines of changelogs, copyright files and mail (names derived from the format)",
         "held out", h["kind=name|origin=structural"]),
        ("running text of changelogs and mail, read by hand", "seen: its misses shaped the credit rules", h["kind=name|origin=hand"]),
        ("running text of Python 3.4–3.10 release notes, read by hand", "held out", f["kind=name|bucket=release_notes"]),
        ("running text of kernel docs and Debian history, read by hand", "seen: its misses shaped the list rules",
         f["kind=name|bucket=documentation"]),
        ("running text of Perl module docs and man pages, read by hand", "held out, scored once", f2["kind=name|origin=hand"]),
        ("postal addresses in changelogs and copyright files, read by hand", "held out", h["kind=address"]),
    ]
    lines = ["| gold spans | status | recalled / gold | recall |", "|---|---|---|---|"]
    lines += [f"| {label} | {status} | {x['recalled']} / {x['gold']} | {x['recall']:.3f} |" for label, status, x in rows]
    a = res["heldout"]["over_removal_no_name_texts"]["any"]
    c = res["cost"]["real_files_400"]
    lines += ["", "| texts without names (code, dictionary, man pages) | words | words masked | share |", "|---|---|---|---|",
              f"| name or address | {a['words']:,} | {a['over_removed_words']} | {100 * a['word_share']:.2f}% |",
              "", f"| PII step on {c['docs']} real files ({c['mean_chars']:,} characters on average) | µs per document |", "|---|---|",
              f"| the six pattern kinds | {c['us_per_doc_pattern_kinds']:,.0f} |",
              f"| with names and addresses | {c['us_per_doc_with_name_address']:,.0f} ({c['ratio']:.2f}×) |"]
    return lines


def gate_costs(r: dict[str, Any]) -> list[str]:
    """bench_gate_costs.py: µs per document of each gate on the same real documents, median of
    interleaved rounds, with the driver-side training time of the two classifier gates."""
    g, docs = _result(r)["gates"], _result(r)["documents"]
    lines = [f"| gate ({docs['count']} documents, {docs['mb']} MB) | µs per document | MB/s | trained once in the driver |",
             "|---|---|---|---|"]
    for name, x in g.items():
        prep = f"{x['prepare_seconds']:.1f} s" if x["prepare_seconds"] >= 0.05 else "—"
        lines.append(f"| {name} | {x['us_per_doc']:,.1f} | {x['mb_per_s']:,.1f} | {prep} |")
    return lines


def eval_tiers_paired(r: dict[str, Any], arm: str) -> list[float]:
    """Each repetition's wall tokens/s of `arm` over the no-evaluation arm's in the same
    repetition: the machine drifts between repetitions, so ratios within one cancel it."""
    return [x["wall_tokens_per_s"] / c["wall_tokens_per_s"] for x, c in zip(r["runs"][arm], r["runs"]["c"])]


def eval_tiers(rec: dict[str, Any]) -> list[str]:
    """bench_eval_tiers.py: the trainer's tokens/s with all evaluation in it, with the cheap tier in
    it and `tokenmill eval --watch` beside it, and with none; interleaved runs, medians."""
    r = rec["result"]
    lines = ["| arm | per-step tokens/s (median) | wall tokens/s (median) | wall vs no evaluation, paired by repetition: median (range) | runs |",
             "|---|---|---|---|---|"]
    for arm in ("a", "b", "c"):
        m, runs = r["median"][arm], r["runs"][arm]
        walls = ", ".join(f"{x['wall_tokens_per_s']:,.0f}" for x in runs)
        paired = eval_tiers_paired(r, arm)
        lines.append(f"| {r['labels'][arm]} | {m['step_tokens_per_s_median']:,.0f} | {m['wall_tokens_per_s']:,.0f} | "
                     f"**{statistics.median(paired):.3f}×** ({min(paired):.3f}–{max(paired):.3f}) | {walls} |")
    lag = [x["watcher_lag_s"] for x in r["runs"]["b"]]
    lines.append("")
    pinned = "; trainer on core 0, watcher on core 1, one thread each (`--pin`)" if r.get("pinned") else ""
    pinned += "; `--tasks heavy`" if r.get("tasks") == "heavy" else ""
    lines.append(f"{r['steps']} steps, evaluation every {r['eval_every']} (checkpoints every {r['ckpt_every']}), "
                 f"{r['reps']} interleaved repetitions{pinned}; the watcher ({r['watch_device']}) finished "
                 f"{min(lag):.1f}–{max(lag):.1f} s after the trainer. Commit {rec['commit'][:7]}, torch "
                 f"{rec['versions'].get('torch', '?')}, {rec['machine'].get('cores', '?')} cores.")
    return lines


def eval_hf_reference(r: dict[str, Any]) -> list[str]:
    """eval_hf_reference.py: the demo model's generative and code scores by tokenmill's scorer on
    its checkpoint and through HF generate on its export, with the items whose answers differ."""
    res, v = r["result"], r["versions"]
    lines = ["| task (greedy) | items | metric | tokenmill | HF reference | items whose answers differ "
             "| answers not empty / distinct | seconds: tokenmill / HF |",
             "|---|---|---|---|---|---|---|---|"]
    for t in res["tasks"]:
        s = res["settings"][t["name"]]
        label = f"{t['name']} ({s['shots']}-shot, ≤ {s['max_new_tokens']} new tokens)"
        for k in (k for k in t["tokenmill"] if k != "acc"):
            lines.append(f"| {label} | {t['n']} | {k} | {t['tokenmill'][k]:.4f} | {t['reference'][k]:.4f} | **{t['n_differing']}** "
                         f"| {t['nonempty']} / {t['distinct']} | {t['seconds']['tokenmill']:.1f} / {t['seconds']['reference']:.1f} |")
    lines.append("")
    lines.append(f"Checkpoint {res['checkpoint']} of the demo run, fp32 on CPU ({res['threads']} threads), torch {v['torch']}, "
                 f"transformers {v['transformers']}; export {res['export_seconds']:.1f} s, whole script {r['seconds']:.0f} s.")
    return lines


def sandbox_cost(r: dict[str, Any]) -> list[str]:
    """bench_sandbox.py: wall time per candidate program under each eval.sandbox.isolation, medians
    and quartiles of interleaved repetitions, and what namespaces (with the cgroup) adds."""
    res = r["result"]
    lines = ["| program | isolation | n | median ms | IQR ms (q1–q3) |", "|---|---|---|---|---|"]
    for row in res["rows"]:
        lines.append(f"| {row['program']} | {row['isolation']} | {row['n']} | {row['median_ms']:.1f} "
                     f"| {row['iqr_ms']:.1f} ({row['q1_ms']:.1f}–{row['q3_ms']:.1f}) |")
    extra = ", ".join(f"{p}: {ms:+.1f} ms" for p, ms in res["namespaces_extra_median_ms"].items())
    if res.get("namespaces_over_before"):
        extra += "; namespaces over `before` (the audit-hook sandbox of an earlier checkout): " + ", ".join(
            f"{p}: {x:.2f}×" for p, x in res["namespaces_over_before"].items()
        )
    group = "each candidate in its own cgroup" if res["cgroup"] else f"no cgroup ({res['cgroup_problem']})"
    lines.append("")
    lines.append(f"namespaces minus process, medians: {extra}. uid {res['uid']}, {group}, kernel {res['kernel']}, "
                 f"{res['warmup']} warm-up repetitions; commit {r['commit'][:7]}, {r['machine'].get('cores', '?')} cores.")
    return lines


def pii_private(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """bench_pii_private.py on the frozen collections: names replaced per collection by the old
    default and the new one (pii.names private), and contact recall where the frozen rule asks it."""
    old, new = _result(before)["buckets"], _result(after)["buckets"]
    lines = ["| bucket | collection | words | names replaced, old default | **new default** | per 100k words, new "
             "| of them with no contact details on their line | contact recall, old → new |",
             "|---|---|---|---|---|---|---|---|"]
    for bucket, cols in new.items():
        for path, row in cols.items():
            was = old[bucket][path]
            recall = "—" if row["contact_recall"] is None else (
                f"{was['contact_recall']:.3f} → **{row['contact_recall']:.3f}** ({row['gold']:,} names)")
            lines.append(f"| {bucket} | `{path}` | {row['words']:,} | {was['names']:,} | **{row['names']:,}** "
                         f"| {row['names_per_100k_words']:.1f} | {row['names_without_contact']:,} | {recall} |")
    return lines


def pii_private_verdict(r: dict[str, Any]) -> list[str]:
    """The frozen decision rule's checks, each with its measured value."""
    checks = _result(r)["verdict"]["checks"]
    return ["| frozen check | measured | |", "|---|---|---|"] + [
        f"| {c['check']} | {c['value']} | {'holds' if c['holds'] else '**fails**'} |" for c in checks]


def provenance_gaps(names: tuple[str, ...], *files: dict[str, Any]) -> list[str]:
    """The results files written without full provenance (commit, clean tree, command, load), what
    each records of it, and a hash of its content (a file changed since shows here)."""
    import hashlib
    import json

    lines = ["| results file | commit | tree | command | load | content sha256 |", "|---|---|---|---|---|---|"]
    for name, d in zip(names, files):
        d = d if isinstance(d, dict) else {}
        tree = {True: "**dirty**", False: "clean"}.get(d.get("dirty"), "not recorded")
        commit = str(d["commit"])[:12] if d.get("commit") else "not recorded"
        lines.append(f"| `{name}` | {commit} | {tree} | {'recorded' if d.get('command') else 'not recorded'} "
                     f"| {'recorded' if d.get('load') else 'not recorded'} "
                     f"| {hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]} |")
    return lines


def docs_kept(r: dict[str, Any]) -> list[str]:
    """bench_docs_kept.py: pages kept per language row of each documentation collection, without
    and with the perplexity-gate reference, and the frozen rule's checks that hold."""
    res = _result(r)
    lines = ["| collection | pages kept, pooled (no reference / reference) | keep rate per language row, no reference "
             "(**bold**: below 0.97) |", "|---|---|---|"]
    a, b = res["variants"]["a_no_reference"], res["variants"]["b_reference"]
    for name, pooled in res["collections"]["a_no_reference"].items():
        rows = [(row.split("/", 1)[1], v["keep_rate"]) for row, v in a.items() if row.split("/", 1)[0] == name]
        rates = ", ".join(f"{lang} **{k:.2f}**" if k < 0.97 else f"{lang} {k:.2f}" for lang, k in rows)
        with_ref = res["collections"]["b_reference"][name]["keep_rate"]
        lines.append(f"| {name} | {pooled['kept']:,} of {pooled['read']:,}: {pooled['keep_rate']:.3f} / {with_ref:.3f} | {rates} |")
    checks = res["verdict"]["checks"]
    same = all(a[row]["kept"] == b[row]["kept"] for row in a)
    lines.append(f"\nFrozen checks that hold: **{sum(c['holds'] for c in checks)} of {len(checks)}**; "
                 f"the reference changes {'no' if same else 'some'} row's pages kept.")
    return lines


def docs_kept_scored(after: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """bench_docs_kept.py scored once after the change, beside the baseline: pages kept pooled per
    collection before -> after, each language row's keep rate and, on the parity collections, its
    gap to English; then the frozen checks that hold before and after."""
    res, base = _result(after), _result(before)
    a = res["variants"]["a_no_reference"]
    lines = ["| collection | pages kept, pooled: before → after (no reference; with reference after) "
             "| keep rate per language row after (**bold**: below 0.97); gap to English where judged |", "|---|---|---|"]
    gaps = {c["check"].split(":")[0]: c for c in res["verdict"]["checks"] if c["variant"] == "a_no_reference" and "English" in c["check"]}
    for name, pooled in res["collections"]["a_no_reference"].items():
        old = base["collections"]["a_no_reference"][name]
        cells = []
        for row, v in a.items():
            if row.split("/", 1)[0] != name:
                continue
            lang, k = row.split("/", 1)[1], v["keep_rate"]
            cell = f"{lang} **{k:.2f}**" if k < 0.97 else f"{lang} {k:.2f}"
            if row in gaps:
                g = gaps[row]
                cell += f" (gap {g['value']:.2f})" if g["holds"] else f" (gap **{g['value']:.2f}**)"
            cells.append(cell)
        with_ref = res["collections"]["b_reference"][name]["keep_rate"]
        lines.append(f"| {name} | {old['keep_rate']:.3f} → {pooled['kept']:,} of {pooled['read']:,}: {pooled['keep_rate']:.3f}; "
                     f"{with_ref:.3f} | {', '.join(cells)} |")
    after_holds = sum(c["holds"] for c in res["verdict"]["checks"])
    before_holds = sum(c["holds"] for c in base["verdict"]["checks"])
    lines.append(f"\nFrozen checks that hold: **{before_holds} → {after_holds} of {len(res['verdict']['checks'])}**; "
                 f"the judgement as a whole {'holds' if res['verdict']['all_hold'] else '**fails**'}.")
    return lines


def _kept_cell(g: dict[str, Any]) -> str:
    """A keep rate with its 95% Wilson interval."""
    return f"{g['keep_rate']:.3f} [{g['wilson95'][0]:.2f}, {g['wilson95'][1]:.2f}]"


def _signal_rows(groups: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """(name, group, target) per clean collection and junk kind; a junk kind's per-collection
    splits are left out, the kind's own row pools them."""
    return [(name, g, "≥ 0.97" if name.startswith("clean/") else "≤ 0.10")
            for name, g in groups.items() if "/" not in name or name.startswith("clean/")]


def quality_signal(r: dict[str, Any]) -> list[str]:
    """bench_quality_signal.py: documents kept per clean collection and per junk kind (all rows
    together), without and with the perplexity-gate reference, with 95% Wilson intervals, the rules
    that removed most without a reference, and the frozen checks that hold."""
    res = _result(r)
    a, b = res["variants"]["a_no_reference"]["groups"], res["variants"]["b_reference"]["groups"]
    lines = ["| text | target | kept, no reference [95% interval] | kept, with reference [95% interval] | removed most by (no reference) |",
             "|---|---|---|---|---|"]
    for name, g, target in _signal_rows(a):
        rules = ", ".join(f"`{x['rule']}` {x['docs']}" for x in g["removed_by"][:2]) or "none"
        lines.append(f"| {name} ({g['docs']}) | {target} | {_kept_cell(g)} | {_kept_cell(b[name])} | {rules} |")
    checks = res["verdict"]["checks"]
    lines.append(f"\nFrozen checks that hold: **{sum(c['holds'] for c in checks)} of {len(checks)}**.")
    return lines


def _checks_held(res: dict[str, Any], base: dict[str, Any], peer: dict[str, Any]) -> str:
    """The frozen checks that hold before → after, and the peer's (one variant)."""
    checks, old, peer_checks = res["verdict"]["checks"], base["verdict"]["checks"], peer["verdict"]["checks"]
    return (f"\nFrozen checks that hold: **{sum(c['holds'] for c in old)} → {sum(c['holds'] for c in checks)} of {len(checks)}** "
            f"(datatrove's recipe, one variant: {sum(c['holds'] for c in peer_checks)} of {len(peer_checks)}).")


def quality_signal_scored(scored: dict[str, Any], baseline: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """bench_quality_signal.py scored once after the change, beside the baseline before any design
    and datatrove's FineWeb recipe on the same set (bench_peer_datatrove.py): share kept per clean
    collection and junk kind, with 95% Wilson intervals, and the frozen checks that hold."""
    res, base, dt = _result(scored), _result(baseline), _result(peer)
    a, b = res["variants"]["a_no_reference"]["groups"], res["variants"]["b_reference"]["groups"]
    before = base["variants"]["a_no_reference"]["groups"]
    lines = ["| text | target | before, no reference | after, no reference | after, with reference | datatrove's FineWeb recipe |",
             "|---|---|---|---|---|---|"]
    for name, g, target in _signal_rows(a):
        lines.append(f"| {name} ({g['docs']}) | {target} | {before[name]['keep_rate']:.3f} | {_kept_cell(g)} "
                     f"| {_kept_cell(b[name])} | {_kept_cell(dt['groups'][name])} |")
    return [*lines, _checks_held(res, base, dt)]


def _scored_with_rule(scored: dict[str, Any], baseline: dict[str, Any], peer: dict[str, Any], rule: str, label: str) -> list[str]:
    """A quality-signal judgement scored once: with a reference (the variant the change touches)
    before and after, the changed rule's own removals, without a reference (the same before and
    after), and datatrove's FineWeb recipe; then the frozen checks that hold."""
    res, base, dt = _result(scored), _result(baseline), _result(peer)
    b, b0 = res["variants"]["b_reference"]["groups"], base["variants"]["b_reference"]["groups"]
    a = res["variants"]["a_no_reference"]["groups"]

    def removed(g: dict[str, Any]) -> int:
        return sum(x["docs"] for x in g["removed_by"] if x["rule"] == rule)

    lines = [f"| text | target | with reference: before | after | removed by {label}, before → after | no reference (before = after) | datatrove's FineWeb recipe |",
             "|---|---|---|---|---|---|---|"]
    for name, g, target in _signal_rows(b):
        lines.append(f"| {name} ({g['docs']}) | {target} | {_kept_cell(b0[name])} | {_kept_cell(g)} | {removed(b0[name])} → {removed(g)} "
                     f"| {a[name]['keep_rate']:.3f} | {_kept_cell(dt['groups'][name])} |")
    return [*lines, _checks_held(res, base, dt)]


def quality_signal2_scored(scored: dict[str, Any], baseline: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """The second quality-signal judgement: the word-order gate (rule model_quality/perplexity)."""
    return _scored_with_rule(scored, baseline, peer, "model_quality/perplexity", "the gate")


def quality_signal4_scored(scored: dict[str, Any], baseline: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """The fourth quality-signal judgement: the non-word rule (model_quality/nonword_frac)."""
    return _scored_with_rule(scored, baseline, peer, "model_quality/nonword_frac", "the non-word rule")


def template_pages(r: dict[str, Any]) -> list[str]:
    """bench_template_pages.py: pages kept per documentation site and per template, without and
    with the reference, the rules that removed most without it, and the frozen checks that hold."""
    res = _result(r)
    a, b = res["variants"]["a_no_reference"], res["variants"]["b_reference"]
    lines = ["| row | pages | target | kept, no reference | kept, with reference | removed most by (no reference) |", "|---|---|---|---|---|---|"]
    for row, v in a.items():
        target = "≤ 0.10" if row.startswith("template/") else "≥ 0.97"
        top = ", ".join(f"`{t['rule']}` {t['pages']}" for t in v["top_rejections"][:2]) or "none"
        lines.append(f"| {row} | {v['read']:,} | {target} | {v['keep_rate']:.3f} | {b[row]['keep_rate']:.3f} | {top} |")
    lines.append(f"\nFrozen checks that hold: **{res['verdict']['holds']} of {res['verdict']['of']}**.")
    return lines


def signal_values(r: dict[str, Any]) -> list[str]:
    """signal_values.py on a scored run: the signal's smallest, median and largest value among the
    documents it measured, for the clean ones and the kinds named below."""
    kinds = _result(r)["kinds"]
    names = {"clean": "clean", "ocr_damage": "OCR damage", "keyboard_typos": "keyboard typos", "word_substitution": "word substitution"}
    lines = ["| documents measured by the rule | smallest | median | largest |", "|---|---|---|---|"]
    for key, name in names.items():
        v = kinds[key]
        lines.append(f"| {name} ({v['measured']}) | {v['q0.0']:.3f} | {v['q0.5']:.3f} | {v['q1.0']:.3f} |")
    return lines


def docs_kept_peer(scored: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """Pages kept per documentation collection: tokenmill's defaults (no reference) beside
    datatrove's FineWeb recipe with Trafilatura on the same HTML pages (bench_peer_datatrove.py)."""
    res, dt = _result(scored), _result(peer)
    lines = ["| collection | pages | tokenmill, defaults | datatrove's FineWeb recipe |", "|---|---|---|---|"]
    for name, c in res["collections"]["a_no_reference"].items():
        d = dt["collections"][name]
        lines.append(f"| {name} | {c['read']:,} | {c['keep_rate']:.3f} | {d['keep_rate']:.3f} |")
    return lines


def docs_kept_fresh(after: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """bench_docs_fresh.py scored once, the code at the freeze beside the code after the change:
    per row its pages, kept before -> after without a reference, after with one, the rule that
    removed most after; per translation its gap to the same pages in English; then the checks."""
    res, base = _result(after), _result(before)
    a, b, old = res["variants"]["a_no_reference"], res["variants"]["b_reference"], base["variants"]["a_no_reference"]
    gaps = {c["check"].split(":")[0]: c for c in res["verdict"]["checks"] if c["variant"] == "a_no_reference" and "|keep - keep of en@" in c["check"]}
    lines = ["| row | pages | kept before → after, no reference | after, with reference | removed most by, after | gap to the same pages in English |",
             "|---|---|---|---|---|---|"]
    for row, v in a.items():
        k = v["keep_rate"]
        after_cell = f"**{k:.3f}**" if k < 0.97 else f"{k:.3f}"
        top = ", ".join(f"`{t['rule']}` {t['pages']}" for t in v["top_rejections"][:2]) or "none"
        g = gaps.get(row)
        gap = "" if g is None else (f"{g['value']:.3f}" if g["holds"] else f"**{g['value']:.3f}**")
        lines.append(f"| {row} | {v['read']:,} | {old[row]['keep_rate']:.3f} → {after_cell} | {b[row]['keep_rate']:.3f} | {top} | {gap} |")
    lines.append(f"\nFrozen checks that hold: **{base['verdict']['holds']} → {res['verdict']['holds']} of {res['verdict']['of']}**; "
                 f"the judgement as a whole {'holds' if res['verdict']['all_hold'] else '**fails**'}.")
    return lines
