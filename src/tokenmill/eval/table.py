"""The evaluation a person reads at the end of `tokenmill run` / `demo`: one table per run.

Bits-per-byte first (comparable across tokenizers), the unigram baseline beside it, then loss and
perplexity; the numbers come from the newest `eval/<step>.json`, nothing is recomputed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.table import Table

from tokenmill import json_limits

_STEP_JSON = re.compile(r"^(\d+)\.json$")


def latest_eval(run_path: Path) -> dict[str, Any] | None:
    """The record of the highest step under `run_path/eval/` (None when nothing was evaluated)."""
    folder = Path(run_path) / "eval"
    steps = [(int(m.group(1)), p) for p in folder.glob("*.json") if (m := _STEP_JSON.match(p.name))] if folder.is_dir() else []
    if not steps:
        return None
    return json_limits.load_file(max(steps)[1])


def bpb_table(record: dict[str, Any]) -> Table:
    """Bucket rows: bits-per-byte, unigram bits-per-byte, their ratio, loss, perplexity, documents."""
    table = Table(title=f"held-out evaluation at step {record.get('step')}", title_justify="left")
    for col in ("bucket", "bpb", "unigram bpb", "bpb / unigram", "loss", "ppl", "docs"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for bucket, m in sorted(record.get("buckets", {}).items()):
        uni = m.get("unigram_bpb")
        ratio = f"{m['bpb'] / uni:.3f}" if uni else "—"
        table.add_row(
            bucket,
            f"{m['bpb']:.3f}",
            f"{uni:.3f}" if uni else "—",
            ratio,
            f"{m['loss']:.3f}",
            f"{m['ppl']:.1f}",
            str(m.get("docs", "")),
        )
    return table


def tasks_table(record: dict[str, Any]) -> Table | None:
    """Task rows: accuracy, normalized accuracy (or mean log-prob), items, contamination share."""
    tasks = record.get("tasks") or []
    if not tasks:
        return None
    contamination = record.get("contamination") or {}
    table = Table(title=f"tasks at step {record.get('step')}", title_justify="left")
    for col in ("task", "format", "shots", "items", "acc", "acc_norm / mean logprob", "contamination"):
        table.add_column(col, justify="left" if col in ("task", "format") else "right")
    for t in tasks:
        c = contamination.get(t["name"], {})
        share = f"{c['share']:.1%}" + (" FLAGGED" if c.get("flagged") else "") if "share" in c else "—"
        second = t.get("acc_norm", t.get("mean_logprob"))
        table.add_row(
            t["name"],
            t.get("format", ""),
            str(t.get("shots", 0)),
            str(t.get("n", "")),
            f"{t['acc']:.3f}",
            "—" if second is None else f"{second:.3f}",
            share,
        )
    return table
