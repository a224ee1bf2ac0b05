"""The scaling page of a sweep (`tokenmill scaling fit`): the fitted laws with their bootstrap
intervals, the IsoFLOP minima, each held-out run's prediction against its actual loss, and the
charts. Self-contained HTML like report.html (same style), written beside results.json."""

from __future__ import annotations

import html
import time
from typing import Any

from tokenmill import json_limits
from tokenmill import __version__
from tokenmill.report.page import CSS, table
from tokenmill.scaling.analysis import ScalingAnalysis
from tokenmill.report.fit_charts import all_charts


def _interval(iv: list[float] | None) -> str:
    return "—" if iv is None else f"[{iv[0]:.4g}, {iv[1]:.4g}]"


def section_laws(d: dict[str, Any]) -> str:
    fit, iv = d["chinchilla"]["fit"], d["chinchilla"]["intervals"]
    rows = [[k, fit[k], _interval(iv.get(k))] for k in ("E", "A", "B", "alpha", "beta", "a", "b")]
    out = [
        "<h2>Fitted law L(N, D) = E + A/N<sup>α</sup> + B/D<sup>β</sup></h2>",
        f"<p>Chinchilla approach 3 (Huber δ={fit['huber_delta']} on log loss) over {fit['runs']} sweep runs; "
        f"N = non-embedding parameters, D = training tokens. a = β/(α+β) and b = α/(α+β) are the "
        f"compute-optimal exponents (N* ∝ C<sup>a</sup>, D* ∝ C<sup>b</sup>). Intervals: "
        f"{d['chinchilla']['samples']} bootstrap resamples of the runs.</p>",
        table(["parameter", "fit", "bootstrap interval"], rows),
    ]
    cf = d.get("compute_frontier")
    if cf:
        out.append(
            f"<p>Compute frontier (Kaplan-style, on the IsoFLOP minima): L(C) = {cf['E_c']:.4g} + "
            f"({cf['C_c']:.4g}/C)<sup>{cf['alpha_c']:.4g}</sup>.</p>"
        )
    sl = d.get("size_law")
    if sl:
        out.append(f"<p>Size law (best loss per size): L(N) = ({sl['N_c']:.4g}/N)<sup>{sl['alpha_n']:.4g}</sup>.</p>")
    return "".join(out)


def section_isoflop(d: dict[str, Any]) -> str:
    minima = d["isoflop"].get("minima") or []
    if not minima:
        return ""
    rows = [
        [
            f"{m['budget']:.3g}",
            m["sizes"],
            f"{m['params']:.4g}",
            f"{m['tokens']:.4g}",
            m["loss"],
            "yes" if m.get("interior") else "no (edge)",
        ]
        for m in minima
    ]
    return (
        "<h2>IsoFLOP minima</h2><p>Per budget, a parabola of loss against log N through its runs; its vertex "
        "is the compute-optimal size at that budget.</p>"
        + table(["budget (FLOPs)", "sizes", "N*", "D*", "loss at N*", "inside the swept sizes"], rows)
    )


def section_holdout(d: dict[str, Any]) -> str:
    if not d["holdout"]:
        return "<h2>Held-out runs</h2><p class=muted>The sweep has no held-out run.</p>"
    rows = []
    for h in d["holdout"]:
        err = h["relative_error"]
        rows.append(
            [
                h["name"],
                f"{h['params']:,}",
                f"{h['tokens']:,}",
                f"{h['flops']:.3g}",
                h["predicted"],
                _interval(h["interval"]),
                h["actual"],
                f'<span class="{"good" if abs(err) <= 0.03 else "bad"}">{err:+.2%}</span>',
            ]
        )
    return (
        "<h2>Held-out runs: predicted vs actual</h2><p>Runs the fit never saw; the prediction is L(N, D) of "
        "the fitted law at the run's N and D.</p>"
        + table(["run", "N", "D", "FLOPs", "predicted loss", "interval", "actual loss", "error"], rows)
    )


def section_noise(d: dict[str, Any]) -> str:
    if not d.get("noise"):
        return ""
    rows = [
        [
            ", ".join(n["names"]),
            f"{n['params']:,}",
            f"{n['tokens']:,}",
            " / ".join(f"{x:.4f}" for x in n["losses"]),
            f"{n['std']:.4f}",
            f"{n['relative_std']:.2%}",
            f"{n['relative_range']:.2%}",
        ]
        for n in d["noise"]
    ]
    return (
        "<h2>Run-to-run noise</h2><p>Sweep pairs trained again with other seeds (initialization and batch "
        "order): a prediction cannot be checked more finely than this spread.</p>"
        + table(["runs", "N", "D", "final losses", "std", "std / mean", "range / mean"], rows)
    )


