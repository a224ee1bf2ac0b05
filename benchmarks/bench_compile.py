"""When does `train.compile` pay off? Eager vs torch.compile with a cold and a warm graph cache.

For each dtype (fp32, bf16 autocast), per repeat and interleaved, three real training runs of the
same config, each in a fresh process (so no in-memory Dynamo cache carries over): eager; compiled
with an empty TORCHINDUCTOR_CACHE_DIR (cold: Dynamo, AOTAutograd and Inductor do all the work); and
compiled again with the cache the cold run filled (warm: what a second run of the same model
shape on this machine pays). From the trainer's own train_step events: the compile overhead is
step 1's seconds minus the run's median step, and the break-even run length is overhead /
(eager s/step - compiled s/step). `train.compile: auto` (train/compilation.py) compiles runs with at
least `train.compile_min_steps` steps; this benchmark is where that default comes from.

    .venv/bin/python benchmarks/bench_compile.py --run runs/demo --steps 30 --repeats 2 --threads 2
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
from pathlib import Path
from typing import Any

import torch

from tokenmill.config import load_config
from tokenmill.runs import RunDir, read_events

QUIET = ["mixture.phases=[]", "train.eval_every=0", "train.log_every=0", "train.ckpt_every=0"]


def child(src: Path, steps: int, threads: int, dtype: str, compile_: bool, overrides: list[str]) -> dict[str, Any]:
    """One run of the real trainer in this process; its per-step seconds."""
    from tokenmill.train.trainer import run_train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(src / "config.yaml", [*QUIET, *overrides, f"root={tmp}", "name=c", f"train.max_steps={steps}",
                                                f"train.threads={threads}", f"train.dtype={dtype}",
                                                f"train.compile={str(compile_).lower()}"])
        run = RunDir.create(cfg)
        shutil.copytree(src / "tokens", run.path / "tokens")
        run_train(run, resume=False, progress=False)
        secs = [e["seconds"] for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"]
    return {"first": secs[0], "median": statistics.median(secs[5:])}


def run_child(args: argparse.Namespace, dtype: str, compile_: bool, cache: Path) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    cmd = [sys.executable, __file__, "--child", "--run", str(args.run), "--steps", str(args.steps), "--threads",
           str(args.threads), "--dtype", dtype, *(["--compile"] if compile_ else []),
           *[a for o in args.overrides for a in ("--set", o)]]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.run, args.steps, args.threads, args.dtype, args.compile, args.overrides)))
        return
    res: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in range(args.repeats):
        for dtype in args.dtypes.split(","):
            cache = Path(tempfile.mkdtemp(prefix="inductor-"))
            try:
                for kind, comp in (("eager", False), ("compiled, cold cache", True), ("compiled, warm cache", True)):
                    out = run_child(args, dtype, comp, cache)
                    res.setdefault(dtype, {}).setdefault(kind, []).append(out)
                    print(f"repeat {r} {dtype} {kind}: step 1 {out['first']:.2f} s, median {out['median']:.4f} s/step",
                          flush=True)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    summary: dict[str, Any] = {}
    print("\n| dtype | run | s/step | × eager | compile overhead (s) | break-even steps |\n|---|---|---|---|---|---|")
    for dtype, kinds in res.items():
        eager = statistics.median(o["median"] for o in kinds["eager"])
        for kind, outs in kinds.items():
            med = statistics.median(o["median"] for o in outs)
            over = statistics.median(o["first"] - o["median"] for o in outs)
            even = over / (eager - med) if kind != "eager" and eager > med else None
            summary.setdefault(dtype, {})[kind] = {"s_per_step": med, "speedup": eager / med,
                                                   "first_step_overhead_s": over, "break_even_steps": even}
            print(f"| {dtype} | {kind} | {med:.3f} | {eager / med:.2f}× | {over:.1f} | "
                  f"{'' if even is None else f'{even:.0f}'} |")
    cfg = load_config(args.run / "config.yaml", [*QUIET, *args.overrides])
    print(json.dumps({"torch": torch.__version__, "python": platform.python_version(), "threads": args.threads,
                      "cores": len(os.sched_getaffinity(0)), "steps": args.steps, "repeats": args.repeats,
                      "overrides": args.overrides, "model": cfg.model.model_dump(exclude_none=True),
                      "summary": summary, "runs": res}, indent=1))


if __name__ == "__main__":
    main()
