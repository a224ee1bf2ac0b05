"""The text form of a `tokenmill plan`: tables of the figures, the layout and its memory, then the
reasons and the assumptions. Every number is formatted from the same `Plan` that `--json` prints."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from tokenmill.scaling.devices import GB
from tokenmill.scaling.parallel import bubble_fraction
from tokenmill.scaling.plan import Plan
from tokenmill.scaling.reference_law import LEVELS_NOTE, PUBLISHED_CHINCHILLA


def sci(x: float) -> str:
    """Up to 4 significant digits: 4.2e+22, 4.594e+22, 143."""
    return f"{x:.4g}"


def _kv(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    for k, v in rows:
        table.add_row(k, v)
    return table


def _wall_clock(plan: Plan) -> str:
    """The predicted time: from timed steps on a CPU (plan.measured), else 6ND at the assumed MFU."""
    m = plan.measured
    if m is None:
        return f"{plan.wall_clock_days:.3g} days ({plan.wall_clock_seconds / 3600:.3g} h) at MFU {plan.mfu:.2f}"
    secs = plan.wall_clock_seconds
    when = f"{secs / 60:.1f} min" if secs < 7200 else f"{secs / 3600:.1f} h"
    return (
        f"{when}: {m['step_seconds']:.3g} s/step measured × {plan.steps:,} steps, with start-up, "
        f"{m['evals']} evaluation(s) and {m['checkpoints']} checkpoint(s) (MFU {plan.mfu:.1%}, measured)"
    )


def figures_rows(plan: Plan) -> list[tuple[str, str]]:
    m, dev, ch = plan.model, plan.device, plan.chinchilla
    rows = [
        (
            "model",
            f"d_model {m['d_model']}, {m['n_layers']} layers, {m['n_heads']} heads ({m['n_kv_heads']} KV), "
            f"{m['ffn']}, vocab {m['vocab_size']}",
        ),
        ("parameters N", sci(plan.params)),
        (
            "tokens D",
            f"{sci(plan.tokens)} ({ch['tokens_per_param']:.3g} per parameter, {ch['overtrain_factor']:.3g}× Chinchilla's 20)",
        ),
        ("training FLOPs 6ND", sci(plan.flops_6nd)),
        ("exact FLOPs (attention, head)", f"{sci(plan.flops_exact)} ({sci(plan.flops_per_token_exact)} per token)"),
        ("steps", f"{plan.steps:,} of {plan.global_batch_tokens:,} tokens"),
        (
            "devices",
            f"{plan.devices} × {dev['name']} ({dev['peak_flops'] / 1e12:.3g} TFLOP/s, {dev['memory_bytes'] / GB:.0f} GB)",
        ),
        ("wall-clock", _wall_clock(plan)),
        ("device-hours", sci(plan.device_hours)),
        ("cost", f"${plan.cost_usd:,.0f} at ${dev['price_per_hour']:.2f}/device-hour"),
        ("compute-optimal for this C", f"N {sci(ch['compute_optimal_params'])}, D {sci(ch['compute_optimal_tokens'])}"),
        *predicted_loss_rows(plan),
    ]
    if plan.inference_aware is not None:
        ia = plan.inference_aware
        rows.append(
            (
                "inference-aware size",
                f"N {sci(ia['params'])}, D {sci(ia['tokens'])} "
                f"({ia['tokens_per_param']:.3g} per parameter); training "
                f"{sci(ia['training_flops'])} + inference {sci(ia['inference_flops'])} "
                f"= {sci(ia['total_flops'])} FLOPs (this plan's model: "
                f"{sci(ia['total_flops_of_plan'])})",
            )
        )
    return rows


def predicted_loss_rows(plan: Plan) -> list[tuple[str, str]]:
    """The published law's loss for N and D, never alone: what the law was fitted on, how far this
    plan lies from its runs, and that nats per token of another tokenizer are not this run's. A
    100M-parameter planner's number applied to a 4M-parameter CPU run is an extrapolation of
    thousands of times, and a reader comparing it with the measured loss must see that first."""
    ch = plan.chinchilla
    verdict = PUBLISHED_CHINCHILLA.range_verdict(plan.params, plan.tokens)
    outside = PUBLISHED_CHINCHILLA.outside_range(plan.params, plan.tokens) is not None
    value = f"{ch['predicted_loss']:.3f} nats/token (compute-optimal for this C: {ch['compute_optimal_loss']:.3f})"
    return [
        ("predicted loss (Chinchilla fit)", value + ("; NOT a prediction for this run, see below" if outside else "")),
        ("  fitted on", f"{PUBLISHED_CHINCHILLA.provenance()}; {LEVELS_NOTE}"),
        ("  extrapolation", verdict),
    ]


def layout_rows(plan: Plan) -> list[tuple[str, str]]:
    assert plan.layout is not None  # render_plan prints no_fit_lines instead when no layout fits
    lay: dict[str, Any] = plan.layout["layout"]
    mem = plan.layout["memory_bytes"]
    step = plan.layout["step_seconds"]
    rows = [
        ("layout", f"TP {lay['tp']} × PP {lay['pp']} × DP {lay['dp']}, ZeRO-{lay['zero']}"),
        (
            "micro-batches",
            f"{lay['micro_batches']} of {lay['micro_batch']} × {lay['seq_len']} tokens per pipeline; "
            f"bubble {bubble_fraction(lay['pp'], lay['micro_batches']):.1%}",
        ),
        ("activation checkpointing", "on" if lay["checkpointing"] else "off"),
    ]
    rows += [(f"memory: {k}", f"{v / GB:.2f} GB") for k, v in mem.items() if k != "total"]
    rows.append(
        ("memory per device", f"{mem['total'] / GB:.2f} GB of {plan.device['memory_bytes'] / GB:.0f} GB (Megatron-style model)")
    )
    tm = plan.trainer_memory
    if tm is not None:
        reserve = lay["reserve_bytes"]
        over = tm["peak"] + reserve > plan.device["memory_bytes"]
        rows.append(
            (
                "tokenmill trainer per rank",
                f"{tm['peak'] / GB:.3f} GB peak on pipeline stage {tm['stage']} + {reserve / GB:.0f} GB reserve "
                f"({tm['dtype']} compute, fp32 weights, gradients and Adam, ZeRO-{lay['zero'] if lay['dp'] > 1 else 0} "
                f"as the trainer runs it; measured within 1.2× on CPU: scaling/rank_memory.py, BENCHMARKS.md); "
                + (
                    f"OVER the device's {plan.device['memory_bytes'] / GB:.0f} GB: the trainer holds more than a "
                    "Megatron-style trainer (fp32 weights and gradients): pick a layout with more sharding (--zero 3, --tp, --pp)"
                    if over
                    else "the search keeps only layouts where this fits too"
                ),
            )
        )
    rows.append(
        (
            "step-time model (ranks layouts)",
            f"{step['total']:.3g} s: compute {step['compute']:.3g}, bubble "
            f"{step['bubble']:.3g}, TP {step['tp_comm']:.3g}, PP "
            f"{step['pp_comm']:.3g}, DP {step['dp_exposed']:.3g} exposed",
        )
    )
    return rows


def no_fit_lines(plan: Plan) -> list[str]:
    """Why no layout fits, and the fewest devices on which one does."""
    nf = plan.no_fit or {}
    lines = [f"[bold red]{nf.get('reason', 'no layout fits')}[/]"]
    if nf.get("fewest_devices"):
        lines.append(
            f"[bold]fewest devices that fit[/]: {nf['fewest_devices']:,} × {plan.device['name']} "
            f"({nf['fewest_layout']}, {nf['fewest_memory_bytes'] / GB:.1f} GB per device); the wall-clock "
            f"above is for {plan.devices} devices and scales as 1/devices at the same MFU"
        )
    elif nf.get("fewest_note"):
        lines.append(f"[bold]fewest devices that fit[/]: {nf['fewest_note']}")
    return lines


def batch_rows(plan: Plan) -> list[tuple[str, str]]:
    """The global batch against each critical-batch estimate: ratio, step and token overheads."""
    rows = []
    for key, label in (("measured", "measured B_simple"), ("published", "published B_crit(L)")):
        v = (plan.batch or {}).get(key)
        if v is None:
            continue
        rows.append(
            (
                label,
                f"{v['critical_batch_tokens']:,.0f} tokens: batch {v['batch_tokens']:,} is "
                f"{v['ratio']:.3g}× it; steps {v['steps_over_min']:.2f}× S_min, tokens "
                f"{v['tokens_over_min']:.2f}× E_min",
            )
        )
        rows.append(("  source", v["source"]))
    rows.append(("verdict", (plan.batch or {}).get("verdict", "")))
    return rows


def roofline_rows(plan: Plan) -> list[tuple[str, ...]]:
    """(op class, GFLOP, GB, FLOP/byte, bound, ms, share) per op class of the plan's roofline."""
    if plan.roofline is None:
        return []
    return [
        (
            r["name"],
            f"{r['flops'] / 1e9:,.1f}",
            f"{r['bytes'] / 1e9:,.2f}",
            f"{r['intensity']:,.1f}",
            r["bound"],
            f"{r['seconds'] * 1e3:,.2f}",
            f"{r['share']:.1%}",
        )
        for r in plan.roofline["rows"]
    ]


