"""The gradient noise scale against a batch-size sweep (issue 18; McCandlish et al. 2018).

Two measurements, both with tokenmill's own trainer on real token stores:

1. seeds: B_simple (the ratio of the per-step |G|² and tr Σ means over the second half of
   training, train/noise_scale.py) of the same run trained with 3 seeds: the demo's training
   (the demo's token store and config), and one scaling-sweep-size run (d128 × 4 layers) on the
   books/code/docs store of the mixture-optimization benchmark. The spread across seeds is the
   estimate's band.
2. sweep: the books/code/docs store (20M training tokens: every run stays within one epoch), one model (d128 × 4 layers, seq 128), global batches from 512 to 16K
   tokens, each at 3 learning rates (√B scaling around a base, × ½, 1, 2; extended by doubling or
   halving while the best one sits at an edge of the grid), a constant LR after a
   fixed token warmup. Each run stops once the centred 9-step mean of its training loss reaches
   the target (single-epoch data: the training loss on unseen batches is a held-out estimate);
   the fewest steps over the LRs is S(B). S = S_min (1 + B_crit / B) fitted in 1/B gives B_crit
   = E_min / S_min, compared with the B_simple the runs measured around the target loss.

    .venv/bin/python benchmarks/bench_critical_batch.py --demo runs/demo --scaling runs/mixture-opt/data
    .venv/bin/python benchmarks/bench_critical_batch.py --demo runs/demo --only sweep

Results: benchmarks/results/critical_batch.json. Runs go under runs/critical-batch/ (reused when
present: a finished run is not trained again).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from tokenmill import __version__  # noqa: E402
from tokenmill.config import RunConfig, load_config  # noqa: E402
from tokenmill.runs import RunDir, read_events  # noqa: E402
from tokenmill.scaling.critical_batch import fit_tradeoff, steps_to_loss, summarize_noise  # noqa: E402
from tokenmill.scaling.sweep import link_data  # noqa: E402
from tokenmill.train.trainer import TrainError, run_train  # noqa: E402

SEEDS = (1, 2, 3)
SWEEP_BATCHES = (512, 1024, 2048, 4096, 8192, 16384)
LR_FACTORS = (0.5, 1.0, 2.0)


def open_run(path: Path) -> RunDir:
    return RunDir(config=load_config(path / "config.yaml"), path=path)


class Reached(Exception):
    """The run's smoothed training loss reached the target: stop training it."""


def make_run(data: RunDir, root: Path, name: str, overrides: dict[str, dict[str, Any]]) -> RunDir:
    cfg = data.config.model_dump()
    for section, values in overrides.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    cfg.update(name=name, root=str(root))
    run = RunDir.create(RunConfig.model_validate(cfg), root / name)
    link_data(data, run)
    return run


def train_events(run: RunDir) -> list[dict]:
    return [e for e in read_events(run.path / "events.jsonl") if e.get("stage") == "train"]


def finished(run: RunDir) -> bool:
    return (run.path / "events.jsonl").exists() and any(e.get("kind") in ("train_done", "reached", "gave_up")
                                                       for e in train_events(run))


