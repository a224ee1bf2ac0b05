"""`make demo`'s wall-clock: the whole pipeline on the embedded corpus, in a fresh run directory.

Runs `python -m tokenmill demo --run-dir TMP` as a child process (the command `make demo` runs,
with the installed package) and reads what the run's own event log says: each stage's seconds,
the training dtype and threads, the held-out bits-per-byte of the final evaluation beside the
unigram baseline, and the guard events (spike, skip, rollback) that fired. Targets (issue 54):
under 5 minutes on 2 cores, also where the CPU has no native bf16, and every bucket at most 0.75x
its unigram baseline (`ratio`, `worst_ratio`).

    .venv/bin/python benchmarks/record.py benchmarks/results/demo_wallclock_bf16.json -- benchmarks/bench_demo.py
    .venv/bin/python benchmarks/record.py benchmarks/results/demo_wallclock.json -- benchmarks/bench_demo.py

The first on a CPU with native bf16 (the demo trains in bf16 there), the second on one without
(AVX2 only: fp32). `--set train.dtype=float32` makes a bf16 CPU train in fp32 as the other does,
but at that CPU's fp32 speed (AVX-512 here), not an AVX2 machine's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STAGES = ("curate", "tokenizer", "tokenize", "train", "eval", "report")
TARGET_S = 300  # under 5 minutes on 2 cores
TARGET_RATIO = 0.75  # every bucket's held-out bpb at most this x its unigram baseline's
GUARD = ("spike", "skip", "rollback", "rebaseline", "diverged")


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Stage seconds, training setup, final bpb and guard events from one run's event log."""
    done = {e["stage"]: e for e in events if e["kind"] == "stage_done"}
    start = next(e for e in events if e["kind"] == "train_start")
    final = done["eval"]
    return {
        "stage_seconds": {s: round(done[s]["seconds"], 2) for s in STAGES if s in done},
        "train": {
            "steps": done["train"]["steps"],
            "tokens": done["train"]["tokens"],
            "dtype": start["dtype"],
            "threads": start["threads"],
            "params": start["params"],
        },
        "bpb": final["bpb"],
        "unigram_bpb": final["unigram_bpb"],
        "eval_step": final["step"],
        "ratio": {b: round(final["bpb"][b] / final["unigram_bpb"][b], 4) for b in final["bpb"]},
        "worst_ratio": round(max(final["bpb"][b] / final["unigram_bpb"][b] for b in final["bpb"]), 4),
        "target_ratio": TARGET_RATIO,
        "guard_events": sum(1 for e in events if e["stage"] == "train" and e["kind"] in GUARD),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (smoke runs).")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "demo"
        cmd = [
            sys.executable,
            "-m",
            "tokenmill",
            "demo",
            "--run-dir",
            str(run),
            *(x for o in args.overrides for x in ("--set", o)),
        ]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    print(json.dumps({"wall_s": round(wall, 1), "target_s": TARGET_S, **summarize(events)}, indent=1))


if __name__ == "__main__":
    main()
