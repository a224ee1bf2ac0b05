"""tokenmill's trainer beside karpathy/nanoGPT's `train.py` on this CPU: speed and quality at equal time.

Which nanoGPT ran: the unmodified `model.py`, `train.py` and `configurator.py` of
github.com/karpathy/nanoGPT at the commit in ../shared/peers/nanogpt/COMMIT (their sha256 are printed
and recorded), copied to a scratch directory and run as published, `python train.py --key=value`, in
a subprocess with OMP_NUM_THREADS = --threads. On a CPU its train.py runs fp32 (its autocast
context is a nullcontext for device 'cpu'); --compile=False on its side and train.compile=false on
tokenmill's (eager against eager: compiling would put minutes into the first step of a timed
run; tokenmill's compiled figures are in bench_train_speed).

Same shape on both sides: d_model, layers, heads, context (block_size = train.seq_len), batch
(batch_size = micro_batch, gradient_accumulation_steps = grad_accum), vocabulary (meta.pkl gives nanoGPT
the token store's vocab_size), tied embeddings. Each model keeps its own architecture: nanoGPT
is GPT-2 (learned positions, LayerNorm, GELU 4d, its default bias=False); tokenmill its default
recipe (RoPE, RMSNorm, SwiGLU, document masking, bf16 autocast where the CPU has native bf16).
Same optimizer recipe: AdamW (0.9, 0.95), weight decay 0.1, clip 1.0, the tokenmill config's peak
LR, linear warmup over the same share of the run, cosine to LR/10.

Same data: nanoGPT's train.bin is the token store's training documents of all buckets
concatenated with EOS between them (uint16, as its prepare.py writes), val.bin the held-out ones.
nanoGPT samples random windows of that stream; tokenmill its mixture loader (one phase at
seq_len: the curriculum is left out so both train at the same context).

Speed: runs interleaved per repeat (nanoGPT fp32, tokenmill fp32, tokenmill default), each the
median s/step after the warm-up iterations (nanoGPT's own "iter N: ... time Xms" lines), then the
median over repeats; tokens/s ratios and MFU against `tokenmill calibrate`'s peak of each dtype.

Quality at equal CPU time (--seconds > 0), both sides tuned, several seeds:
- Equal seconds by construction. nanoGPT's train.py stops at max_iters (= --seconds / its
  measured s/step, its cosine spanning them); the seconds its run actually took (the sum of its
  own iteration times) become the paired tokenmill run's train.max_seconds: tokenmill stops at the
  step whose summed step seconds end nearest them, its LR schedule on the elapsed share
  (train/time_budget.py), so neither side gets the other's probe error.
- Each side's LR: a 3-point grid per side (--lr-grid around tokenmill's default 3e-3,
  --peer-lr-grid with nanoGPT's own default 6e-4), both fp32, on the tuning seed only; a grid
  whose best point is at its edge gets one more point past it. The chosen LRs are then run on the
  report seeds (default 1 2 3), never on the tuning seed.
- Arms on each report seed: nanoGPT fp32 (its CPU path: its default), tokenmill fp32 (equal
  precision) and tokenmill's default dtype (bf16 autocast where the CPU has native bf16) at the
  fp32-chosen LR. Seeds: tokenmill's train.seed; nanoGPT's torch seed shifted by the seed
  (SEED_LAUNCHER; its init and its batch draws both follow it).
- Scoring: nanoGPT's final checkpoint (torch.load(weights_only=True) of its ckpt.pt) and
  tokenmill's, by the same Evaluator (eval stage) in fp32 on the same held-out documents (all of
  them, up to --eval-docs per bucket): bits per byte per bucket and byte-weighted overall; the
  ratio tokenmill / nanoGPT per seed, then mean ± sd over the report seeds.

    .venv/bin/python benchmarks/bench_vs_nanogpt.py --run runs/demo --threads 2 --steps 30 --repeats 3 --seconds 180
    # ~25M parameters:
    .venv/bin/python benchmarks/bench_vs_nanogpt.py --run runs/demo --set model.d_model=512 \\
        --set model.n_layers=8 --set model.n_heads=8 --steps 15 --repeats 2 --seconds 0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from provenance import cpu_model
from tokenmill.config import RunConfig, load_config
from tokenmill.runs import RunDir, read_events
from tokenmill.tokens.store import TokenStore

PEER = Path(__file__).resolve().parents[2] / "shared" / "peers" / "nanogpt"
PEER_FILES = ("model.py", "train.py", "configurator.py")
WARMUP = 5
QUIET = ["mixture.phases=[]", "train.eval_every=0", "train.log_every=0", "train.compile=false"]  # eager, as nanoGPT here
ITER_LINE = re.compile(r"^iter (\d+): loss ([\d.]+), time ([\d.]+)ms")


def peer_identity() -> dict[str, Any]:
    """The nanoGPT commit and the sha256 of the files that ran."""
    commit = (PEER / "COMMIT").read_text().split()[0] if (PEER / "COMMIT").exists() else "unknown"
    return {"repo": "github.com/karpathy/nanoGPT", "commit": commit,
            "sha256": {f: hashlib.sha256((PEER / f).read_bytes()).hexdigest() for f in PEER_FILES}}


def tokenmill_config(src: Path, overrides: list[str], extra: list[str] = ()) -> RunConfig:
    return load_config(src / "config.yaml", [*QUIET, *overrides, *extra])


def write_peer_data(store: TokenStore, dest: Path) -> dict[str, int]:
    """train.bin / val.bin (uint16, EOS-separated documents) and meta.pkl, as nanoGPT's prepare.py."""
    if store.vocab_size > 65536:
        raise ValueError(f"{store.root}: vocab_size {store.vocab_size} does not fit nanoGPT's uint16 .bin files")
    dest.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for split in ("train", "val"):
        pieces = []
        for bucket in store.buckets:
            for shard, i in store.docs(bucket, split):
                pieces.append(np.asarray(shard.doc(i), dtype=np.uint16))  # stored documents end in EOS
        data = np.concatenate(pieces)
        data.tofile(dest / f"{split}.bin")
        sizes[split] = int(data.size)
    with open(dest / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": store.vocab_size}, f)
    return sizes


def peer_args(cfg: RunConfig, steps: int, out_dir: Path, save: bool, lr: float | None = None) -> list[str]:
    """nanoGPT's command-line config for the same shape and optimizer recipe (`lr`: another peak LR)."""
    m, tc = cfg.model, cfg.train
    lr = tc.lr if lr is None else lr
    warm = warmup_for(cfg, steps)
    return [f"--out_dir={out_dir}", "--dataset=tokenmill", "--device=cpu", "--compile=False", "--dtype=float32",
            f"--n_layer={m.n_layers}", f"--n_head={m.n_heads}", f"--n_embd={m.d_model}",
            f"--block_size={tc.seq_len}", f"--batch_size={tc.micro_batch}", f"--gradient_accumulation_steps={tc.grad_accum}",
            f"--learning_rate={lr}", f"--min_lr={lr * tc.min_lr_ratio}", f"--warmup_iters={warm}",
            f"--lr_decay_iters={steps}", f"--max_iters={steps}", f"--weight_decay={tc.weight_decay}",
            f"--beta1={tc.beta1}", f"--beta2={tc.beta2}", f"--grad_clip={tc.grad_clip}", "--dropout=0.0",
            # one eval batch at iter 0 (train.py always evaluates there) and, when saving, at the end
            f"--eval_interval={steps if save else 10 ** 9}", "--eval_iters=1", "--log_interval=1",
            f"--always_save_checkpoint={save}"]


def warmup_for(cfg: RunConfig, steps: int) -> int:
    """The config's warmup share of its max_steps, applied to a run of `steps` (both sides)."""
    return max(1, round(cfg.train.warmup_steps * steps / cfg.train.max_steps))


# train.py seeds with torch.manual_seed(1337 + seed_offset), seed_offset 0 outside DDP, and no
# flag sets it. Another seed, without editing the file: the launcher shifts that one call by the
# seed and then runs train.py as __main__ (seed 0 is the published run exactly).
SEED_LAUNCHER = ("import runpy, sys, torch; shift = int(sys.argv.pop(1)); seed = torch.manual_seed; "
                 "torch.manual_seed = lambda s: seed(s + shift); sys.argv[0] = 'train.py'; "
                 "runpy.run_path('train.py', run_name='__main__')")


def nanogpt_run(work: Path, cfg: RunConfig, steps: int, threads: int, save: bool = False,
                lr: float | None = None, seed: int = 0) -> dict[str, Any]:
    """One run of the published train.py; s/step and seconds from its per-iteration time lines."""
    out_dir = work / ("out" if save else "out_speed")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-c", SEED_LAUNCHER, str(seed), *peer_args(cfg, steps, out_dir, save, lr)],
                          cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nanoGPT train.py failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    iters = [m.groups() for m in map(ITER_LINE.match, proc.stdout.splitlines()) if m]
    secs = [float(t) / 1000 for _, _, t in iters[: steps]]  # iteration max_iters runs after the save
    losses = [float(loss) for _, loss, _ in iters[: steps]]
    return {"s_per_step": statistics.median(secs[WARMUP:]), "train_seconds": sum(secs), "losses": losses,
            "checkpoint": out_dir / "ckpt.pt"}


def tokenmill_run(src: Path, cfg_overrides: list[str], steps: int, threads: int, dtype: str,
                  keep: Path | None = None, warmup: int | None = None, seed: int | None = None,
                  lr: float | None = None, seconds: float | None = None) -> dict[str, Any]:
    """The real trainer (run_train) in a scratch run directory with a copy of the token store;
    `seconds`: stopped by its own clock (train.max_seconds), `steps` then only the ceiling."""
    from tokenmill.train.trainer import run_train

    root = keep or Path(tempfile.mkdtemp())
    try:
        cfg = tokenmill_config(src, cfg_overrides, [f"root={root}", "name=t", f"train.max_steps={steps}",
                                                    f"train.threads={threads}", f"train.dtype={dtype}",
                                                    f"train.ckpt_every={steps if keep else 0}",
                                                    *([f"train.warmup_steps={warmup}"] if warmup else []),
                                                    *([f"train.seed={seed}"] if seed is not None else []),
                                                    *([f"train.lr={lr}"] if lr is not None else []),
                                                    *([f"train.max_seconds={seconds}"] if seconds else [])])
        run = RunDir.create(cfg)
        shutil.copytree(src / "tokens", run.path / "tokens")
        run_train(run, resume=False, progress=False)
        ev = [e for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"]
        secs = [e["seconds"] for e in ev]
        return {"s_per_step": statistics.median(secs[WARMUP:]), "train_seconds": sum(secs),
                "losses": [e["loss"] for e in ev], "run": run.path}
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


class NanoGPTLogits(torch.nn.Module):
    """nanoGPT's GPT returns all positions' logits only when given targets; the Evaluator wants them."""

    def __init__(self, gpt: torch.nn.Module):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        return self.gpt(idx, targets=torch.zeros_like(idx))[0]


def load_nanogpt(work: Path, ckpt: Path) -> torch.nn.Module:
    sys.path.insert(0, str(work))
    try:
        from model import GPT, GPTConfig  # nanoGPT's own model.py, from the scratch copy
    finally:
        sys.path.remove(str(work))
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    gpt = GPT(GPTConfig(**state["model_args"]))
    gpt.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in state["model"].items()})
    return NanoGPTLogits(gpt)


