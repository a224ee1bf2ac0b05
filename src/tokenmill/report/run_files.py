"""The run directory's files the report sections read: per-step training records, evaluations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenmill import json_limits
from tokenmill.runs import RunDir


def train_curve(events: list[dict]) -> dict[str, list[Any]]:
    """Per-step training metrics; a step replayed after a resume keeps its last record."""
    by_step: dict[int, dict] = {}
    for e in events:
        if e.get("kind") == "train_step":
            by_step[int(e["step"])] = e
    steps = sorted(by_step)
    keys = ("loss", "lr", "grad_norm", "tokens_per_s", "mfu")
    return {"step": steps, **{k: [by_step[s].get(k) for s in steps] for k in keys}}


def eval_history(run: RunDir) -> list[dict]:
    files = sorted(run.sub("eval").glob("*.json"), key=lambda p: int(p.stem)) if run.sub("eval").exists() else []
    return [json_limits.load_file(p) for p in files]


def watch_history(run_path: Path) -> list[dict[str, Any]]:
    """The records `tokenmill eval --watch` wrote (eval/watch/step_<N>.json), by step; a torn or
    foreign file is skipped, so the report never fails on one."""
    folder = Path(run_path) / "eval" / "watch"
    out = []
    for p in sorted(folder.glob("step_*.json")) if folder.is_dir() else []:
        try:
            rec = json_limits.load_file(p)
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step"), int) and isinstance(rec.get("buckets"), dict):
            out.append(rec)
    return sorted(out, key=lambda r: r["step"])
