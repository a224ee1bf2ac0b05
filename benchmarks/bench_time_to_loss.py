"""Time-to-loss on one CUDA GPU: tokenmill's default recipe against karpathy/nanoGPT's unmodified
`train.py`, each at the best peak LR of its own grid, the same tokens, equal wall-clock.

The question a user asks is not tokens/s but "how long until my model is this good". For each pair
of LRs on the grid (nanoGPT's i-th, tokenmill's i-th):
- nanoGPT runs first, `python train.py --device=cuda --dtype=bfloat16 --compile=True` (its CUDA
  defaults otherwise), max_iters = --seconds / its s/step from the warm-up run, cosine over them; the
  seconds it took (the sum of its own per-iteration times, the first, compiling one included)
  become the paired tokenmill run's budget.
- tokenmill trains exactly that budget by its own clock (`train.max_seconds`: the LR schedule on
  the elapsed share, train/time_budget.py), its default recipe (document masking, RoPE, RMSNorm,
  SwiGLU, bf16 autocast, fused AdamW, per-step metrics on), `train.compile=true`. Every
  `--eval-every-share` of the expected steps an evaluation hook scores the model (outside the
  step clock), so its held-out bpb is known as a function of training seconds.
- Both sides' final checkpoints, and tokenmill's curve, are scored by the same Evaluator (the eval
  stage's) in fp32 on the GPU on the same held-out documents (up to --eval-docs per bucket):
  byte-weighted bits per byte.
Compilation: a warm-up run of each side fills the Inductor cache before the grid, so every grid run
compiles from a warm cache on both sides; its first step (compile included) counts in both clocks
and is recorded (`first_step_s`), and the time to loss is also given without it.

Results: each LR's final bpb on both sides; the best LR of each side; held-out bpb at equal
wall-clock (best against best); the seconds tokenmill needs to reach nanoGPT's best final bpb
(linear interpolation between tokenmill's evaluations) over nanoGPT's seconds. One seed chooses
the LRs; --report-seeds (when the budget allows) reruns the chosen pair on seeds that did not.

    python benchmarks/bench_time_to_loss.py --run .gpu/run --peer .gpu/nanogpt --seconds 45 \\
        --json $OUT/time_to_loss.json --commit $(git rev-parse --short HEAD)
--budget stops starting pairs after that many seconds; the JSON is rewritten after every run.
`--smoke-cpu` checks the plumbing on a CPU in eager mode (no figures). `--arm muon train.optimizer=muon`
adds a tokenmill arm with those overrides beside the default one, on the same budgets and LR grid
(train.lr is then AdamW's, for embeddings and head; Muon keeps train.muon_lr).
"""

from __future__ import annotations

import argparse
import hashlib
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

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_vs_nanogpt import (  # noqa: E402
    ITER_LINE,
    PEER_FILES,
    SEED_LAUNCHER,
    load_nanogpt,
    overall_bpb,
    peer_args,
    tokenmill_config,
    write_peer_data,
)

from curves import time_to_reach  # noqa: E402

from tokenmill.runs import RunDir, read_events  # noqa: E402
from tokenmill.tokens.store import TokenStore  # noqa: E402

WARMUP = 5


