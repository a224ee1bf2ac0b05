"""Each early-warning detector fires on the fault it is for, and none fires on a clean run
(issue 30's acceptance), on the demo config (300 steps, real Python-stdlib data).

One `python -m tokenmill train` subprocess per arm, each in its own run directory (tokens/ and
tokenizer/ symlinked from a finished demo run), the embedding spectrum every 2 steps, the
activation probe every 10, one evaluation at the end. Faults (train.faults, placed by attempt):
    clean              none (two seeds: silence is not one lucky draw)
    lr_blowup          LR × 100 over steps 150-155
    poisoned_bucket    the reference bucket's rows (4% of the batch) are random token ids over
                       steps 150-200: the global loss moves ~5%, under the spike guard's threshold
    frozen_embedding   the (tied) embedding gets no update over steps 150-160 and its rows are
                       pulled toward their mean (× 0.8 per step): an embedding collapse
Read back from events.jsonl: the first step each detector fired (spike/skip/rollback from the
guard, bucket_loss_warning, embedding_collapse, grad_drift, slow_rank, hang), what it said, and
the largest activation RMS / attention-logit maximum the probe logged.

    .venv/bin/python benchmarks/record.py benchmarks/results/health_detectors.json -- \\
        benchmarks/bench_health_detectors.py --run runs/demo --work runs/health-detectors
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fault_recovery import ROOT, final_eval  # noqa: E402  (one way to run a demo arm and read its eval)

ARMS: dict[str, dict[str, Any]] = {
    "clean": {},
    "lr_blowup": {"lr_blowup": [150, 155]},
    "poisoned_bucket": {"poison_bucket": "reference", "poison_steps": [150, 200]},
    "frozen_embedding": {"collapse_embedding": [150, 160], "collapse_rate": 0.8},
}
DETECTORS = ["spike", "skip", "rollback", "bucket_loss_warning", "embedding_collapse", "grad_drift", "slow_rank",
             "hang"]


def arm_sets(arm: str, seed: int, threads: int, steps: int) -> list[str]:
    sets = [f"train.seed={seed}", f"train.threads={threads}", f"train.eval_every={steps}", "train.spectrum_every=2",
            "train.health.activation_stats_every=10"]
    return sets + [f"train.faults.{k}={json.dumps(v).replace(' ', '')}" for k, v in ARMS[arm].items()]


def detectors(run_dir: Path) -> dict[str, Any]:
    """Per detector: how often it fired, its first step and that event's telling fields."""
    from tokenmill.runs import read_events

    fired: dict[str, dict[str, Any]] = {}
    act_rms = attn = 0.0
    for e in read_events(run_dir / "events.jsonl"):
        kind = e.get("kind")
        if kind in DETECTORS:
            first = fired.setdefault(kind, {"count": 0, "first_step": e.get("step"), "first": _telling(e)})
            first["count"] += 1
        if kind == "train_step":
            act_rms = max([act_rms, *[v for v in e.get("act_rms") or [] if v is not None]])
            attn = max([attn, *[v for v in e.get("attn_logit_max") or [] if v is not None]])
    return {"fired": fired, "max_act_rms": act_rms, "max_attn_logit": attn}


def _telling(e: dict[str, Any]) -> dict[str, Any]:
    keep = ("reason", "spike_kind", "bucket", "ratio", "other_buckets", "sv_ratio", "group", "to_step", "rank")
    return {k: e[k] for k in keep if k in e}


def run_arm(args: argparse.Namespace, arm: str, seed: int) -> dict[str, Any]:
    import os
    import shutil
    import subprocess

    run_dir = args.work / f"{arm}-s{seed}"
    sets = arm_sets(arm, seed, args.threads, args.steps)
    done = final_eval(run_dir)
    if not (args.reuse and done and done[0] == args.steps):
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        for sub in ("tokens", "tokenizer"):
            (run_dir / sub).symlink_to((args.run / sub).resolve())
        cmd = [sys.executable, "-m", "tokenmill", "train", str(args.run / "config.yaml"), "--run-dir", str(run_dir),
               *[x for s in sets for x in ("--set", s)]]
        with open(run_dir.with_suffix(".log"), "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        if rc != 0:
            raise RuntimeError(f"{arm} seed {seed}: exit {rc}, see {run_dir.with_suffix('.log')}")
    step, bpb = final_eval(run_dir)
    return {"arm": arm, "seed": seed, "run": str(run_dir), "sets": sets, "bpb": bpb, **detectors(run_dir)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=ROOT / "runs" / "demo", help="A finished demo run (config, tokens, tokenizer).")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "health-detectors")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--clean-seeds", type=int, nargs="+", default=[1234, 1235])
    ap.add_argument("--seed", type=int, default=1234, help="The faulted arms' seed.")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--reuse", action="store_true", help="Take an arm whose run dir holds its final eval as done.")
    ap.add_argument("--json", type=Path, help="Also write the result here after every arm.")
    args = ap.parse_args()
    args.run, args.work = args.run.resolve(), args.work.resolve()
    t0 = time.monotonic()
    result: dict[str, Any] = {"command": " ".join(sys.argv), "arms_spec": ARMS, "detectors": DETECTORS,
                              "threads": args.threads, "records": []}
    plan = [(a, s) for a in args.arms for s in (args.clean_seeds if a == "clean" else [args.seed])]
    for arm, seed in plan:
        rec = run_arm(args, arm, seed)
        result["records"].append(rec)
        fired = ", ".join(f"{k} ×{v['count']} from step {v['first_step']}" for k, v in rec["fired"].items())
        print(f"{arm} seed {seed}: {fired or 'silent'}", flush=True)
        result["seconds"] = round(time.monotonic() - t0, 1)
        if args.json:  # after every arm: a cut run keeps what it measured
            args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
