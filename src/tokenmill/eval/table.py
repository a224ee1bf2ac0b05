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
from tokenmill.tokens.heldout_size import TARGET_HALF_WIDTH, shortfall

_STEP_JSON = re.compile(r"^(\d+)\.json$")


def latest_eval(run_path: Path) -> dict[str, Any] | None:
    """The record of the highest step under `run_path/eval/` (None when nothing was evaluated)."""
    folder = Path(run_path) / "eval"
    steps = [(int(m.group(1)), p) for p in folder.glob("*.json") if (m := _STEP_JSON.match(p.name))] if folder.is_dir() else []
    if not steps:
        return None
    return json_limits.load_file(max(steps)[1])


def bpb_text(m: dict[str, Any], digits: int = 3) -> str:
    """A bucket's bits-per-byte with its 95% interval: "1.936 ± 0.343"; "1.936 (no interval: 1 document)"
    under two documents; the bare figure for a record written before intervals were stored."""
    bpb = f"{m['bpb']:.{digits}f}"
    low, high = m.get("bpb_ci_low"), m.get("bpb_ci_high")
    if low is not None and high is not None:
        return f"{bpb} ± {(high - low) / 2:.{digits}f}"  # the interval is symmetric (bpb_interval)
    if "bpb_ci_low" in m:
        return f"{bpb} (no interval: {m.get('docs', 0)} document{'s' if m.get('docs') != 1 else ''})"
    return bpb


def small_sample(m: dict[str, Any]) -> str:
    """Why a bucket's bits-per-byte is too uncertain to read ("" when it is not): fewer documents
    or tokens than tokens/heldout_size.py asks for, or a measured interval wider than the target
    (buckets whose documents differ a lot, code above all, need more than the floor)."""
    if "docs" not in m or "tokens" not in m:
        return ""
    if lacks := shortfall(int(m["docs"]), int(m["tokens"])):
        return f"scored on {lacks}"
    low, high = m.get("bpb_ci_low"), m.get("bpb_ci_high")
    if low is not None and high is not None and m["bpb"] > 0:
        rel = (high - low) / 2 / m["bpb"]
        if rel > TARGET_HALF_WIDTH:
            return f"95% interval ±{rel:.0%} of bpb, wider than ±{TARGET_HALF_WIDTH:.0%}"
    return ""


def _more_docs(record: dict[str, Any], m: dict[str, Any]) -> str:
    """The setting that gives a bucket more documents: the scoring cap when it is what binds
    (eval.max_docs for a checkpoint's evaluation, train.eval_docs in training), else the split."""
    cap = record.get("docs_per_bucket")
    if isinstance(cap, int) and m.get("docs") == cap:
        return "raise eval.max_docs" if "checkpoint" in record else "raise train.eval_docs"
    return "raise tokenize.val_fraction or tokenize.min_val_docs"


def small_sample_notes(record: dict[str, Any]) -> list[str]:
    """One line per bucket of the record whose bits-per-byte is too uncertain, with what to change."""
    return [
        f"{bucket}: {why}; {_more_docs(record, m)} (docs/evaluation.md)"
        for bucket, m in sorted(record.get("buckets", {}).items())
        if (why := small_sample(m))
    ]


def bpb_table(record: dict[str, Any], with_notes: bool = True) -> Table:
    """Bucket rows: bits-per-byte ± its 95% interval, unigram bits-per-byte, their ratio, loss,
    perplexity, documents; under the table, a line for each bucket scored on too small a sample
    (`with_notes=False`: the caller prints them as lines of their own, which a narrow terminal
    cannot squeeze into the table's width)."""
    notes = small_sample_notes(record) if with_notes else []
    caption = "\n".join(["bpb ± half-width of its 95% interval over documents", *(f"warning: {n}" for n in notes)])
    table = Table(
        title=f"held-out evaluation at step {record.get('step')}", title_justify="left", caption=caption, caption_justify="left"
    )
    for col in ("bucket", "bpb", "unigram bpb", "bpb / unigram", "loss", "ppl", "docs"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for bucket, m in sorted(record.get("buckets", {}).items()):
        uni = m.get("unigram_bpb")
        ratio = f"{m['bpb'] / uni:.3f}" if uni else "—"
        table.add_row(
            bucket,
            bpb_text(m),
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
