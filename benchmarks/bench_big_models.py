"""Bigger models on one GPU (issue 43): the ~350M and ~1B configs (benchmarks/configs/gpu_350m.yaml,
gpu_1b.yaml; selective activation checkpointing) trained for a few steps by the real trainer
(`run_train`, bf16 autocast, `train.compile=true`, the configs' own recipe with document masking),
each config's measured peak memory beside the memory model's prediction.

Per config: median s/step over the steps after WARMUP (the first ones compile), tokens/s, MFU
(scaling/flops.py's FLOPs per token) against the bf16 matmul peak measured here
(`tokenmill.scaling.calibrate`) and against the datasheet's 989 TFLOP/s; the peak memory the
trainer logs per step (torch.cuda.max_memory_allocated, reset every step: their max) and the whole
run's torch.cuda.max_memory_allocated, beside `estimate_train_memory(..., device="cuda")` (its
peak and parts). Each config runs in its own process (a fresh CUDA context and allocator, so one
config's cached blocks never count in the next one's peak); the JSON is rewritten after each.

    python benchmarks/bench_big_models.py --run RUN --json out.json
RUN holds tokens/ (the token store of benchmarks/configs/gpu_125m.yaml: same data and vocabulary).
--smoke-cpu shrinks each model (d 64, 2 layers, seq 64) and runs it on the CPU with a synthetic
token store when --run is not given: the plumbing, not a figure.
"""

from __future__ import annotations

import argparse
import json
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

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [ROOT / "benchmarks/configs/gpu_350m.yaml", ROOT / "benchmarks/configs/gpu_1b.yaml"]
WARMUP = 5
DATASHEET_BF16 = 989e12  # H100/H200 SXM dense bf16
SAME_WORK = ["mixture.phases=[]", "train.eval_every=0", "train.ckpt_every=0", "train.log_every=0"]
SMOKE = ["model.d_model=64", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_hidden=128",
         "model.max_seq_len=64", "train.seq_len=64", "train.micro_batch=2", "train.compile=false", "train.dtype=float32"]


