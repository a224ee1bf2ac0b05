"""Fused projections, measured before adopting them: q/k/v as one matmul over concatenated weights,
and gate/up likewise, against separate matmuls (forward + backward over 4096 tokens, fp32 and bf16
autocast, demo width d=256 and d=512; medians of 3 interleaved repeats of 10 timed calls).
tokenmill keeps separate projections: over two runs on 2 Zen 4 cores the fused form changed those
matmuls by -12% to +11% in fp32 and by 0 to +8% in bf16, no consistent gain (BENCHMARKS.md).

    .venv/bin/python benchmarks/bench_fused_projections.py
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F


def bench(fn: Callable[[], None], n: int = 12) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts[2:])


def main() -> None:
    torch.set_num_threads(2)
    for d, h, M in ((256, 704, 4096), (512, 1408, 4096)):
        for dt in (torch.float32, torch.bfloat16):
            x = torch.randn(M, d, requires_grad=True)
            for name, ns in (("qkv", [d, d, d]), ("gate_up", [h, h])):
                ws = [torch.nn.Parameter(torch.randn(n, d) * 0.02) for n in ns]

                def separate() -> None:
                    with torch.autocast("cpu", dt, enabled=dt != torch.float32):
                        ys = [F.linear(x, w) for w in ws]
                        sum(y.float().sum() for y in ys).backward()

                def fused() -> None:
                    with torch.autocast("cpu", dt, enabled=dt != torch.float32):
                        y = F.linear(x, torch.cat(ws))
                        sum(t.float().sum() for t in y.split(ns, -1)).backward()

                r: dict[str, list[float]] = {"separate": [], "fused": []}
                for _ in range(3):  # interleaved
                    r["separate"].append(bench(separate))
                    r["fused"].append(bench(fused))
                s, f = statistics.median(r["separate"]), statistics.median(r["fused"])
                print(f"d={d} {name} {str(dt).removeprefix('torch.')}: separate {s * 1000:.1f} ms, "
                      f"fused {f * 1000:.1f} ms ({f / s - 1:+.0%})")


if __name__ == "__main__":
    main()