def section_backtest(d: dict[str, Any]) -> str:
    b = d.get("backtest")
    if not b:
        return ""
    rows = [
        [n, p, x, f'<span class="{"good" if abs(e) <= 0.03 else "bad"}">{e:+.2%}</span>']
        for n, p, x, e in zip(b["names"], b["predicted"], b["actual"], b["errors"])
    ]
    fitted = ", ".join(f"{c:.3g}" for c in b["fitted_budgets"])
    return (
        f"<h2>Backtest</h2><p>The law refitted on budgets {fitted} only, predicting the runs of the largest "
        f"budget ({b['budget']:.3g}): an extrapolation made from the sweep's own data, before any "
        "held-out run.</p>" + table(["run", "predicted loss", "actual loss", "error"], rows)
    )


def section_registered(pending: list[dict[str, Any]], registered: list[dict[str, Any]]) -> str:
    """Predictions written down before their runs finished, and the runs still to come."""
    rows = []
    for p in registered:
        err = p["relative_error"]
        rows.append(
            [
                p["name"],
                p["registered_at"],
                p["predicted"],
                _interval(p.get("interval")),
                "pending" if p["actual"] is None else p["actual"],
                "" if err is None else f'<span class="{"good" if abs(err) <= 0.03 else "bad"}">{err:+.2%}</span>',
            ]
        )
    done = {p["name"] for p in registered}
    rows += [
        [p["name"], "not registered", p["predicted"], _interval(p.get("interval")), "pending", ""]
        for p in pending
        if p["name"] not in done
    ]
    if not rows:
        return ""
    return (
        "<h2>Pre-registered predictions</h2><p>Written to predictions.json by <code>tokenmill scaling fit "
        "--register</code> before the held-out run finished, never overwritten by later fits.</p>"
        + table(["run", "registered (UTC)", "predicted loss", "interval", "actual loss", "error"], rows)
    )


def render_scaling(
    a: ScalingAnalysis, title: str, pending: list[dict[str, Any]] | None = None, registered: list[dict[str, Any]] | None = None
) -> str:
    d = a.to_dict()
    charts = "".join(f"<h3>{html.escape(name)}</h3>{svg}" for name, svg in all_charts(a).items())
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in d["notes"])
    runs = table(
        ["run", "role", "N", "D", "FLOPs", "loss"],
        [[r["name"], r["role"], f"{r['params']:,}", f"{r['tokens']:,}", f"{r['flops']:.3g}", r["loss"]] for r in d["runs"]],
    )
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class=muted>tokenmill {__version__} · generated {time.strftime('%Y-%m-%d %H:%M:%S')}</p>",
        section_holdout(d),
        section_registered(pending or [], registered or []),
        section_noise(d),
        section_backtest(d),
        section_laws(d),
        section_isoflop(d),
        "<h2>Charts</h2>",
        charts,
        f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "",
        "<h2>Runs</h2>",
        runs,
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} — tokenmill</title>"
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>"
    )


# -- the Scaling section of a run's report.html --------------------------------------------------


