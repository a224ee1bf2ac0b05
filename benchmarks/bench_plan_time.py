"""`tokenmill plan --config` against the training it predicts, on this CPU: two model sizes.

For each size: the data stages of the demo's config (curate, tokenizer, tokenize) in a fresh run
directory, then `tokenmill plan --config CONFIG --json` (which times a few steps of the model
with the trainer, one evaluation and one checkpoint: scaling/plan_measure.py), then the real
`tokenmill train CONFIG`, both as child processes, the way a user runs them. Recorded: the
predicted seconds, the real wall-clock of the `train` command (process start to exit) and the
train stage's own seconds, and the ratio real / predicted. Target: within 1.5× both ways.

Sizes: "demo" is the demo's model (d_model 256, 4 layers, ~4.3M parameters with its 4,096-token
vocabulary) for 300 steps, "4x" the same with d_model 512 (about 4× the non-embedding
parameters and the step FLOPs) for 150 steps: a few minutes of training each on 2 cores.

    .venv/bin/python benchmarks/record.py benchmarks/results/plan_time.json -- benchmarks/bench_plan_time.py
    # a smoke run of the path (seconds; the ratio of such short runs is dominated by start-up):
    .venv/bin/python benchmarks/bench_plan_time.py --sizes demo --steps 20 --set train.eval_every=10
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

CONFIG = Path(__file__).resolve().parents[1] / "src" / "tokenmill" / "configs" / "demo.yaml"
SIZES: dict[str, tuple[list[str], int]] = {
    "demo": ([], 300),
    "4x": (["model.d_model=512", "model.n_heads=8"], 150),
}
TARGET = 1.5


def data_stages(overrides: list[str]) -> None:
    """curate, tokenizer and tokenize of the demo's config in the run `overrides` name."""
    from tokenmill.config import load_config
    from tokenmill.pipeline import run_stage
    from tokenmill.runs import RunDir

    run = RunDir.create(load_config(CONFIG, overrides))
    for stage in ("curate", "tokenizer", "tokenize"):
        run_stage(run, stage)


def tokenmill(*args: str) -> tuple[str, float]:
    """(stdout, wall seconds) of `python -m tokenmill ARGS`; its stderr streams to ours."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tokenmill", *args], check=True, stdout=subprocess.PIPE, text=True)
    return proc.stdout, time.perf_counter() - t0


def one_size(name: str, root: Path, steps: int, extra: list[str]) -> dict[str, Any]:
    """Plan, then train, one size; predicted against real."""
    model, default_steps = SIZES[name]
    overrides = [f"root={root}", f"name={name}", *model, f"train.max_steps={steps or default_steps}", *extra]
    sets = [x for o in overrides for x in ("--set", o)]
    data_stages(overrides)
    out, plan_wall = tokenmill("plan", "--config", str(CONFIG), *sets, "--json")
    plan = json.loads(out)
    _, train_wall = tokenmill("train", str(CONFIG), *sets)
    events = [json.loads(line) for line in (root / name / "events.jsonl").read_text().splitlines()]
    done = next(e for e in events if e["stage"] == "train" and e["kind"] == "stage_done")
    steps_s = [e["seconds"] for e in events if e["kind"] == "train_step"]
    predicted, m = plan["wall_clock_seconds"], plan["measured"]
    return {
        "size": name,
        "params": plan["params"],
        "steps": plan["steps"],
        "tokens_per_step": plan["global_batch_tokens"],
        "predicted_s": round(predicted, 1),
        "train_wall_s": round(train_wall, 1),
        "train_stage_s": round(done["seconds"], 1),
        "ratio_real_over_predicted": round(train_wall / predicted, 3),
        "within_target": 1 / TARGET <= train_wall / predicted <= TARGET,
        "plan_wall_s": round(plan_wall, 1),
        "measured_step_s": round(m["step_seconds"], 4),
        "real_mean_step_s": round(sum(steps_s) / len(steps_s), 4),
        "measured_mfu": round(plan["mfu"], 4),
        "evals": m["evals"],
        "eval_s": round(m["eval_seconds"], 2),
        "threads": m["threads"],
        "dtype": m["dtype"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--steps", type=int, default=0, help="Optimizer steps of every size (0: each size's default).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override for every size.")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        for name in args.sizes:
            rows.append(one_size(name, Path(tmp), args.steps, args.overrides))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"target_ratio": TARGET, "sizes": rows, "all_within": all(r["within_target"] for r in rows)}, indent=1))


if __name__ == "__main__":
    main()