ROOFLINE_HEADER = ("op class", "GFLOP", "GB moved", "FLOP/byte", "bound", "ms", "share")


def roofline_title(plan: Plan) -> str:
    rl = plan.roofline or {}
    assert plan.layout is not None  # a roofline is only computed for a layout that fits
    lay = plan.layout["layout"]
    where = "this machine" if plan.device["name"] == "this" else f"one {plan.device['name']}"
    return (
        f"roofline of one micro-batch ({lay['micro_batch']} × {lay['seq_len']} tokens, tp {lay['tp']}, pp "
        f"{lay['pp']}) on {where}: ridge {rl.get('ridge_flops_per_byte', 0):,.0f} FLOP/byte "
        f"({plan.device['peak_flops'] / 1e12:.3g} TFLOP/s over {rl.get('bandwidth', 0) / 1e9:,.0f} GB/s); "
        f"MFU ceiling {rl.get('mfu_ceiling', 0):.0%} with every op at its roof"
    )


def _roofline_table(plan: Plan) -> Table:
    table = Table(title=roofline_title(plan), title_justify="left")
    for h in ROOFLINE_HEADER:
        table.add_column(h, justify="left" if h in ("op class", "bound") else "right")
    for row in roofline_rows(plan):
        table.add_row(*row)
    return table


def render_plan(plan: Plan) -> list[Any]:
    """The renderables `tokenmill plan` prints, in order."""
    roof = [_roofline_table(plan)] if plan.roofline is not None else []
    batch = [_kv("batch vs critical batch", batch_rows(plan))] if plan.batch is not None else []
    if plan.layout is None:
        return [
            _kv("plan", figures_rows(plan)),
            *batch,
            *no_fit_lines(plan),
            "[bold]assumptions[/]",
            *(f"  • {a}" for a in plan.assumptions),
        ]
    return [
        _kv("plan", figures_rows(plan)),
        _kv("layout", layout_rows(plan)),
        *batch,
        *roof,
        "[bold]to train it[/] (this layout as train settings: paste them into the run's config, or launch with)",
        *(f"  {line}" for line in plan.layout.get("train_config", [])),
        f"  [dim]{plan.layout.get('train_command', '')}[/]",
        *(f"  [bold red]tokenmill's trainer refuses it: {why}[/]" for why in plan.layout.get("trainer_refuses", [])),
        "[bold]why this layout[/]",
        *(f"  • {r}" for r in plan.layout_reasons),
        "[bold]assumptions[/]",
        *(f"  • {a}" for a in plan.assumptions),
    ]
