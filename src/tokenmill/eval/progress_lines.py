"""The lines a person reads on the console when training evaluates held-out buckets
(train.eval_every): one per bucket, so a long run shows how each slice moves, not nothing."""

from __future__ import annotations

from typing import Any, Mapping


def bucket_lines(step: int, buckets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`eval step 125 · web: 1.234 bits/byte, 0.712 of the unigram's 1.733 (12 docs, 9,876 tokens)`,
    one line per bucket in name order; the ratio only where the bucket has a unigram baseline
    (bits-per-byte below it is what the model learned beyond token frequencies)."""
    lines = []
    for bucket, m in sorted(buckets.items()):
        line = f"eval step {step} · {bucket}: {float(m['bpb']):.3f} bits/byte"
        uni = m.get("unigram_bpb")
        if uni:
            line += f", {float(m['bpb']) / float(uni):.3f} of the unigram's {float(uni):.3f}"
        counts = [f"{int(m[k]):,} {k}" for k in ("docs", "tokens") if m.get(k) is not None]
        lines.append(line + (f" ({', '.join(counts)})" if counts else ""))
    return lines