class Bench:
    """One benchmark session: the scratch nanoGPT copy, the evaluator, the results so far."""

    def __init__(self, args: argparse.Namespace):
        from tokenmill.eval.evaluate import Evaluator

        self.args, self.t0 = args, time.time()
        self.cuda = not args.smoke_cpu
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.store = TokenStore(args.run / "tokens")
        self.cfg = tokenmill_config(args.run, args.overrides)
        self.work = Path(tempfile.mkdtemp(prefix="nanogpt-"))
        for f in PEER_FILES:
            shutil.copy(args.peer / f, self.work / f)
        self.sizes = write_peer_data(self.store, self.work / "data" / "tokenmill")
        self.ev = Evaluator(self.store, self.cfg.train.seq_len, args.eval_docs, batch_size=8)
        self.result: dict[str, Any] = {}

    def score(self, model: torch.nn.Module) -> float:
        buckets = self.ev.score(model.to(self.device), self.device, "float32")
        return overall_bpb(buckets)

    def save(self) -> None:
        if self.args.json:
            self.args.json.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.args.json.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.result, indent=1, default=str))
            os.replace(tmp, self.args.json)

    def nanogpt(self, steps: int, lr: float, seed: int, save: bool) -> dict[str, Any]:
        """One run of the published train.py; its iteration times and, when saved, its final bpb."""
        out_dir = self.work / "out"
        shutil.rmtree(out_dir, ignore_errors=True)
        argv = [a for a in peer_args(self.cfg, steps, out_dir, save, lr) if not a.startswith(("--device=", "--compile=", "--dtype="))]
        argv += ["--device=cuda", "--compile=True", "--dtype=bfloat16"] if self.cuda else ["--device=cpu", "--compile=False", "--dtype=float32"]
        t = time.time()
        proc = subprocess.run(
            [sys.executable, "-c", SEED_LAUNCHER, str(seed), *argv], cwd=self.work, capture_output=True, text=True, timeout=self.args.arm_timeout
        )
        if proc.returncode != 0:
            raise RuntimeError(f"nanoGPT train.py failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        iters = [m.groups() for m in map(ITER_LINE.match, proc.stdout.splitlines()) if m]
        secs = [float(x) / 1000 for _, _, x in iters[:steps]]  # iteration max_iters runs after the save
        out = {"lr": lr, "seed": seed, "steps": steps, "seconds": sum(secs), "first_step_s": secs[0],
               "s_per_step": statistics.median(secs[WARMUP:]), "final_train_loss": float(iters[steps - 1][1]),
               "wall_s": time.time() - t}
        if save:
            out["bpb"] = self.score(load_nanogpt(self.work, out_dir / "ckpt.pt"))
        return out

    def tokenmill(self, lr: float, seed: int, seconds: float | None, steps: int, eval_every: int, arm: list[str] | None = None) -> dict[str, Any]:
        """The real trainer for `seconds` of its own clock (or `steps`), scored every `eval_every` steps;
        `arm`: an extra arm's config overrides (e.g. train.optimizer=muon), applied last."""
        from tokenmill.train.trainer import run_train

        root = Path(tempfile.mkdtemp(prefix="tm-"))
        curve: list[tuple[int, float]] = []
        try:
            sets = [f"root={root}", "name=t", f"train.max_steps={steps}", f"train.lr={lr}", f"train.seed={seed}",
                    f"train.dtype={'bfloat16' if self.cuda else 'float32'}", f"train.compile={str(self.cuda).lower()}",
                    f"train.device={self.device.type}", f"train.eval_every={eval_every}", "train.ckpt_every=0",
                    f"train.warmup_steps={max(1, round(self.cfg.train.warmup_steps * steps / self.cfg.train.max_steps))}",
                    *([f"train.max_seconds={seconds}"] if seconds else []), *(arm or [])]
            run = RunDir.create(tokenmill_config(self.args.run, self.args.overrides, sets))
            shutil.copytree(self.args.run / "tokens", run.path / "tokens")
            t = time.time()
            run_train(run, resume=False, on_eval=lambda step, model: curve.append((step, self.score(model))), progress=False)
            ev = [e for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"]
            secs = [e["seconds"] for e in ev]
            elapsed = dict(zip([e["step"] for e in ev], _cumsum(secs)))
            return {"lr": lr, "seed": seed, "steps": len(ev), "seconds": sum(secs), "first_step_s": secs[0],
                    "s_per_step": statistics.median(secs[WARMUP:]) if len(secs) > WARMUP else None,
                    "final_train_loss": ev[-1]["loss"], "bpb": curve[-1][1] if curve else None,
                    "curve": [{"step": s, "seconds": elapsed[s], "bpb": b} for s, b in curve], "wall_s": time.time() - t}
        finally:
            shutil.rmtree(root, ignore_errors=True)


def _cumsum(xs: list[float]) -> list[float]:
    out, total = [], 0.0
    for x in xs:
        total += x
        out.append(total)
    return out


def warm_up(b: Bench) -> dict[str, Any]:
    """Fill both sides' compile caches and measure each side's s/step (12 steps each)."""
    peer = b.nanogpt(12, b.args.peer_lr_grid[0], 0, save=False)
    ours = b.tokenmill(b.args.lr_grid[0], 0, None, 12, 0)
    return {"nanoGPT": peer, "tokenmill": ours}


def pair(b: Bench, peer_lr: float, our_lr: float, seed: int, peer_steps: int, ours_s: float, run_ours: bool = True) -> dict[str, Any]:
    peer = b.nanogpt(peer_steps, peer_lr, seed, save=True)
    out = {"nanoGPT": peer}
    if run_ours:
        expected = max(1, round(peer["seconds"] / ours_s))
        every = max(1, round(expected * b.args.eval_every_share))
        out["tokenmill"] = b.tokenmill(our_lr, seed, peer["seconds"], 3 * expected, every)
        for name, *sets in b.args.arms:  # the same budget, LR and evaluations, its own overrides
            out[f"tokenmill {name}"] = b.tokenmill(our_lr, seed, peer["seconds"], 3 * expected, every, sets)
    for side, r in out.items():
        print(f"seed {seed} {side} lr {r['lr']:g}: {r['steps']} steps, {r['seconds']:.1f} s (first {r['first_step_s']:.1f} s), "
              f"bpb {r['bpb']:.4f}  [{time.time() - b.t0:.0f} s into the bench]", flush=True)
    return out


def summarize(tuning: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Best LR per side, bpb at equal wall-clock, tokenmill's time to nanoGPT's best final bpb; the
    same for each extra arm ("tokenmill NAME") under "arms"."""
    best = {side: min(runs.values(), key=lambda r: r["bpb"]) for side, runs in tuning.items() if runs}
    if len(best) < 2:
        return {"best": best}
    arms = {side: _versus(best["nanoGPT"], r) for side, r in best.items() if side.startswith("tokenmill ")}
    return {"best_lr": {side: r["lr"] for side, r in best.items()}, **_versus(best["nanoGPT"], best["tokenmill"]), "arms": arms}


def _versus(peer: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """One tokenmill arm's best run against nanoGPT's: bpb at equal seconds, seconds to its final bpb."""
    t_all = time_to_reach(ours["curve"], peer["bpb"])
    t_nocompile = time_to_reach(ours["curve"], peer["bpb"], ours["first_step_s"])
    return {
        "bpb_at_equal_seconds": {"nanoGPT": peer["bpb"], "tokenmill": ours["bpb"], "ratio": ours["bpb"] / peer["bpb"]},
        "seconds_to_nanogpt_final_bpb": {"nanoGPT": peer["seconds"], "tokenmill": t_all,
                                         "ratio": None if t_all is None else t_all / peer["seconds"]},
        "seconds_to_nanogpt_final_bpb_without_first_step": {
            "nanoGPT": peer["seconds"] - peer["first_step_s"], "tokenmill": t_nocompile,
            "ratio": None if t_nocompile is None else t_nocompile / (peer["seconds"] - peer["first_step_s"])},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--peer", type=Path, default=Path(__file__).resolve().parents[2] / "shared/peers/nanogpt")
    ap.add_argument("--seconds", type=float, default=45.0, help="nanoGPT's training seconds per run (its max_iters = this / its s/step).")
    ap.add_argument("--lr-grid", type=float, nargs="+", default=[6e-4, 1.5e-3, 3.75e-3], help="tokenmill's peak LRs (tuning seed; the same grid as nanoGPT's).")
    ap.add_argument("--peer-lr-grid", type=float, nargs="+", default=[6e-4, 1.5e-3, 3.75e-3], help="nanoGPT's peak LRs (its default 6e-4 first).")
    ap.add_argument("--tune-seed", type=int, default=0)
    ap.add_argument("--report-seeds", type=int, nargs="*", default=[], help="Seeds the chosen pair reruns on, budget allowing.")
    ap.add_argument("--eval-docs", type=int, default=64, help="Held-out documents per bucket scored (at most).")
    ap.add_argument("--eval-every-share", type=float, default=1 / 8, help="tokenmill's evaluations, as a share of its expected steps.")
    ap.add_argument("--budget", type=float, default=480.0, help="Start no run after this many seconds.")
    ap.add_argument("--arm-timeout", type=float, default=240.0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--commit", default="unknown", help="The tokenmill commit that ran (recorded).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (both sides' shape).")
    ap.add_argument("--arm", dest="arms", nargs="+", action="append", default=[], metavar=("NAME", "SET"),
                    help="An extra tokenmill arm run beside the default one at every pair: its name, then its config overrides "
                    "(e.g. --arm muon train.optimizer=muon); judged the same way, under summary 'arms'.")
    ap.add_argument("--smoke-cpu", action="store_true", help="Check the plumbing on a CPU (eager, no figures).")
    args = ap.parse_args()
    if not args.smoke_cpu and not torch.cuda.is_available():
        ap.error("no CUDA device: this benchmark measures a GPU (--smoke-cpu checks the plumbing)")
    b = Bench(args)
    try:
        run_bench(b)
    finally:
        shutil.rmtree(b.work, ignore_errors=True)


def run_bench(b: Bench) -> None:
    args, cfg = b.args, b.cfg
    b.result = {"command": " ".join(sys.argv), "commit": args.commit, "torch": torch.__version__, "cuda": torch.version.cuda,
                "device": torch.cuda.get_device_name() if b.cuda else "cpu (smoke)", "python": platform.python_version(),
                "cpu_cores": os.cpu_count(), "load_avg": os.getloadavg()[0], "seconds": args.seconds,
                "shape": {"d_model": cfg.model.d_model, "n_layers": cfg.model.n_layers, "n_heads": cfg.model.n_heads,
                          "seq_len": cfg.train.seq_len, "batch": cfg.train.micro_batch * cfg.train.grad_accum,
                          "vocab": b.store.vocab_size},
                "nanogpt": {"commit": (args.peer / "COMMIT").read_text().split()[0] if (args.peer / "COMMIT").exists() else "unknown",
                            "sha256": {f: hashlib.sha256((args.peer / f).read_bytes()).hexdigest() for f in PEER_FILES}},
                "peer_data_tokens": b.sizes, "eval_docs": args.eval_docs, "grids": {"nanoGPT": args.peer_lr_grid, "tokenmill": args.lr_grid}}
    b.result["warm_up"] = w = warm_up(b)
    b.save()
    peer_steps = max(WARMUP + 2, round(args.seconds / w["nanoGPT"]["s_per_step"]))
    ours_s = w["tokenmill"]["s_per_step"]
    b.result["nanogpt_steps"] = peer_steps
    tuning: dict[str, dict[str, dict[str, Any]]] = {"nanoGPT": {}, "tokenmill": {}}
    b.result["tuning"] = tuning
    per_pair = (2.6 + 1.3 * len(args.arms)) * args.seconds + 30  # every run, their compiles, checkpoints and scoring
    for peer_lr, our_lr in zip(args.peer_lr_grid, args.lr_grid):
        if time.time() - b.t0 + per_pair > args.budget:
            b.result["stopped"] = f"budget: pair {peer_lr:g}/{our_lr:g} not started"
            break
        res = pair(b, peer_lr, our_lr, args.tune_seed, peer_steps, ours_s)
        for side, r in res.items():
            tuning.setdefault(side, {})[f"{peer_lr if side == 'nanoGPT' else our_lr:g}"] = r
        b.result["summary_tune_seed"] = summarize(tuning)
        b.save()
    chosen = b.result["summary_tune_seed"].get("best_lr")
    if chosen:
        b.result["report"] = {}
        for seed in args.report_seeds:
            if time.time() - b.t0 + per_pair > args.budget:
                b.result["stopped"] = f"budget: report seed {seed} not started"
                break
            res = pair(b, chosen["nanoGPT"], chosen["tokenmill"], seed, peer_steps, ours_s)  # arms at tokenmill's LR
            b.result["report"][str(seed)] = {"runs": res, "summary": summarize({k: {"x": v} for k, v in res.items()})}
            b.save()
    print(json.dumps(b.result.get("summary_tune_seed"), indent=1))
    b.save()


if __name__ == "__main__":
    main()
