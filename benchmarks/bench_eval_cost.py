"""What the final evaluation of a run costs, against an older tokenmill and against its training.

The eval stage (`tokenmill eval`: held-out bits-per-byte by bucket, report samples, memorization
probes, tasks, probes, contamination) of the demo run, timed in fresh processes, interleaved A/B
with the same stage of an older checkout (`--baseline-src`, e.g. a `git worktree` of the commit
before the change), each on its own copy of the run directory; plus, for the current code, where
the time goes (cProfile of one run) and the training steps the evaluation is worth (the demo
run's own median step time from its events).

    git worktree add --detach /tmp/tm-base 4ae2fee
    .venv/bin/python benchmarks/bench_eval_cost.py --run runs/demo --baseline-src /tmp/tm-base/src

Results: benchmarks/results/eval_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import cProfile, json, pstats, sys, time, io
import torch
torch.set_num_threads({threads})
from pathlib import Path
from tokenmill.config import load_config
from tokenmill.runs import RunDir
from tokenmill.eval.evaluate import run_eval
run = RunDir(config=load_config(Path({run!r}) / "config.yaml"), path=Path({run!r}))
prof = cProfile.Profile() if {profile} else None
t0 = time.perf_counter()
if prof: prof.enable()
run_eval(run)
if prof: prof.disable()
out = {{"seconds": time.perf_counter() - t0}}
if prof:
    st = pstats.Stats(prof)
    parts = {{}}
    for (file, line, name), (cc, nc, tt, ct, callers) in st.stats.items():
        for key, (f, n) in {{"held-out bpb": ("evaluate.py", "score"), "memorization": ("memorization.py", "memorization"),
                             "samples": ("evaluate.py", "sample_texts"), "tasks": ("tasks.py", "score_task"),
                             "contamination": ("evaluate.py", "contamination"), "probes": ("probes.py", "score_probes")}}.items():
            if file.endswith(f) and name == n:
                parts[key] = max(parts.get(key, 0.0), ct)
    out["parts"] = parts
print("RESULT " + json.dumps(out))
"""


def eval_once(src: Path, run_copy: Path, threads: int, profile: bool) -> dict[str, Any]:
    shutil.rmtree(run_copy / "eval", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(threads)}
    code = CHILD.format(threads=threads, run=str(run_copy), profile=profile)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def train_step_seconds(run: Path) -> tuple[float, int]:
    steps = {}
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("kind") == "train_step":
            steps[e["step"]] = e["seconds"]
    return statistics.median(steps.values()), len(steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--baseline-src", type=Path, required=True, help="src/ of the older checkout to compare with.")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "eval_cost.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eval-cost-"))
    copies = {}
    for side in ("baseline", "current"):
        copies[side] = work / side
        shutil.copytree(args.run, copies[side], symlinks=True, ignore=shutil.ignore_patterns("tensorboard"))
    srcs = {"baseline": args.baseline_src.resolve(), "current": REPO / "src"}
    times: dict[str, list[float]] = {"baseline": [], "current": []}
    for r in range(args.repeats):
        for side in (("baseline", "current") if r % 2 == 0 else ("current", "baseline")):
            t = eval_once(srcs[side], copies[side], args.threads, profile=False)["seconds"]
            times[side].append(t)
            print(f"repeat {r}: {side}: {t:.1f} s", flush=True)
    parts = {side: eval_once(srcs[side], copies[side], args.threads, profile=True)["parts"] for side in srcs}
    step_s, steps = train_step_seconds(args.run)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"torch": __import__("torch").__version__, "python": platform.python_version(),
              "cores": len(os.sched_getaffinity(0)), "threads": args.threads, "run": str(args.run),
              "baseline_src": str(args.baseline_src), "seconds": times, "median": med,
              "speedup": med["baseline"] / med["current"], "parts_profiled": parts,
              "train_step_median_s": step_s, "train_steps": steps,
              "eval_in_train_steps": {k: v / step_s for k, v in med.items()}}
    print(json.dumps({k: result[k] for k in ("median", "speedup", "parts_profiled", "eval_in_train_steps")}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(args.out)


if __name__ == "__main__":
    main()
