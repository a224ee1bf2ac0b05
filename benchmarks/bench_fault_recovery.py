"""Recovery that costs little (issue 30): how much worse a faulted run ends than a clean one, and
where the gap goes, on the demo config (300 steps).

Each arm is a `python -m tokenmill train CONFIG --run-dir DIR --set ...` subprocess in its own run
directory (tokens/ and tokenizer/ symlinked from the demo run), one at a time, on `--threads`
threads, evaluated only at the end (train.eval_every = max_steps). Read back: the final held-out
eval (eval/<step>.json, per-bucket bpb) and the guard's events (events.jsonl: skips, spikes,
rollbacks, and the updates the final weights descend from).

Faults (train.faults, placed by the run's attempt number): placement A = a NaN at 40, corrupted
batches at 60-62, LR x 100 over 90-95 (issue 30's); placement B = 150, 170-172, 200-205 (the
confirmation: not used to choose the defaults).

Arms (every guard key given explicitly, so an arm means the same whatever the defaults are):
    clean        no faults
    jump         placement A, the old guard: rollback jumps ahead, LR x 0.7, rollback after 20 skips
    jump_nobackoff     ... LR x 1.0 (what the backoff costs)
    jump_fast          ... LR x 1.0, rollback after 5 skips (what a shorter lost window saves)
    rewind       placement A, the new defaults: rewind to the checkpoint's step, LR x 1.0, 5 skips
    rewind_backoff     ... with LR x 0.7 (the backoff on a rewound run)
    defaults     placement A, no guard keys at all (= rewind when the defaults are the proposed ones)
    rewind_b     placement B, the new defaults (the confirmation, against the same clean runs)

    .venv/bin/python benchmarks/record.py benchmarks/results/fault_recovery.json -- \\
        benchmarks/bench_fault_recovery.py --run runs/demo --work runs/fault-recovery --threads 1

--reuse takes an arm whose run directory already holds its final eval as done (a cut benchmark
goes on where it stopped; --arms and --seeds pick a subset).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

FAULTS = {
    "A": {"nan_steps": [40], "corrupt_steps": [60, 61, 62], "lr_blowup": [90, 95]},
    "B": {"nan_steps": [150], "corrupt_steps": [170, 171, 172], "lr_blowup": [200, 205]},
}
OLD = {"rollback_rewind": False, "lr_backoff": 0.7, "max_consecutive_skips": 20}
NEW = {"rollback_rewind": True, "lr_backoff": 1.0, "max_consecutive_skips": 5}
ARMS: dict[str, dict[str, Any]] = {
    "clean": {"faults": None, "guard": {}},
    "jump": {"faults": "A", "guard": OLD},
    "jump_nobackoff": {"faults": "A", "guard": {**OLD, "lr_backoff": 1.0}},
    "jump_fast": {"faults": "A", "guard": {**OLD, "lr_backoff": 1.0, "max_consecutive_skips": 5}},
    "rewind": {"faults": "A", "guard": NEW},
    "rewind_backoff": {"faults": "A", "guard": {**NEW, "lr_backoff": 0.7}},
    "defaults": {"faults": "A", "guard": {}},
    "rewind_b": {"faults": "B", "guard": NEW},
}


def arm_sets(arm: str, seed: int, threads: int, steps: int) -> list[str]:
    spec = ARMS[arm]
    sets = [f"train.seed={seed}", f"train.threads={threads}", f"train.eval_every={steps}"]
    if spec["faults"]:
        for key, value in FAULTS[spec["faults"]].items():
            sets.append(f"train.faults.{key}={json.dumps(value).replace(' ', '')}")
    for key, value in spec["guard"].items():
        sets.append(f"train.guard.{key}={json.dumps(value)}")
    return sets


def final_eval(run_dir: Path) -> tuple[int, dict[str, float]] | None:
    files = sorted((run_dir / "eval").glob("*.json"), key=lambda p: int(p.stem)) if (run_dir / "eval").exists() else []
    if not files:
        return None
    data = json.loads(files[-1].read_text())
    return int(files[-1].stem), {b: m["bpb"] for b, m in data["buckets"].items()}


def guard_summary(run_dir: Path) -> dict[str, Any]:
    """Skips, spikes, rollbacks and the updates the final weights descend from (a rollback to step C
    drops the steps after C taken before it: rewinding, they are taken again; jumping, lost)."""
    lineage: dict[int, str] = {}
    out: dict[str, Any] = {"skips": [], "spikes": [], "recovered": [], "rollbacks": [], "attempts": 0}
    seconds = None
    with open(run_dir / "events.jsonl") as fh:
        for line in fh:
            e = json.loads(line)
            kind = e.get("kind")
            if kind == "train_step":
                out["attempts"] += 1
                lineage[e["step"]] = e["action"]
            elif kind == "skip":
                out["skips"].append(e["step"])
            elif kind == "spike":
                out["spikes"].append(e["step"])
            elif kind == "recovered":
                out["recovered"].append(e["step"])
            elif kind == "rollback":
                out["rollbacks"].append({"at": e["step"], "to": e["to_step"], "rewind": e.get("rewind", False),
                                         "attempt": e.get("attempt", e["step"]), "lr_scale": e["lr_scale"]})
                lineage = {s: a for s, a in lineage.items() if s <= e["to_step"]}
            elif kind == "train_done":
                seconds = e.get("seconds")
    out["applied_updates"] = sum(1 for a in lineage.values() if a == "apply")
    out["final_steps"] = max(lineage) if lineage else 0
    out["train_seconds"] = seconds
    return out


def run_arm(args: argparse.Namespace, arm: str, seed: int) -> dict[str, Any]:
    run_dir = args.work / f"{arm}-s{seed}"
    sets = arm_sets(arm, seed, args.threads, args.steps)
    if not ((args.reuse or args.collect_only) and final_eval(run_dir) and final_eval(run_dir)[0] == args.steps):
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        for sub in ("tokens", "tokenizer"):
            (run_dir / sub).symlink_to((args.run / sub).resolve())
        cmd = [sys.executable, "-m", "tokenmill", "train", str(args.run / "config.yaml"), "--run-dir", str(run_dir),
               *[x for s in sets for x in ("--set", s)]]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        with open(run_dir.with_suffix(".log"), "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        if rc != 0:
            raise RuntimeError(f"{arm} seed {seed}: exit {rc}, see {run_dir.with_suffix('.log')}")
    step, bpb = final_eval(run_dir)
    return {"arm": arm, "seed": seed, "run": str(run_dir), "sets": sets, "eval_step": step, "bpb": bpb,
            "guard": guard_summary(run_dir)}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_arm.setdefault(r["arm"], []).append(r)
    clean = by_arm.get("clean", [])
    if not clean:
        return {}
    buckets = sorted(clean[0]["bpb"])
    clean_mean = {b: statistics.mean(r["bpb"][b] for r in clean) for b in buckets}
    spread = {b: 100 * (max(r["bpb"][b] for r in clean) - min(r["bpb"][b] for r in clean)) / clean_mean[b]
              for b in buckets}
    out: dict[str, Any] = {"clean_mean_bpb": clean_mean, "clean_spread_pct": spread, "arms": {}}
    clean_of = {r["seed"]: r["bpb"] for r in clean}
    for arm, rs in by_arm.items():
        mean = {b: statistics.mean(r["bpb"][b] for r in rs) for b in buckets}
        gap = {b: 100 * (mean[b] / clean_mean[b] - 1) for b in buckets}
        # paired: each faulted run against the clean run of its own seed (same init, same batches
        # outside the fault's window), which takes the seed-to-seed spread out of the comparison
        pairs = [r for r in rs if r["seed"] in clean_of]
        paired = ({b: statistics.mean(100 * (r["bpb"][b] / clean_of[r["seed"]][b] - 1) for r in pairs) for b in buckets}
                  if pairs else None)
        out["arms"][arm] = {"seeds": [r["seed"] for r in rs], "mean_bpb": mean, "gap_pct": gap,
                            "gap_pct_mean": statistics.mean(gap.values()),
                            "paired_gap_pct": paired,
                            "paired_gap_pct_mean": statistics.mean(paired.values()) if paired else None,
                            "applied_updates": [r["guard"]["applied_updates"] for r in rs],
                            "attempts": [r["guard"]["attempts"] for r in rs]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=ROOT / "runs" / "demo", help="A finished demo run (config, tokens, tokenizer).")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "fault-recovery")
    ap.add_argument("--arms", nargs="+", default=["clean", "jump", "jump_nobackoff", "jump_fast", "rewind",
                                                  "rewind_b"], choices=list(ARMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1234, 1235])
    ap.add_argument("--single-seed-arms", nargs="*", default=["jump_nobackoff", "jump_fast", "rewind_backoff"],
                    help="Arms run on the first seed only (the budget).")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300, help="The demo config's max_steps (the final eval's step).")
    ap.add_argument("--reuse", action="store_true", help="Take an arm whose run dir holds its final eval as done.")
    ap.add_argument("--collect-only", action="store_true", help="Train nothing: collect the arms already finished.")
    ap.add_argument("--json", type=Path, help="Also write the result here after every arm.")
    ap.add_argument("--note", default=None, help="A note kept in the result (e.g. how reused runs were made).")
    args = ap.parse_args()
    args.run, args.work = args.run.resolve(), args.work.resolve()
    t0 = time.monotonic()
    result: dict[str, Any] = {"command": " ".join(sys.argv), "faults": FAULTS, "arms_spec": ARMS,
                              "threads": args.threads, "note": args.note, "records": []}
    for seed in args.seeds:  # seed by seed, so a cut benchmark has whole seeds
        for arm in args.arms:
            if arm in args.single_seed_arms and seed != args.seeds[0]:
                continue
            finished = final_eval(args.work / f"{arm}-s{seed}")
            if args.collect_only and not (finished and finished[0] == args.steps):
                continue
            t = time.monotonic()
            rec = run_arm(args, arm, seed)
            rec["wall_seconds"] = round(time.monotonic() - t, 1)
            result["records"].append(rec)
            g = rec["guard"]
            print(f"{arm} seed {seed}: bpb {json.dumps({b: round(v, 4) for b, v in rec['bpb'].items()})} "
                  f"applied {g['applied_updates']} attempts {g['attempts']} rollbacks {g['rollbacks']}", flush=True)
            result["summary"] = summarize(result["records"])
            result["seconds"] = round(time.monotonic() - t0, 1)
            if args.json:
                args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
