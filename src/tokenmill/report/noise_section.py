"""The report's "Batch size and gradient noise" section: the run's measured B_simple over training
against its global batch, and what the batch costs in steps and tokens (scaling/critical_batch.py)."""

from __future__ import annotations

import html

from tokenmill.report.charts import line_chart
from tokenmill.scaling.critical_batch import batch_verdict, noise_series, summarize_noise


def section_noise(events: list[dict]) -> str:
    """HTML of the section; a one-line reason when the run did not measure the noise scale."""
    start = next((e for e in reversed(events) if e.get("kind") == "train_start"), None)
    if start is None:
        return ""
    info = start.get("noise_scale") or {}
    head = "<h2>Batch size and gradient noise</h2>"
    summary = summarize_noise(events)
    if summary is None or summary.b_simple is None:
        why = info.get("why_not") or "no step logged a usable estimate yet"
        return head + f"<p class=muted>The gradient noise scale was not measured: {html.escape(str(why))}.</p>"
    batch = int(start.get("tokens_per_step") or summary.batch_tokens)
    verdict = batch_verdict(batch, summary.b_simple, "this run")
    series = noise_series(events)
    chart = line_chart(
        {
            "B_simple (EMA)": ([t for t, _ in series], [b for _, b in series]),
            "global batch": ([series[0][0], series[-1][0]], [batch, batch]),
        },
        title="gradient noise scale vs tokens seen",
        xlabel="tokens seen",
        ylabel="tokens",
        logy=True,
    )
    blocks = summary.block_values
    spread = (
        "—"
        if len(blocks) < 2
        else f"{min(blocks):,.0f} – {max(blocks):,.0f} tokens over {len(blocks)} blocks "
        "(B_simple grows as the loss falls, and moves with the curriculum's phases)"
    )
    rows = [
        ("B_simple, steps %d–%d" % (summary.first_step, summary.last_step), f"{summary.b_simple:,.0f} tokens"),
        ("range across blocks of those steps", spread),
        ("global batch", f"{batch:,} tokens = {verdict['ratio']:.3g} × B_simple"),
        ("steps vs the fewest possible (S/S_min)", f"{verdict['steps_over_min']:.2f}"),
        ("tokens vs the fewest possible (E/E_min)", f"{verdict['tokens_over_min']:.2f}"),
        ("verdict", verdict["verdict"]),
    ]
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    note = (
        "B_simple = tr(Σ)/|G|² from the first micro-batch's gradient against the whole step's (McCandlish et "
        "al. 2018), unbiased per step and smoothed; the table's value is the ratio of the per-step means over "
        "the second half of training. The critical batch B_crit ≈ B_simple: training to a loss takes "
        "S = S_min(1 + B_crit/B) steps and E = E_min(1 + B/B_crit) tokens. It grows as the loss falls."
    )
    return head + f"<table>{body}</table><p class=muted>{html.escape(note)}</p>{chart}"
