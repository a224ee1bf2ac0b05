"""The report's section for a run that continues another model (`train.init_from`): where it
started, and forgetting measured rather than assumed — held-out bits per byte of every slice
under the inherited weights (the evaluation at step 0) against the latest evaluation, with the
replayed (original) buckets marked (docs/training.md, "Continued pretraining")."""

from __future__ import annotations

import html
from typing import Any

from tokenmill.eval.table import bpb_text
from tokenmill.report.page import table


def _source(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = [e for e in events if e.get("kind") == "init_from"]
    return found[0] if found else None


def section_continued(
    events: list[dict[str, Any]], evals: list[dict[str, Any]], replay: list[str], replay_share: float | None
) -> str:
    """'' for a run that started from its own random init."""
    src = _source(events)
    if src is None:
        return ""
    what = (
        f"HF Llama directory, logits parity max relative difference {src['parity']['max_rel_diff']:.1e}"
        if src.get("format") == "hf-llama" and src.get("parity")
        else f"tokenmill checkpoint at step {src.get('step')}"
        if src.get("format") == "tokenmill"
        else src.get("format")
    )
    out = [
        f"<h2>Continued pretraining</h2><p>Started from <code>{html.escape(str(src.get('from')))}</code> "
        f"({html.escape(str(what))}): its weights, a fresh optimizer and this run's schedule."
        + (
            f" General replay: {replay_share:.0%} of every batch from {', '.join(map(html.escape, replay))}."
            if replay
            else " No replay of the original data."
        )
        + "</p>"
    ]
    before = next((e for e in evals if e.get("step") == 0), None)
    after = evals[-1] if evals and evals[-1].get("step", 0) > 0 else None
    if before is None or after is None:
        out.append(
            "<p class=muted>Forgetting is measured once the run has evaluated at its end: the held-out "
            "slices under the inherited weights (step 0) against the latest evaluation.</p>"
        )
        return "".join(out)
    rows = []
    for bucket, b in before["buckets"].items():
        a = after["buckets"].get(bucket)
        if a is None:
            continue
        delta = a["bpb"] - b["bpb"]
        verdict = f'<span class="{"good" if delta < 0 else "bad"}">{delta:+.4f}</span>'
        rows.append([bucket, "original (replayed)" if bucket in replay else "—", bpb_text(b), bpb_text(a), verdict])
    out += [
        f"<p>Held-out bits per byte under the inherited weights (step 0) and at step {after['step']}; a "
        "rise on a slice of the original data is forgetting.</p>",
        table(["slice", "replay", "bpb before", f"bpb at step {after['step']}", "change"], rows),
    ]
    return "".join(out)
