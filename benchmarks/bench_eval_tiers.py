"""Training throughput with evaluation tiers on and off (eval.tiers, `tokenmill eval --watch`).

Trains the demo-size model (src/tokenmill/configs/demo.yaml) on a finished demo run's data three
ways, interleaved A/B/C per repetition, each in a fresh copy of the run directory:

  a  all evaluation in the trainer: buckets, probes, tasks, samples every train.eval_every steps (today)
  b  the cheap tier in the trainer (buckets, probes) every eval_every steps, and `tokenmill eval
     --watch` in a second process scoring every checkpoint at those steps with everything else
  c  no evaluation during training (train.eval_every 0: only the end-of-run one, after the last step)

Per run it reads the trainer's own figures from the run's events: the median per-step tokens/s
(train_step, evaluation excluded) and the wall throughput (tokens trained / train_done seconds,
evaluation pauses included: what the tiers take off the training path); for b also how long the
watcher ran past the trainer's end. Prints one JSON object last (benchmarks/record.py adds commit,
command and load):

    make demo
    .venv/bin/python benchmarks/record.py benchmarks/results/eval_tiers.json -- \\
        benchmarks/bench_eval_tiers.py --run runs/demo --reps 3
    .venv/bin/python benchmarks/bench_eval_tiers.py --run runs/demo --steps 20 --eval-every 10 --reps 1   # smoke
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
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ARMS = ("a", "b", "c")
LABELS = {
    "a": "all evaluation in the trainer (tasks every eval_every)",
    "b": "cheap tier in the trainer + eval --watch process",
    "c": "no evaluation during training",
}
# The finished data stages a training run needs; checkpoints, evaluations and events are left behind.
KEEP = ("config.yaml", "curated", "tokenizer", "tokens", ".stages", ".tokenmill")


def fresh_copy(src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in KEEP:
        p = src / name
        if p.is_dir():
            shutil.copytree(p, dest / name)
        elif p.is_file():
            shutil.copy2(p, dest / name)
    for stage in ("train", "eval", "report"):
        (dest / ".stages" / f"{stage}.json").unlink(missing_ok=True)
    return dest


def tokenmill(*args: str) -> list[str]:
    return [sys.executable, "-m", "tokenmill", *args]


# --tasks heavy: an expensive tier of the size tiers are for, in every arm: the whole quiz (149
# items) and every code item sampled 5 times for pass@1 and pass@5 (150 sandboxed programs)
HEAVY_TASKS = (
    '[{name: python-mc, path: "package:tasks/python_mc.jsonl", format: arc, shots: 2}, '
    '{name: python-cloze, path: "package:tasks/python_cloze.jsonl", format: lambada}, '
    '{name: quiz-qa, path: "package:tasks/quiz_qa.jsonl", format: jsonl, shots: 2, '
    'generation: {max_new_tokens: 12, stop: ["\\n"]}}, '
    '{name: python-code, path: "package:tasks/python_code.jsonl", format: jsonl, '
    'generation: {max_new_tokens: 48, temperature: 0.8, samples: 5, pass_k: [1, 5], '
    'stop: ["\\ndef ", "\\nclass ", "\\nif __name__", "\\nprint("]}}]'
)


def overrides(arm: str, steps: int, eval_every: int, ckpt_every: int, tasks: str = "demo") -> list[str]:
    sets = [f"train.max_steps={steps}", f"train.ckpt_every={ckpt_every}", "train.keep_checkpoints=1000"]
    if tasks == "heavy":
        sets.append(f"eval.tasks={HEAVY_TASKS}")
    if arm == "a":
        sets += [f"train.eval_every={eval_every}", "eval.tasks_in_training=true"]
    elif arm == "b":
        sets += [
            f"train.eval_every={eval_every}",
            f"eval.tiers.cheap.every_steps={eval_every}",
            f"eval.tiers.expensive.every_checkpoints={eval_every // ckpt_every}",
            "eval.tiers.expensive.poll_seconds=0.5",
        ]
    else:
        sets += ["train.eval_every=0"]
    return [x for s in sets for x in ("--set", s)]


def figures(run: Path) -> dict[str, Any]:
    """The trainer's own throughput from its events."""
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    steps = [e for e in events if e.get("kind") == "train_step"]
    done = [e for e in events if e.get("kind") == "train_done"][-1]
    per_step = [e["tokens_per_s"] for e in steps[1:] if e.get("tokens_per_s")]  # step 1 holds warm-up
    return {
        "step_tokens_per_s_median": statistics.median(per_step),
        "wall_tokens_per_s": steps[-1]["tokens"] / done["seconds"],
        "train_seconds": done["seconds"],
        "in_training_evals": sorted(int(p.stem) for p in (run / "eval").glob("*.json")) if (run / "eval").is_dir() else [],
    }


