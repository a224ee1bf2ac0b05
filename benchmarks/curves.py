"""Reading a loss curve: when it first reaches a value. Plain Python, so the BENCHMARKS tables
(benchmarks/tables.py) can use it without importing torch."""

from __future__ import annotations


def time_to_reach(curve: list[dict[str, float]], target: float, first_step_s: float = 0.0) -> float | None:
    """Training seconds at which the curve first reaches `target` bpb (linear between evaluations;
    None if it never does); `first_step_s` is taken off when the compile step is left out."""
    prev = None
    for p in curve:
        if p["bpb"] <= target:
            if prev is None:
                return p["seconds"] - first_step_s
            frac = (prev["bpb"] - target) / (prev["bpb"] - p["bpb"])
            return prev["seconds"] + frac * (p["seconds"] - prev["seconds"]) - first_step_s
        prev = p
    return None
