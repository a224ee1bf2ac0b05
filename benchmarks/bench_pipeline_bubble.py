"""The pipeline bubble measured against (p-1)/(m+p-1): real 2-stage runs of the demo model under
torchrun (`tokenmill train --nproc 2`, gloo on CPU, 1 thread per rank), 1F1B and GPipe, with m = 2,
4 and 8 micro-batches of 16/m rows (the same 16 × 256 tokens per step).

Each `train_step` event carries `pipeline_idle`: per stage, the share of the schedule's wall-clock
it did not compute (its forwards, and its backwards from the gradient reaching its output to it
reaching its input), over a window aligned on both stages. The formula assumes equal stage times
and free transfers; here stage 1 also runs the final norm, the head and the loss, so it sets the
pace: with r = stage 0's compute / stage 1's per micro-batch (from the two measured busy shares)
the step is m·b + a and stage 1 idles r / (m + r), the formula at r = 1.

    .venv/bin/python benchmarks/bench_pipeline_bubble.py --run runs/demo --steps 8

Writes benchmarks/results/pipeline_bubble.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one(run: Path, m: int, schedule: str, steps: int) -> dict:
    from tokenmill.runs import read_events

    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "run"
        dest.mkdir()
        shutil.copytree(run / "tokens", dest / "tokens")
        shutil.copytree(run / "tokenizer", dest / "tokenizer")
        sets = ["mixture.phases=[]", "train.parallel.pp=2", f"train.parallel.pp_schedule={schedule}",
                f"train.grad_accum={m}", f"train.micro_batch={16 // m}", f"train.max_steps={steps}",
                "train.global_batch_tokens=null", "train.max_tokens=null", "train.threads=1", "train.eval_every=0",
                "train.ckpt_every=1000", "train.metrics_every=0", "train.device=cpu", "eval.tasks=[]"]
        cmd = [sys.executable, "-m", "tokenmill", "train", str(run / "config.yaml"), "--run-dir", str(dest),
               "--nproc", "2"] + [a for s in sets for a in ("--set", s)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        # the data stages are finished in the source run; mark them so in the copy
        subprocess.run([sys.executable, "-c", "import sys; from tokenmill.config import load_config; "
                        "from tokenmill.config import apply_overrides; from tokenmill.runs import RunDir; "
                        f"cfg = load_config({str(run / 'config.yaml')!r}, {sets!r}); "
                        f"r = RunDir.create(cfg, {str(dest)!r}); [r.mark_done(s) for s in ('curate', 'tokenizer', 'tokenize')]"],
                       check=True, env=env, cwd=REPO)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(proc.stdout[-4000:] + proc.stderr[-4000:])
        ev = [e for e in read_events(dest / "events.jsonl") if e["kind"] == "train_step"][1:]  # step 1: warm-up
        per_stage = [statistics.median(e["pipeline_idle"][s] for e in ev) for s in range(2)]
        # unequal stages: with r = (stage 0's compute) / (stage 1's) per micro-batch, the step is
        # m·b + a and the slower stage idles r / (m + r); r = 1 gives the formula 1 / (m + 1)
        r = (1 - per_stage[0]) / (1 - per_stage[1])
        return {"micro_batches": m, "schedule": schedule, "formula": 1 / (m + 1), "idle_by_stage": per_stage,
                "stage_time_ratio": r, "slower_stage_predicted": r / (m + r),
                "s_per_step": statistics.median(e["seconds"] for e in ev)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "pipeline_bubble.json")
    args = ap.parse_args()
    rows = []
    for schedule in ("1f1b", "gpipe"):
        for m in (2, 4, 8):
            r = one(args.run.resolve(), m, schedule, args.steps)
            rows.append(r)
            print(f"{schedule:5s} m={m}: formula {r['formula']:.3f}, idle stage 0 {r['idle_by_stage'][0]:.3f}, "
                  f"stage 1 {r['idle_by_stage'][1]:.3f} (r {r['stage_time_ratio']:.2f}: predicted "
                  f"{r['slower_stage_predicted']:.3f}), {r['s_per_step']:.3f} s/step", flush=True)
    args.out.write_text(json.dumps({"run": str(args.run), "steps": args.steps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
