"""FP16 with dynamic loss scaling against bf16 on one CUDA GPU (issue 45): the same config, seed and
batches, trained --steps steps (>= 300) each by the real trainer, `train.dtype=bfloat16` in one arm
and `train.dtype=float16` (fp32 master weights, loss scale from train.loss_scale) in the other.

Reported per arm: tokens/s (median step seconds after the first --warmup steps), the final training
loss (mean of the last 20 steps), held-out loss and bits per byte (the eval stage's Evaluator in
fp32), and for fp16 the overflow steps (skipped, `overflow` events), the scale at the end and its
lowest value. Ratios fp16 / bf16, and issue 45's target: the final training loss within 1%.

    python benchmarks/bench_fp16.py --run .gpu/run --steps 300 --set train.micro_batch=32 \\
        --json $OUT/fp16.json --commit $(git rev-parse --short HEAD)

`--smoke` runs both arms on the CPU (a few steps; torch's CPU autocast runs fp16 and bf16, emulated
and slow on a CPU without AVX512-FP16: the plumbing only, no figures).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_fp8 import LAST, bench_config, held_out, peak_gb, train_tokens  # noqa: E402

from tokenmill.runs import RunDir, read_events  # noqa: E402
from tokenmill.tokens.store import TokenStore  # noqa: E402

DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def arm(args: argparse.Namespace, ev: Any, name: str) -> dict[str, Any]:
    """One training run of --steps steps in the arm's dtype; its speed, losses and loss scale."""
    from tokenmill.train.trainer import run_train

    cuda = not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    root = Path(tempfile.mkdtemp(prefix="tm-fp16-"))
    scored: dict[str, float] = {}
    try:
        sets = [f"root={root}", "name=t", f"train.max_steps={args.steps}", f"train.seed={args.seed}",
                f"train.dtype={DTYPES[name]}", f"train.compile={str(cuda).lower()}", f"train.device={device.type}",
                "train.ckpt_every=0", "train.eval_every=0", *([] if cuda else ["train.peak_tflops=1"])]  # fmt: skip
        run = RunDir.create(bench_config(args, sets))
        shutil.copytree(args.run / "tokens", run.path / "tokens")
        t = time.time()
        run_train(run, resume=False, on_eval=lambda step, model: scored.update(held_out(ev, model, device)), progress=False)
        events = list(read_events(run.path / "events.jsonl"))
        steps = [e for e in events if e["kind"] == "train_step"]
        secs = [e["seconds"] for e in steps]
        tokens = run.config.train.micro_batch * run.config.train.seq_len * run.config.train.grad_accum
        s_step = statistics.median(secs[args.warmup :]) if len(secs) > args.warmup else statistics.median(secs)
        scales = [e["loss_scale"] for e in steps if "loss_scale" in e]
        return {
            "dtype": DTYPES[name], "steps": len(steps), "tokens_per_step": tokens, "s_per_step": s_step,
            "tokens_per_s": tokens / s_step, "final_train_loss": statistics.fmean(e["loss"] for e in steps[-LAST:]),
            "held_out_loss": scored.get("loss"), "held_out_bpb": scored.get("bpb"),
            "overflow_steps": [e["step"] for e in events if e["kind"] == "overflow"],
            "other_skips": [e["step"] for e in events if e["kind"] in ("skip", "spike", "rollback")],
            "final_scale": scales[-1] if scales else None, "min_scale": min(scales) if scales else None,
            "loss_curve": [[e["step"], e["loss"]] for e in steps[:: max(1, len(steps) // 50)]], "wall_s": time.time() - t,
            "epochs": tokens * len(steps) / train_tokens(run.path / "tokens"), "peak_memory_gb": peak_gb(steps),
        }  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ratios(bf16: dict[str, Any], fp16: dict[str, Any]) -> dict[str, Any]:
    """fp16 / bf16 for speed and each loss (above 1: fp16 trained worse), and the 1% target."""
    out: dict[str, Any] = {"tokens_per_s": fp16["tokens_per_s"] / bf16["tokens_per_s"]}
    for key in ("final_train_loss", "held_out_loss", "held_out_bpb"):
        out[key] = fp16[key] / bf16[key] if fp16.get(key) and bf16.get(key) else None
    out["target_loss_within_1pct"] = abs(out["final_train_loss"] - 1) <= 0.01 if out["final_train_loss"] else None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--config", type=Path, default=None, help="Model and recipe from this YAML (tokens from --run).")
    ap.add_argument("--arms", default="bf16,fp16", help="Arms run by this call, in order.")
    ap.add_argument("--steps", type=int, default=300, help="Optimizer steps per arm (issue 45 asks >= 300).")
    ap.add_argument("--warmup", type=int, default=10, help="First steps left out of the step time (compilation).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-docs", type=int, default=64, help="Held-out documents per bucket scored (at most).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (both arms).")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--commit", default="unknown", help="The tokenmill commit that ran (recorded).")
    ap.add_argument("--smoke", action="store_true", help="Both arms on the CPU, a few steps: the plumbing only.")
    args = ap.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        ap.error("no CUDA device here (--smoke checks the plumbing on a CPU)")
    if not set(args.arms.split(",")) <= set(DTYPES):
        ap.error(f"--arms {args.arms}: the arms are bf16 and fp16")
    from tokenmill.eval.evaluate import Evaluator

    cfg = bench_config(args)
    ev = Evaluator(TokenStore(args.run / "tokens"), cfg.train.seq_len, args.eval_docs, batch_size=8)
    result: dict[str, Any] = {
        "commit": args.commit, "device": torch.cuda.get_device_name() if not args.smoke else "cpu (smoke)",
        "torch": torch.__version__, "cuda": torch.version.cuda, "steps": args.steps, "seed": args.seed,
        "overrides": args.overrides, "config": str(args.config) if args.config else None,
        "shape": {"d_model": cfg.model.d_model, "n_layers": cfg.model.n_layers, "micro_batch": cfg.train.micro_batch,
                  "seq_len": cfg.train.seq_len},
        "loss_scale": cfg.train.loss_scale.model_dump(), "arms": {},
    }  # fmt: skip
    for name in args.arms.split(","):
        result["arms"][name] = arm(args, ev, name)
        print(f"{name}: {json.dumps({k: v for k, v in result['arms'][name].items() if k != 'loss_curve'})}", flush=True)
        if "bf16" in result["arms"] and "fp16" in result["arms"]:
            result["fp16_over_bf16"] = ratios(result["arms"]["bf16"], result["arms"]["fp16"])
        if args.json:  # an arm cut short by the lease's timeout keeps what the other measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1))
    if "fp16_over_bf16" in result:
        print(f"fp16 / bf16: {json.dumps(result['fp16_over_bf16'])}")
    return result


if __name__ == "__main__":
    main()
