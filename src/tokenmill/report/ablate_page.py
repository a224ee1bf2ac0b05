"""The page and terminal tables of an ablation (`tokenmill ablate`): Δ bits-per-byte per arm,
slice and size with paired intervals, the bpb-vs-compute lines, the steps ranked by what they
buy, the arms' data and the evaluation set. Self-contained HTML in report.html's style."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from rich.table import Table

from tokenmill.decisions.ablate_stats import ALL
from tokenmill.report.charts import line_chart
from tokenmill.report.mixture_page import _page
from tokenmill.report.page import table
from tokenmill.runs import atomic_write_text


def fmt_ci(ci: dict[str, Any] | None) -> str:
    """'+0.0123 [+0.0050, +0.0196]' (or the mean alone with one seed)."""
    if not ci:
        return "—"
    if ci["low"] is None:
        return f"{ci['mean']:+.4f} (1 seed)"
    return f"{ci['mean']:+.4f} [{ci['low']:+.4f}, {ci['high']:+.4f}]"


def fmt_mult(m: dict[str, Any] | None) -> str:
    if not m or m.get("value") is None:
        return "—" if not m else f"— ({m.get('why', '')})"
    return f"{m['value']:.2f}×" + (" (extrapolated)" if m["extrapolated"] else "")


def _sizes(result: dict[str, Any]) -> list[str]:
    return [s["name"] for s in result["sizes"] if s["name"] in result.get("flops", {})]


def headline_text(result: dict[str, Any]) -> str:
    h = result.get("headline")
    if not h or not h.get("delta_all"):
        return ""
    d = h["delta_all"]
    word = {"better": "better than", "worse": "worse than", "within noise": "within noise of"}[d["verdict"]]
    trend = h["trend"]["trend"] if h.get("trend") else "not measured"
    return (
        f"{h['arm']} is {word} {result['reference']} at {h['size']}: Δ bpb {fmt_ci(d)} "
        f"({result['confidence']:.0%} paired interval over {d['n']} seeds; negative: {h['arm']} better). "
        f"The gap {trend} with size. Data-efficiency multiplier: {fmt_mult(h['multiplier'])}."
    )


def section_deltas(result: dict[str, Any]) -> str:
    sizes, metrics = _sizes(result), result["metrics"]
    rows = []
    for arm, d in result["deltas"].items():
        for s in sizes:
            cells = []
            for m in metrics:
                ci = d["delta"].get(m, {}).get(s)
                # the verdict already knows the metric's direction (bpb: lower is better; accuracy: higher)
                cls = {"better": "good", "worse": "bad"}.get(ci["verdict"], "muted") if ci else "muted"
                cells.append(f"<span class={cls}>{html.escape(fmt_ci(ci))}</span>")
            rows.append([arm, s, *cells])
    head = ["arm", "size", *(("Δ bpb " + m) if not m.startswith("task:") else f"Δ acc {m[5:]}" for m in metrics)]
    return (
        f"<h2>Δ against {html.escape(result['reference'])}</h2><p>arm − {html.escape(result['reference'])}, "
        f"seed by seed, mean and {result['confidence']:.0%} t interval. bpb: negative means the arm is better; "
        "accuracy: positive. <span class=good>green</span>: better beyond noise, <span class=bad>red</span>: worse.</p>"
        + _raw_table(head, rows)
    )


def _raw_table(header: list[str], rows: list[list[str]]) -> str:
    """A table whose cells are already HTML."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c if c.startswith('<') else html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def section_lines(result: dict[str, Any]) -> str:
    sizes = _sizes(result)
    flops = result["flops"]
    series = {
        arm: ([flops[s] for s in sizes], [result["means"][arm][s][ALL] for s in sizes])
        for arm in result["means"]
        if all(ALL in result["means"][arm].get(s, {}) for s in sizes)
    }
    chart = line_chart(
        series,
        title="bits-per-byte over every slice vs training compute",
        xlabel="training FLOPs",
        ylabel="bpb (all slices)",
        markers=True,
    )
    rows = []
    for arm, line in result["lines"].items():
        d = result["deltas"].get(arm)
        trend = d["trend"] if d else None
        rows.append(
            [
                arm,
                *(result["means"][arm].get(s, {}).get(ALL) for s in sizes),
                line["b"] if line else None,
                "reference" if d is None else (f"{trend['trend']} (change {fmt_ci(trend['change'])})" if trend else "—"),
                "reference" if d is None else fmt_mult(d["multiplier"]),
            ]
        )
    return (
        "<h2>Loss against compute</h2><p>Each arm's line log bpb = a + b·log C through its per-size means "
        "(C = training FLOPs, the same formula for every arm). A parallel shift (the gap holds) is what "
        "'data quality is a scaling law' claims; the change of the paired gap from the smallest to the largest size measures it. The multiplier: "
        "the compute the arm's line needs to reach the reference's bpb at the largest size, over that size's "
        "compute.</p>"
        + chart
        + table(["arm", *(f"bpb {s}" for s in sizes), "slope b", "gap with size", "data-efficiency multiplier"], rows)
    )


def section_ranking(result: dict[str, Any]) -> str:
    if not result.get("ranking"):
        return ""
    rows = [
        [
            ", ".join(r["steps"]),
            r["arm"],
            fmt_ci({"mean": r["contribution_bpb"], "low": r["low"], "high": r["high"]}),
            r["verdict"],
            "—" if r["tokens_removed_share"] is None else f"{r['tokens_removed_share']:.1%}",
        ]
        for r in result["ranking"]
    ]
    return (
        "<h2>Steps ranked by what they buy</h2><p>At the largest size: the bpb an arm loses with the step off "
        "(positive: the step helps), and the share of that arm's training tokens the step removes.</p>"
        + table(["step(s)", "arm", "Δ bpb without it", "verdict", "tokens it removes"], rows)
    )