def _median(values: list[float | None]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    return vals[len(vals) // 2] if vals else None


def _device_of_run(events: list[dict]) -> Any:
    """This machine as the run measured it (train_start's peak_flops): the plan needs a peak, and a
    report built on a machine never calibrated should still show one; the first error when the run
    logged none either."""
    import os

    import torch

    from tokenmill.scaling.devices import THIS_NETWORK, DeviceSpec, get_device

    starts = [e for e in events if e.get("kind") == "train_start" and isinstance(e.get("peak_flops"), (int, float))]
    if not starts or not starts[-1]["peak_flops"] > 0:
        return get_device("this")  # raises the calibration error, which names the command to run
    start = starts[-1]
    cuda = str(start.get("device", "")).startswith("cuda") and torch.cuda.is_available()
    memory = (
        torch.cuda.get_device_properties(0).total_memory if cuda else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    )
    return DeviceSpec(
        name="this",
        description=f"{start.get('device')}, {start.get('dtype')}, at the peak the run measured: "
        f"{start.get('peak_origin') or start.get('peak_source')}",
        peak_flops=float(start["peak_flops"]),
        memory_bytes=float(memory),
        devices_per_node=1,
        intra_node_bandwidth=THIS_NETWORK,
        inter_node_bandwidth=THIS_NETWORK,
        peak_source="measured by the run",
    )


def _run_plan(run: Any, events: list[dict]) -> str:
    """`tokenmill plan --config` for this run on this machine, beside what the run measured."""
    from tokenmill.errors import UserError
    from tokenmill.scaling.devices import get_device
    from tokenmill.scaling.plan import plan_for, resolve_inputs
    from tokenmill.scaling.plan_report import ROOFLINE_HEADER, figures_rows, layout_rows, roofline_rows, roofline_title

    steps = [e for e in events if e.get("kind") == "train_step"]
    mfu = _median([e.get("mfu") for e in steps])
    try:
        try:
            spec = get_device("this")
        except UserError:  # not calibrated: the peak the run measured for its own MFU is this machine's
            spec = _device_of_run(events)
        inputs = resolve_inputs(run_cfg=run.config, devices=1)
        plan = plan_for(inputs, 1, spec, mfu or 0.38)  # inputs.run_cfg is run.config
    except UserError as exc:
        return f"<h3>Plan</h3><p class=muted>No plan for this machine: {html.escape(str(exc))}</p>"
    rows = [[k, v] for k, v in figures_rows(plan) + layout_rows(plan)]  # table() escapes
    done = run.finished("train") or {}
    peak = max((e.get("memory_peak") or 0 for e in steps), default=0)
    actual = [
        ["train seconds (measured)", done.get("summary", {}).get("seconds", "—")],
        ["median MFU (measured)", "—" if mfu is None else f"{mfu:.3f}"],
        ["peak memory (measured)", f"{peak / 1e9:.2f} GB" if peak else "—"],
    ]
    assumptions = "".join(f"<li>{html.escape(a)}</li>" for a in plan.assumptions)
    roof = (
        "<p class=muted>No roofline: this machine's memory bandwidth is not known (the GPU presets have it: "
        "<code>tokenmill plan --device h100</code>).</p>"
        if plan.roofline is None
        else f"<h4>Roofline</h4><p>{html.escape(roofline_title(plan))}</p>"
        + table(list(ROOFLINE_HEADER), [list(r) for r in roofline_rows(plan)])
    )
    return (
        "<h3>Plan</h3><p>What <code>tokenmill plan --config</code> says of this run on this machine "
        f"({html.escape(plan.device['description'])}), at the run's measured median MFU when it has one.</p>"
        + table(["figure", "plan"], rows)
        + table(["figure", "run"], actual)
        + roof
        + f"<details><summary>assumptions</summary><ul>{assumptions}</ul></details>"
    )


def _sweep_fit(run: Any) -> str:
    """When the run belongs to a sweep that was fitted: the law, and this run's prediction."""
    fit_path = run.path.parent.parent / "fit.json"
    if not fit_path.is_file():
        return ""
    d = json_limits.load_file(fit_path)
    f = d["chinchilla"]["fit"]
    mine = [r for r in d["runs"] if r["name"] == run.path.name]
    out = [
        f"<h3>Fitted law of the sweep</h3><p>From <code>{html.escape(str(fit_path))}</code>: L(N, D) = "
        f"{f['E']:.4g} + {f['A']:.4g}/N<sup>{f['alpha']:.4g}</sup> + {f['B']:.4g}/D<sup>{f['beta']:.4g}</sup> "
        f"({f['runs']} runs).</p>"
    ]
    if mine:
        r = mine[0]
        pred = f["E"] + f["A"] / r["params"] ** f["alpha"] + f["B"] / r["tokens"] ** f["beta"]
        out.append(
            table(
                ["this run", "N", "D", "predicted loss", "actual loss", "error"],
                [[r["name"], f"{r['params']:,}", f"{r['tokens']:,}", pred, r["loss"], f"{(pred - r['loss']) / r['loss']:+.2%}"]],
            )
        )
    registered = [p for p in d.get("registered") or [] if p["name"] == run.path.name]
    if registered:
        p = registered[0]
        err = "pending" if p["relative_error"] is None else f"{p['relative_error']:+.2%}"
        actual = "—" if p["actual"] is None else f"{p['actual']:.4f}"
        out.append(
            f"<p>Pre-registered for this run at {html.escape(p['registered_at'])} (before it was trained): "
            f"predicted {p['predicted']:.4f}, actual {actual}, error {err}.</p>"
        )
    return "".join(out)


def section_scaling(run: Any, events: list[dict]) -> str:
    """The Scaling section of report.html: the planner's figures and assumptions for this run, and
    the fitted law when the run is part of a fitted sweep."""
    return "<h2>Scaling</h2>" + _run_plan(run, events) + _sweep_fit(run)