def one_run(arm: str, src: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    run = fresh_copy(src, work / f"{arm}-{time.monotonic_ns()}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # --pin: the trainer on core 0 and the watcher on core 1, one thread each, in every arm: on a
    # CPU box that stands for "the watcher on its own device"; without it they share the cores
    pin_train, pin_watch = (["taskset", "-c", "0"], ["taskset", "-c", "1"]) if args.pin else ([], [])
    if args.pin:
        env |= {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    watcher = None
    if arm == "b":  # started first: it waits for checkpoints, reading files only
        cmd = pin_watch + tokenmill("eval", "--watch", str(run), "--device", args.watch_device)
        watcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    train = pin_train + tokenmill("train", str(run / "config.yaml"), "--run-dir", str(run))
    train += overrides(arm, args.steps, args.eval_every, args.ckpt_every, args.tasks)
    done = subprocess.run(train, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"arm {arm}: training exited {done.returncode}: {done.stderr[-2000:]}")
    ended = time.perf_counter()
    out = {"arm": arm, **figures(run)}
    if watcher is not None:
        text, _ = watcher.communicate(timeout=3600)
        if watcher.returncode != 0:
            raise RuntimeError(f"arm b: the watcher exited {watcher.returncode}: {text[-2000:]}")
        out["watcher_lag_s"] = round(time.perf_counter() - ended, 2)
        out["watched_steps"] = sorted(int(p.stem.split("_")[1]) for p in (run / "eval" / "watch").glob("step_*.json"))
    shutil.rmtree(run)
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "demo", help="a finished demo run (make demo)")
    ap.add_argument("--steps", type=int, default=300, help="training steps per run (the demo's 300)")
    ap.add_argument("--eval-every", type=int, default=100, help="steps between evaluations (the demo's 100)")
    ap.add_argument("--ckpt-every", type=int, default=50, help="checkpoint interval (the demo's 50)")
    ap.add_argument("--pin", action="store_true", help="trainer on core 0, watcher on core 1, one thread each (taskset)")
    ap.add_argument("--tasks", choices=("demo", "heavy"), default="demo", help="the demo's tasks, or HEAVY_TASKS")
    ap.add_argument("--reps", type=int, default=3, help="interleaved a/b/c repetitions")
    ap.add_argument("--watch-device", default="auto", help="the watcher's --device")
    args = ap.parse_args()
    if args.eval_every % args.ckpt_every:
        ap.error("--eval-every must be a multiple of --ckpt-every (the watcher scores whole checkpoints)")
    if not (args.run / "tokens").is_dir():
        ap.error(f"{args.run}: no token store (run `make demo` first)")
    runs: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    with tempfile.TemporaryDirectory(prefix="bench_eval_tiers_") as tmp:
        for _ in range(args.reps):
            for arm in ARMS:
                runs[arm].append(one_run(arm, args.run, Path(tmp), args))
    median = {
        a: {k: statistics.median(r[k] for r in runs[a]) for k in ("step_tokens_per_s_median", "wall_tokens_per_s")}
        for a in ARMS
    }
    for a in ARMS:
        median[a]["wall_vs_no_eval"] = median[a]["wall_tokens_per_s"] / median["c"]["wall_tokens_per_s"]
    result = {
        "benchmark": "eval_tiers",
        "steps": args.steps,
        "eval_every": args.eval_every,
        "ckpt_every": args.ckpt_every,
        "reps": args.reps,
        "pinned": args.pin,
        "tasks": args.tasks,
        "watch_device": args.watch_device,
        "labels": LABELS,
        "runs": runs,
        "median": median,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