# --------------------------------------------------------------------------- seeds
def seed_runs(data: RunDir, root: Path, label: str, overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for seed in SEEDS:
        run = make_run(data, root, f"{label}-s{seed}", {**overrides, "train": {**overrides.get("train", {}),
                                                                               "seed": seed}})
        if not finished(run):
            t0 = time.time()
            run_train(run, resume=True, progress=False)
            print(f"{run.path.name}: trained in {time.time() - t0:.0f} s", flush=True)
        s = summarize_noise(train_events(run))
        rows.append({"seed": seed, **s.to_dict()})
        print(f"{run.path.name}: B_simple {s.b_simple:,.0f} tokens (blocks {[round(v) for v in s.block_values]}), "
              f"batch {s.batch_tokens:,}, loss {s.loss:.3f}", flush=True)
    values = [r["b_simple"] for r in rows]
    out = {"runs": rows, "mean": statistics.fmean(values), "stdev": statistics.stdev(values),
           "relative_stdev": statistics.stdev(values) / statistics.fmean(values),
           "max_over_min": max(values) / min(values)}
    print(f"{label}: B_simple {out['mean']:,.0f} ± {out['stdev']:,.0f} tokens over seeds "
          f"({out['relative_stdev']:.1%}; max/min {out['max_over_min']:.2f})", flush=True)
    return out


# --------------------------------------------------------------------------- sweep
def stop_at(run: RunDir, target: float, window: int):
    """An on_eval hook that raises Reached once the centred mean of the logged losses hits target."""
    losses: dict[int, float] = {}
    (run.path / "events.jsonl").touch()
    fh = open(run.path / "events.jsonl", encoding="utf-8")

    def hook(step: int, model: torch.nn.Module) -> None:
        for line in fh:
            e = json.loads(line)
            if e.get("kind") == "train_step":
                losses[int(e["step"])] = float(e["loss"])
        ordered = [losses[k] for k in sorted(losses)]
        if steps_to_loss(ordered, target, window) is not None:
            run.events.write("train", "reached", step=step, target=target)
            raise Reached()
    return hook, fh


def sweep_run(data: RunDir, root: Path, batch: int, lr: float, args: argparse.Namespace) -> dict[str, Any]:
    rows = batch // args.seq_len
    micro = max(1, min(rows // 2, 32))
    name = f"sweep-b{batch}-lr{lr:.2e}"
    train = {"seq_len": args.seq_len, "micro_batch": micro, "grad_accum": rows // micro, "lr": lr,
             "global_batch_tokens": None,
             "max_tokens": args.max_tokens, "max_steps": 10 ** 9, "warmup_tokens": args.warmup_tokens,
             "schedule": "wsd", "decay_fraction": 0.01, "eval_every": 10, "ckpt_every": 10 ** 9,
             "metrics_every": 0, "threads": args.threads, "seed": 7, "log_every": 0, "compile": False}
    model = {"d_model": 128, "n_layers": 4, "n_heads": 4, "max_seq_len": args.seq_len}
    run = make_run(data, root, name, {"train": train, "model": model, "mixture": {"phases": []}})
    if not finished(run):
        for p in (run.path / "events.jsonl", ):
            p.unlink(missing_ok=True)
        ckpts = run.path / "checkpoints"
        if ckpts.exists():
            import shutil
            shutil.rmtree(ckpts)
        hook, fh = stop_at(run, args.target, args.window)
        t0 = time.time()
        try:
            run_train(run, on_eval=hook, progress=False)
        except Reached:
            pass
        except TrainError as exc:  # diverged at this LR: it never reaches the target
            run.events.write("train", "gave_up", reason=str(exc)[:300])
        finally:
            fh.close()
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
    steps = [e for e in train_events(run) if e.get("kind") == "train_step"]
    losses = [float(e["loss"]) for e in sorted(steps, key=lambda e: e["step"])]
    reached = steps_to_loss(losses, args.target, args.window)
    near = [e for e in steps if reached is not None and abs(int(e["step"]) - reached) <= max(20, reached // 5)]
    b_at = None
    if near:
        g2 = statistics.fmean(e["noise_g2"] for e in near if e.get("noise_g2") is not None)
        tr = statistics.fmean(e["noise_trace"] for e in near if e.get("noise_trace") is not None)
        b_at = tr / g2 if g2 > 0 else None
    print(f"  batch {batch:>6} lr {lr:.2e}: steps to {args.target} = {reached}, B_simple there {b_at}", flush=True)
    return {"batch": batch, "lr": lr, "steps": reached, "tokens": None if reached is None else reached * batch,
            "b_simple_at_target": b_at, "name": name}


def sweep(data: RunDir, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for batch in SWEEP_BATCHES:
        base = args.base_lr * (batch / 4096) ** 0.5
        mine = [sweep_run(data, root, batch, base * f, args) for f in LR_FACTORS]
        # the best LR at an edge of the grid: go on doubling (halving) while it keeps saving steps
        for edge, factor in ((-1, 2.0), (0, 0.5)):
            for _ in range(2):
                ranked = sorted((r for r in mine if r["steps"] is not None), key=lambda r: r["lr"])
                best = min(ranked, key=lambda r: r["steps"]) if ranked else None
                if best is None or best is not ranked[edge]:
                    break
                mine.append(sweep_run(data, root, batch, best["lr"] * factor, args))
        runs += mine
    best: dict[int, dict[str, Any]] = {}
    for r in runs:
        if r["steps"] is not None and (r["batch"] not in best or r["steps"] < best[r["batch"]]["steps"]):
            best[r["batch"]] = r
    batches = sorted(best)
    fit = fit_tradeoff(batches, [best[b]["steps"] for b in batches])
    # B_simple from a batch far below it is mostly noise (the |G|² estimate of a 256-token half
    # batch is swamped by tr Σ / 256): the summary uses every run of a batch >= 4,096 tokens
    measured = [r["b_simple_at_target"] for r in runs
                if r["batch"] >= 4096 and r["steps"] is not None and r["b_simple_at_target"]]
    out = {"runs": runs, "best": [best[b] for b in batches], "fit": fit.to_dict(),
           "b_simple_at_target_median": statistics.median(measured) if measured else None,
           "b_simple_at_target_range": [min(measured), max(measured)] if measured else None,
           "b_simple_at_target": measured}
    print(f"fit: S_min {fit.s_min:.1f} steps, E_min {fit.e_min:,.0f} tokens, B_crit {fit.b_crit:,.0f} tokens "
          f"(R² {fit.r2:.3f}); B_simple near the target (batches >= 4096): median "
          f"{out['b_simple_at_target_median']}, range {out['b_simple_at_target_range']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", type=Path, default=Path("runs/demo"), help="The demo's run directory (its tokens).")
    ap.add_argument("--scaling", type=Path, default=Path("runs/mixture-opt/data"),
                    help="A run directory with a real token store for the scaling-size seed runs.")
    ap.add_argument("--root", type=Path, default=Path("runs/critical-batch"))
    ap.add_argument("--only", choices=["seeds", "sweep"], default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--target", type=float, default=4.3, help="Training loss (nats/token) each sweep run must reach.")
    ap.add_argument("--window", type=int, default=9)
    ap.add_argument("--base-lr", type=float, default=2e-3, help="LR at a 4,096-token batch (√B scaling around it).")
    ap.add_argument("--warmup-tokens", type=int, default=100_000)
    ap.add_argument("--max-tokens", type=int, default=8_000_000)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "critical_batch.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result: dict[str, Any] = {}
    result.update({"tokenmill": __version__, "torch": torch.__version__, "python": platform.python_version(),
                   "cores": len(os.sched_getaffinity(0)), "threads": args.threads})
    if args.only in (None, "seeds"):
        demo = open_run(args.demo)
        result["seeds_demo"] = seed_runs(demo, args.root, "demo", {
            "train": {"micro_batch": 8, "grad_accum": 2, "eval_every": 0, "threads": args.threads}})
        scaling = open_run(args.scaling)
        result["seeds_scaling"] = seed_runs(scaling, args.root, "scaling-d128", {
            "model": {"d_model": 128, "n_layers": 4, "n_heads": 4},
            "train": {"micro_batch": 8, "grad_accum": 4, "global_batch_tokens": None, "max_tokens": 3_000_000,
                      "max_steps": 10 ** 9,
                      "eval_every": 0, "threads": args.threads}})
    if args.only in (None, "sweep"):
        result["sweep"] = sweep(open_run(args.scaling), args.root, args)
        result["sweep_settings"] = {k: getattr(args, k) for k in ("seq_len", "target", "window", "base_lr",
                                                                    "warmup_tokens", "max_tokens")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # the two parts may run as two processes: merge into what the other one wrote meanwhile
    merged = json.loads(args.out.read_text()) if args.out.exists() else {}
    merged.update(result)
    args.out.write_text(json.dumps(merged, indent=1))
    print(args.out)


if __name__ == "__main__":
    main()