def power_rows(result: dict[str, Any]) -> list[list[str]]:
    """Per size: seeds, the median paired spread and the smallest Δ bpb the design detects."""
    return [
        [size, str(p["seeds"]), f"{p['paired_sd']:.4f}", "—" if p["detectable_bpb"] is None else f"{p['detectable_bpb']:.4f}"]
        for size, p in (result.get("power") or {}).items()
    ]


POWER_COLUMNS = ["size", "seeds", "paired sd of Δ bpb", "smallest Δ bpb it detects"]


def section_power(result: dict[str, Any]) -> str:
    rows = power_rows(result)
    if not rows:
        return ""
    p = next(iter(result["power"].values()))["power"]
    return (
        "<h2>What this design can see</h2><p>From the measured spread of the paired differences over "
        f"seeds: a true Δ bpb at least this large is found with probability {p:.0%} at the "
        f"{result['confidence']:.0%} level. A multiplier or a ranking place is given only where the "
        "interval at the largest size excludes zero.</p>" + table(POWER_COLUMNS, rows)
    )


def section_arms(result: dict[str, Any]) -> str:
    sizes = [s["name"] for s in result["sizes"]]
    rows = [
        [
            arm,
            a["note"],
            ", ".join(a["steps"]),
            "; ".join(a["set"]),
            f"{a['train_tokens']:,}",
            a.get("same_data_as") or "",
            *(a["epochs"][s] for s in sizes),
            a["data_seconds"],
        ]
        for arm, a in result["arms"].items()
    ]
    es = result["eval_set"]["slices"]
    return (
        "<h2>Arms</h2><p>An arm with the same training data as another (its step removed nothing "
        "here) differs from it by nothing: its Δ is 0 by construction.</p>"
        + table(
            [
                "arm",
                "note",
                "steps",
                "overrides",
                "training tokens",
                "same training data as",
                *(f"epochs at {s}" for s in sizes),
                "data stages (s)",
            ],
            rows,
        )
        + f"<h2>Evaluation set</h2><p>The same bytes for every arm, picked from the extract + normalize output "
        f"before any filter, and decontaminated against every arm's training data. Tokenizer trained on "
        f"{html.escape(result['tokenizer_from'])}'s data, shared by all.</p>"
        + table(["slice", "documents", "bytes", "from"], [[k, v["docs"], v["bytes"], v["from"]] for k, v in es.items()])
        + f"<p class=muted>{len(result['runs'])} runs; training {result['train_seconds'] / 60:.1f} min, data stages "
        f"{result['data_seconds'] / 60:.1f} min.</p>"
    )


def render_ablate_page(result: dict[str, Any]) -> str:
    body = []
    if "deltas" in result:
        text = headline_text(result)
        body += ([f"<p><b>{html.escape(text)}</b></p>"] if text else []) + [
            section_deltas(result),
            section_power(result),
            section_ranking(result),
            section_lines(result),
        ]
    else:
        body.append("<p class=muted>No comparison yet: the reference and at least one other arm need finished runs.</p>")
    body.append(section_arms(result))
    return _page(f"Curation ablation: {result['name']}", body)


def write_ablate_page(out: Path, result: dict[str, Any]) -> Path:
    path = out / "ablate.html"
    atomic_write_text(path, render_ablate_page(result))
    return path


def terminal_tables(result: dict[str, Any]) -> list[Table]:
    """Δ bpb over every slice per arm and size, and the ranking, for the terminal."""
    if "deltas" not in result:
        return []
    sizes = _sizes(result)
    t = Table(
        title=f"Δ bpb (all slices) against {result['reference']}, {result['confidence']:.0%} paired interval; negative: better"
    )
    for col in ("arm", *sizes, "gap with size", "multiplier"):
        t.add_column(col, justify="left" if col == "arm" else "right")
    for arm, d in result["deltas"].items():
        cells = [fmt_ci(d["delta"][ALL].get(s)) for s in sizes]
        same = result["arms"].get(arm, {}).get("same_data_as")
        t.add_row(
            arm + (f" (= {same}'s data)" if same else ""),
            *cells,
            d["trend"]["trend"] if d["trend"] else "—",
            fmt_mult(d["multiplier"]),
        )
    tables = [t]
    if result.get("ranking"):
        r = Table(title="steps ranked by what they buy (largest size)")
        for col in ("step(s)", "Δ bpb without it", "verdict", "tokens it removes"):
            r.add_column(col, justify="left" if col == "step(s)" else "right")
        for row in result["ranking"]:
            r.add_row(
                ", ".join(row["steps"]),
                fmt_ci({"mean": row["contribution_bpb"], "low": row["low"], "high": row["high"]}),
                row["verdict"],
                "—" if row["tokens_removed_share"] is None else f"{row['tokens_removed_share']:.1%}",
            )
        tables.append(r)
    if power_rows(result):
        p = Table(title="what this design can see (80% power; multiplier and ranking only where resolved)")
        for col in POWER_COLUMNS:
            p.add_column(col, justify="left" if col == "size" else "right")
        for row in power_rows(result):
            p.add_row(*row)
        tables.append(p)
    return tables