def overrides(steps: int, smoke: bool, tmp: str) -> list[str]:
    warm = max(1, steps // 10)
    base = [f"train.max_steps={steps}", f"train.warmup_steps={warm}", f"root={tmp}", "name=big", *SAME_WORK]
    return [*base, *SMOKE] if smoke else [*base, "train.compile=true", "train.dtype=bfloat16"]


def estimate(cfg: Any, model_cfg: Any, device: str) -> dict[str, float]:
    """The memory model's bytes for this run, in GB (dtype as the trainer resolves it here)."""
    from tokenmill.scaling.memory import estimate_train_memory
    from tokenmill.train.device import resolve_dtype

    dtype = resolve_dtype(torch.device(device), cfg.train.dtype)
    est = estimate_train_memory(model_cfg, cfg.train, dtype, doc_masking=cfg.mixture.doc_masking, device=device)
    return {k: v / 1e9 for k, v in est.items()}


def one_config(config: Path, run: Path, steps: int, smoke: bool) -> dict[str, Any]:
    """Train `config` on run/tokens for `steps` steps in this process; what it measured."""
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir, read_events
    from tokenmill.scaling.flops import flops_per_token, param_count
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.trainer import resolve_model_config, run_train

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(config, overrides(steps, smoke, tmp))
        rd = RunDir.create(cfg)
        shutil.copytree(run / "tokens", rd.path / "tokens")
        model_cfg = resolve_model_config(cfg.model, TokenStore(rd.path / "tokens"), cfg.train.seq_len)
        out: dict[str, Any] = {"config": config.name, "params": param_count(model_cfg)["total"],
                               "activation_checkpointing": cfg.train.activation_checkpointing,
                               "micro_batch": cfg.train.micro_batch, "seq_len": cfg.train.seq_len,
                               "flops_per_token": flops_per_token(model_cfg, cfg.train.seq_len),
                               "estimate_gb": estimate(cfg, model_cfg, device)}
        t0 = time.perf_counter()
        run_train(rd, resume=False, progress=False)
        out["wall_s"] = time.perf_counter() - t0
        ev = [e for e in read_events(rd.path / "events.jsonl") if e["kind"] == "train_step"]
    out["seconds"] = [e["seconds"] for e in ev]
    out["losses"] = [e["loss"] for e in ev]
    if device == "cuda":
        out["peak_step_gb"] = max(e["memory_peak"] for e in ev) / 1e9
        out["max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 1e9
        out["reserved_at_end_gb"] = torch.cuda.memory_reserved() / 1e9
    return out


def summarize(res: dict[str, Any], peak_flops: float) -> None:
    """Median s/step after the warmup steps, tokens/s, MFU, and measured / estimated peak."""
    timed = res["seconds"][WARMUP:] or res["seconds"]
    res["s_per_step"] = statistics.median(timed)
    res["tokens_per_s"] = res["micro_batch"] * res["seq_len"] / res["s_per_step"]
    achieved = res["tokens_per_s"] * res["flops_per_token"]
    res["mfu_measured_peak"] = achieved / peak_flops
    res["mfu_datasheet"] = achieved / DATASHEET_BF16
    if "peak_step_gb" in res:
        res["measured_over_estimate"] = res["peak_step_gb"] / res["estimate_gb"]["peak"]


def print_row(res: dict[str, Any]) -> None:
    if "error" in res:
        print(f"| {res['config']} | failed: {res['error'][-200:]} |", flush=True)
        return
    mem = f"{res['peak_step_gb']:.1f}" if "peak_step_gb" in res else "-"
    print(f"| {res['config']} | {res['params'] / 1e6:.0f}M | {res['activation_checkpointing']} | {res['micro_batch']} "
          f"| {res['s_per_step'] * 1000:.0f} | {res['tokens_per_s']:,.0f} | {res['mfu_measured_peak']:.1%} "
          f"| {res['mfu_datasheet']:.1%} | {mem} | {res['estimate_gb']['peak']:.1f} |", flush=True)


def run_child(args: argparse.Namespace, config: Path, run: Path) -> dict[str, Any]:
    """One config in a fresh process (its own CUDA context); its result, or the error it ended with."""
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        cmd = [sys.executable, __file__, "--one", str(config), "--run", str(run), "--steps", str(args.steps),
               "--json", tmp.name, *(["--smoke-cpu"] if args.smoke_cpu else [])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.config_timeout)
        except subprocess.TimeoutExpired:
            return {"config": config.name, "error": f"timed out after {args.config_timeout} s"}
        if proc.returncode != 0:
            return {"config": config.name, "error": (proc.stderr or proc.stdout)[-2000:]}
        return json.loads(Path(tmp.name).read_text())


def tiny_store(root: Path) -> Path:
    """A synthetic token store for --smoke-cpu (the tests' one)."""
    sys.path.insert(0, str(ROOT))
    from tests.conftest import write_tiny_store

    write_tiny_store(root / "tokens")
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="Directory with tokens/ (gpu_125m.yaml's token store).")
    ap.add_argument("--configs", type=Path, nargs="+", default=CONFIGS)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--budget", type=float, default=1e9, help="Start no config after this many seconds.")
    ap.add_argument("--config-timeout", type=float, default=150.0, help="Seconds one config may run.")
    ap.add_argument("--smoke-cpu", action="store_true", help="Tiny models on the CPU: the plumbing, not a figure.")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the child process: one config
    args = ap.parse_args()
    if args.one:
        args.json.write_text(json.dumps(one_config(args.one, args.run, args.steps, args.smoke_cpu)))
        return
    if not torch.cuda.is_available() and not args.smoke_cpu:
        ap.error("no CUDA device here (--smoke-cpu checks the plumbing on a CPU)")
    from tokenmill.scaling.calibrate import calibrate

    [cal] = calibrate("cuda" if torch.cuda.is_available() else "cpu", seconds=0.5 if args.smoke_cpu else 3.0,
                      dtypes=[torch.bfloat16])
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    result: dict[str, Any] = {"commit": args.commit, "device": device, "torch": torch.__version__,
                              "steps": args.steps, "warmup": WARMUP, "smoke_cpu": args.smoke_cpu,
                              "peak_bf16_measured": cal["peak_flops"], "peak_bf16_datasheet": DATASHEET_BF16, "runs": []}
    print(f"{device}: bf16 matmul peak {cal['peak_flops'] / 1e12:.0f} TFLOP/s measured", flush=True)
    print("| config | params | AC | micro-batch | ms/step | tokens/s | MFU (measured) | MFU (989) | peak GB | estimate GB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        run = args.run or tiny_store(Path(scratch))
        for config in args.configs:
            if time.perf_counter() - start > args.budget:
                break
            res = run_child(args, config, run)
            if "error" not in res:
                summarize(res, cal["peak_flops"])
            result["runs"].append(res)
            args.json.write_text(json.dumps(result, indent=1))
            print_row(res)


if __name__ == "__main__":
    main()
