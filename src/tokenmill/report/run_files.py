"""The run directory's files the report sections read: per-step training records, evaluations."""

from __future__ import annotations

import json
from typing import Any

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
    return [json.loads(p.read_text()) for p in files]
