"""The lines a person reads on the console when training evaluates held-out buckets
(train.eval_every): one per bucket, so a long run shows how each slice moves, not nothing."""

from __future__ import annotations

from typing import Any, Mapping

from tokenmill.eval.table import bpb_text


def bucket_lines(step: int, buckets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`eval step 125 · web: 1.234 ± 0.052 bits/byte, 0.712 of the unigram's 1.733 (12 documents,
    9,876 tokens)` (± the half-width of the 95% interval over documents),
    one line per bucket in name order; the ratio only where the bucket has a unigram baseline
    (bits-per-byte below it is what the model learned beyond token frequencies)."""
    lines = []
    for bucket, m in sorted(buckets.items()):
        line = f"eval step {step} · {bucket}: {bpb_text(dict(m))} bits/byte"
        uni = m.get("unigram_bpb")
        if uni:
            line += f", {float(m['bpb']) / float(uni):.3f} of the unigram's {float(uni):.3f}"
        counts = [_count(int(m[k]), name) for k, name in (("docs", "document"), ("tokens", "token")) if m.get(k) is not None]
        lines.append(line + (f" ({', '.join(counts)})" if counts else ""))
    return lines


def _count(n: int, name: str) -> str:
    return f"{n:,} {name}{'' if n == 1 else 's'}"