def load_tokenmill(run_path: Path) -> torch.nn.Module:
    from tokenmill.train.checkpoint import latest_checkpoint
    from tokenmill.train.restore import load_model

    ckpt = latest_checkpoint(run_path / "checkpoints")
    if ckpt is None:
        raise FileNotFoundError(f"{run_path}: the tokenmill run saved no checkpoint")
    return load_model(ckpt, torch.device("cpu"))[0]


def overall_bpb(buckets: dict[str, dict]) -> float:
    nats = sum(b["bpb"] * b["bytes"] for b in buckets.values())
    return nats / sum(b["bytes"] for b in buckets.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"), help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--steps", type=int, default=30, help="Steps per speed run (the first 5 are warm-up).")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--seconds", type=float, default=180.0,
                    help="nanoGPT's training seconds per quality run (its step count = this / its s/step); "
                         "each paired tokenmill run trains the seconds that run took (0: skip quality).")
    ap.add_argument("--lr-grid", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2],
                    help="tokenmill's peak LRs tried on the tuning seed (its default 3e-3 in the middle).")
    ap.add_argument("--peer-lr-grid", type=float, nargs="+", default=[6e-4, 2e-3, 6e-3],
                    help="nanoGPT's peak LRs tried on the tuning seed (its default 6e-4 among them).")
    ap.add_argument("--tune-seed", type=int, default=0, help="The seed the LRs are chosen on.")
    ap.add_argument("--report-seeds", type=int, nargs="+", default=[1, 2, 3], help="The seeds the result is reported on.")
    ap.add_argument("--eval-docs", type=int, default=100, help="Held-out documents per bucket scored (at most).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="tokenmill config override (both sides' shape).")
    args = ap.parse_args()
    if args.steps <= WARMUP:
        ap.error(f"--steps must exceed the {WARMUP} warm-up steps")
    from tokenmill.scaling.flops import flops_per_token
    from tokenmill.train.device import cpu_has_native_bf16
    from tokenmill.train.trainer import resolve_model_config

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_train_speed import calibrated_peak

    store = TokenStore(args.run / "tokens")
    cfg = tokenmill_config(args.run, args.overrides)
    default_dtype = "bfloat16" if cpu_has_native_bf16() else "float32"
    work = Path(tempfile.mkdtemp(prefix="nanogpt-"))
    try:
        for f in PEER_FILES:
            shutil.copy(PEER / f, work / f)
        sizes = write_peer_data(store, work / "data" / "tokenmill")
        variants = {
            "nanoGPT train.py fp32 (its CPU path)": lambda n: nanogpt_run(work, cfg, n, args.threads),
            "tokenmill fp32": lambda n: tokenmill_run(args.run, args.overrides, n, args.threads, "float32"),
            f"tokenmill default ({default_dtype})": lambda n: tokenmill_run(args.run, args.overrides, n,
                                                                            args.threads, default_dtype),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for r in range(args.repeats):  # interleaved
            for name, fn in variants.items():
                times[name].append(fn(args.steps)["s_per_step"])
                print(f"repeat {r}: {name}: {times[name][-1]:.4f} s/step", flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        peer_name, fp32_name, default_name = list(variants)
        mcfg = resolve_model_config(cfg.model, store, cfg.train.seq_len)
        tokens = cfg.train.micro_batch * cfg.train.seq_len * cfg.train.grad_accum
        n_embd, L, T = cfg.model.d_model, cfg.model.n_layers, cfg.train.seq_len
        # One formula for both sides: 6 x matmul parameters (its GPT: 12 L d^2 and the tied head)
        # + 12 L d T for attention, as scaling/flops.py counts tokenmill's (nanoGPT's own
        # estimate_mfu counts attention at 6 L d T, which would understate its MFU here).
        peer_fpt = 6 * (12 * L * n_embd ** 2 + store.vocab_size * n_embd) + 12 * L * n_embd * T
        fpt = {peer_name: peer_fpt, fp32_name: flops_per_token(mcfg, T), default_name: flops_per_token(mcfg, T)}
        peaks = {dt: calibrated_peak(getattr(torch, dt), args.threads) for dt in {"float32", default_dtype}}
        rows = []
        print("\n| run | s/step | tokens/s | × nanoGPT | MFU (peak of its dtype) |\n|---|---|---|---|---|")
        for name, s in med.items():
            dt = default_dtype if name == default_name else "float32"
            mfu = fpt[name] * tokens / s / peaks[dt][0]
            rows.append({"run": name, "s_per_step": s, "tokens_per_s": tokens / s,
                         "speedup_vs_nanogpt": med[peer_name] / s, "mfu": mfu, "flops_per_token": fpt[name]})
            print(f"| {name} | {s:.3f} | {tokens / s:,.0f} | {med[peer_name] / s:.2f}× | {mfu:.1%} |")
        result: dict[str, Any] = {
            "nanogpt": peer_identity(), "torch": torch.__version__, "python": platform.python_version(),
            "cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)), "threads": args.threads,
            "overrides": args.overrides, "shape": {"d_model": n_embd, "n_layers": L, "n_heads": cfg.model.n_heads,
                                                   "seq_len": T, "batch": cfg.train.micro_batch,
                                                   "vocab": store.vocab_size},
            "peer_data_tokens": sizes, "steps": args.steps, "repeats": args.repeats, "rows": rows,
            "peak_flops": {k: {"flops": v[0], "source": v[1]} for k, v in peaks.items()},
            "s_per_step_all_repeats": times}
        if args.seconds > 0:
            result["quality"] = quality(args, work, cfg, med[peer_name], med[default_name], default_dtype, store)
        print(json.dumps(result, indent=1, default=str))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def quality(args: argparse.Namespace, work: Path, cfg: RunConfig, peer_s: float, ours_s: float,
            dtype: str, store: TokenStore) -> dict[str, Any]:
    """LR grids on the tuning seed, then the chosen LRs on the report seeds; every tokenmill run
    trains exactly the seconds its paired nanoGPT run took (train.max_seconds)."""
    from tokenmill.eval.evaluate import Evaluator

    ev = Evaluator(store, cfg.train.seq_len, args.eval_docs, batch_size=16)
    peer_steps = max(WARMUP + 1, round(args.seconds / peer_s))
    ceiling = 3 * max(1, round(args.seconds / ours_s))  # tokenmill's max_steps: only a ceiling

    def pair(lrs: dict[str, float], seed: int, dtypes: list[str]) -> dict[str, dict[str, Any]]:
        """nanoGPT first (its run sets the seconds), then each tokenmill arm for those seconds."""
        peer = nanogpt_run(work, cfg, peer_steps, args.threads, save=True, lr=lrs["nanoGPT"], seed=seed)
        out = {"nanoGPT": {"lr": lrs["nanoGPT"], "steps": peer_steps, "seconds": peer["train_seconds"],
                           **score(ev, load_nanogpt(work, peer["checkpoint"]))}}
        for dt in dtypes:
            keep = Path(tempfile.mkdtemp(prefix="tm-"))
            try:
                ours = tokenmill_run(args.run, args.overrides, ceiling, args.threads, dt, keep=keep,
                                     warmup=warmup_for(cfg, ceiling), seed=seed, lr=lrs["tokenmill"],
                                     seconds=peer["train_seconds"])
                out[f"tokenmill {dt}"] = {"lr": lrs["tokenmill"], "steps": len(ours["losses"]),
                                          "seconds": ours["train_seconds"], **score(ev, load_tokenmill(ours["run"]))}
            finally:
                shutil.rmtree(keep, ignore_errors=True)
        for arm, r in out.items():
            print(f"seed {seed}: {arm} lr {r['lr']:g}: {r['steps']} steps in {r['seconds']:.1f} s, bpb {r['bpb']:.4f}",
                  flush=True)
        return out

    # 1. Tuning seed: each side's grid (extended once past an edge that wins), fp32 on both sides.
    grids = {"nanoGPT": sorted(args.peer_lr_grid), "tokenmill": sorted(args.lr_grid)}
    tuning: dict[str, dict[float, dict[str, Any]]] = {"nanoGPT": {}, "tokenmill": {}}

    def run_grid(points: dict[str, list[float]]) -> None:
        for i in range(max(len(v) for v in points.values())):
            lrs = {side: v[min(i, len(v) - 1)] for side, v in points.items()}
            if all(lrs[side] in tuning[side] for side in lrs):
                continue
            # nanoGPT always runs: its run is the clock of the tokenmill run beside it
            res = pair(lrs, args.tune_seed, [] if lrs["tokenmill"] in tuning["tokenmill"] else ["float32"])
            tuning["nanoGPT"].setdefault(lrs["nanoGPT"], res["nanoGPT"])
            if "tokenmill float32" in res:
                tuning["tokenmill"][lrs["tokenmill"]] = res["tokenmill float32"]

    run_grid(grids)
    extra: dict[str, list[float]] = {}
    for side, grid in grids.items():
        best = min(tuning[side], key=lambda lr: tuning[side][lr]["bpb"])
        if best in (min(grid), max(grid)):  # the optimum may lie past the edge: one more point that way
            step = grid[1] / grid[0] if best == min(grid) else grid[-1] / grid[-2]
            extra[side] = [best / step if best == min(grid) else best * step]
    if extra:
        for side in grids:
            extra.setdefault(side, [min(tuning[side], key=lambda lr: tuning[side][lr]["bpb"])])
            grids[side] = sorted(set(grids[side]) | set(extra[side]))
        run_grid(extra)
    chosen = {side: min(t, key=lambda lr: t[lr]["bpb"]) for side, t in tuning.items()}
    print(f"chosen on seed {args.tune_seed}: {chosen}", flush=True)

    # 2. Report seeds: the chosen LRs, fp32 against fp32 and each side's default.
    arms = ["float32"] + ([dtype] if dtype != "float32" else [])
    report = {seed: pair(chosen, seed, arms) for seed in args.report_seeds}
    per_arm = {arm: [report[s][arm]["bpb"] for s in args.report_seeds] for arm in report[args.report_seeds[0]]}
    ratios = {arm: [report[s][arm]["bpb"] / report[s]["nanoGPT"]["bpb"] for s in args.report_seeds]
              for arm in per_arm if arm != "nanoGPT"}
    summary = {arm: {"mean": statistics.mean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0}
               for arm, v in {**per_arm, **{f"ratio {a}": r for a, r in ratios.items()}}.items()}
    for k, v in summary.items():
        print(f"{k}: {v['mean']:.4f} ± {v['sd']:.4f}")
    return {"budget_seconds": args.seconds, "nanogpt_steps": peer_steps, "tokenmill_max_steps_ceiling": ceiling,
            "grids": grids, "tune_seed": args.tune_seed, "report_seeds": args.report_seeds,
            "tuning": {side: {f"{lr:g}": r for lr, r in sorted(t.items())} for side, t in tuning.items()},
            "chosen_lr": chosen, "default_dtype": dtype,
            "report": {str(s): r for s, r in report.items()}, "summary": summary,
            "ratio_tokenmill_over_nanogpt": {arm: summary[f"ratio {arm}"]["mean"] for arm in ratios}}


def score(ev: Any, model: torch.nn.Module) -> dict[str, Any]:
    """Byte-weighted held-out bpb and each bucket's, scored in fp32 by the eval stage's Evaluator."""
    buckets = ev.score(model, torch.device("cpu"), "float32")
    return {"bpb": overall_bpb(buckets), "buckets": {b: {"bpb": v["bpb"], "loss": v["loss"]} for b, v in buckets.items()}}


if __name__ == "__main__":
    main()
