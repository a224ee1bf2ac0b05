"""Beside each memorization hit and canary of the report: the training documents it traces back
to (eval/trace.py: exact token n-gram overlap, embedding similarity, the steps that trained on them)."""

from __future__ import annotations

import html
from typing import Any

from tokenmill.report.page import table


def _steps(d: dict[str, Any]) -> str:
    shown = ", ".join(map(str, d["steps"][:8]))
    more = f" … ({d['steps_count']} steps)" if d["steps_count"] > 8 else ""
    return shown + more if shown else "never sampled"


def documents_table(docs: list[dict[str, Any]], ngrams: int | None) -> str:
    rows = [
        [
            html.escape(d["doc_id"]),
            html.escape(d["bucket"]),
            html.escape(str(d.get("source") or d.get("url") or "—")),
            f"{d['ngram_overlap']}/{ngrams}" if ngrams is not None else d["ngram_overlap"],
            "—" if d["similarity"] is None else d["similarity"],
            _steps(d),
        ]
        for d in docs
    ]
    return table(["traced document", "bucket", "source", "n-gram overlap", "similarity", "trained at steps"], rows)


def memorization_traces(mem: dict[str, Any]) -> str:
    """Every traced memorization hit: the passage continued exactly and its nearest training documents."""
    hits = mem.get("hits") or []
    if not hits:
        return ""
    total = mem.get("hits_total", len(hits))
    out = [f"<p>Training passages continued exactly: {total} (the first {len(hits)} traced to their documents).</p>"]
    for h in hits:
        text = h["text"] if len(h["text"]) <= 300 else h["text"][:299] + "…"
        out.append(f"<pre>{html.escape(text)}</pre>" + documents_table(h["documents"], h.get("ngrams")))
    return "<details><summary>memorized passages, traced</summary>" + "".join(out) + "</details>"


def canary_traces(rows: list[dict[str, Any]]) -> str:
    """Each canary's documents (it was inserted k times) and the steps that trained on them."""
    traced = [r for r in rows if r.get("trace")]
    if not traced:
        return ""
    out = []
    for r in traced:
        out.append(
            f"<p class=muted>canary {r['count']}×#{r['index']} · exposure {r['exposure_empirical']:.2f} bits</p>"
            + documents_table(r["trace"], None)
        )
    return "<details><summary>canaries, traced to their documents</summary>" + "".join(out) + "</details>"
