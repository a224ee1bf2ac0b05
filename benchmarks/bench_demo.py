"""`make demo`'s wall-clock: the whole pipeline on the embedded corpus, in a fresh run directory.

Runs `python -m tokenmill demo --run-dir TMP` as a child process (the command `make demo` runs,
with the installed package) and reads what the run's own event log says: each stage's seconds,
the training dtype and threads, the held-out bits-per-byte of the final evaluation beside the
unigram baseline, and the guard events (spike, skip, rollback) that fired. Target: under 10
minutes on 2 cores.

    .venv/bin/python benchmarks/record.py benchmarks/results/demo_wallclock.json -- benchmarks/bench_demo.py
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
GUARD = ("spike", "skip", "rollback", "rebaseline", "diverged")


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Stage seconds, training setup, final bpb and guard events from one run's event log."""
    done = {e["stage"]: e for e in events if e["kind"] == "stage_done"}
    start = next(e for e in events if e["kind"] == "train_start")
    final = done["eval"]
    return {
        "stage_seconds": {s: round(done[s]["seconds"], 2) for s in STAGES if s in done},
        "train": {"steps": done["train"]["steps"], "tokens": done["train"]["tokens"], "dtype": start["dtype"],
                  "threads": start["threads"], "params": start["params"]},
        "bpb": final["bpb"], "unigram_bpb": final["unigram_bpb"], "eval_step": final["step"],
        "guard_events": sum(1 for e in events if e["stage"] == "train" and e["kind"] in GUARD),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (smoke runs).")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "demo"
        cmd = [sys.executable, "-m", "tokenmill", "demo", "--run-dir", str(run),
               *(x for o in args.overrides for x in ("--set", o))]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    print(json.dumps({"wall_s": round(wall, 1), "target_s": 600, **summarize(events)}, indent=1))


if __name__ == "__main__":
    main()
