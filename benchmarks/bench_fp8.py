"""FP8 training against bf16 on one CUDA GPU (issue 43): the same config, seed and batches, trained
--steps steps (>= 300) each by the real trainer with torch.compile, bf16 autocast in both arms and
`train.fp8=true` in the second (torchao Float8Linear, tensorwise, in the blocks' projections).

Reported per arm: tokens/s (median step seconds after the first --warmup steps, so compilation is
out), the final training loss (mean of the last 20 steps: one step's loss is noisy), held-out loss
and bits per byte scored by the eval stage's Evaluator in fp32 on up to --eval-docs documents per
bucket. The FP8 run's weights are scored in a plain model, without torchao (what its checkpoint
gives a user). Ratios: fp8 / bf16 tokens/s (the speed-up) and fp8 / bf16 losses.

    python benchmarks/bench_fp8.py --run .gpu/run --steps 300 --set train.micro_batch=32 \\
        --json $OUT/fp8.json --commit $(git rev-parse --short HEAD)

`--smoke-cpu` checks the plumbing on a CPU (fp32, eager, a few steps, fp8 off in both arms: the
CPU refuses it), no figures.

At ~1 B (issue 43's target: FP8 >= 1.2x bf16 tokens/s, training loss within 1%, >= 300 steps):
`--config benchmarks/configs/gpu_1b.yaml` takes the model and recipe from that file (d 2048 x 16
layers, GQA 32/8, SwiGLU 8192, selective activation checkpointing, seq 1024) and the tokens from
--run (the store of gpu_125m.yaml: the same tokenizer and 32,768-token vocabulary as gpu_1b.yaml).
The selective policy keeps the FP8 projections' outputs as it keeps bf16 ones (it sees aten.mm on
torchao's float8 tensors: MUST_SAVE, checked on the CPU), so neither arm recomputes a matmul.

The lease's budget, estimated from FLOPs: 6.64 GFLOP per token (scaling/flops.py: 6 x 1.04e9
parameters plus attention) at ~400 TFLOP/s bf16 (about half the H100's measured ~800 peak) is
0.27 s per step at the config's micro-batch 16 (34.4 GiB planned by the memory model) and 0.14 s at
micro-batch 8 (24.0 GiB planned). Each arm also needs ~60-120 s of compilation, ~20 s of start-up
(the 1B init, the peak timing) and ~10 s of held-out scoring (8 documents per bucket, fp32), so at
micro-batch 16 one arm is ~3.5-4.5 min and two do not fit one 10-minute command with margin; at
micro-batch 8 one arm is ~2.5-3 min (300 steps ~41 s bf16, ~34 s FP8 at 1.2x), which is what
benchmarks/lease_issue43_fp8_1b.sh runs: one process per arm (`--arms bf16`, then `--arms fp8` into
the same --json, which adds the ratios once both arms are there), each under its own timeout.
300 steps x 8 x 1,024 tokens = 2.5 M tokens per arm, a sixth of the store's 14.5 M training tokens:
no epoch is repeated (the JSON records `epochs`).
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
from bench_vs_nanogpt import QUIET, overall_bpb, tokenmill_config  # noqa: E402

from tokenmill.model.transformer import Transformer  # noqa: E402
from tokenmill.runs import RunDir, read_events  # noqa: E402
from tokenmill.tokens.store import TokenStore  # noqa: E402

LAST = 20  # steps the final training loss averages


def held_out(ev: Any, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
    """Held-out loss (token-weighted nats) and bpb of `model`'s weights in a plain Transformer."""
    plain = Transformer(model.config).to(device)  # type: ignore[arg-type]
    plain.load_state_dict(model.state_dict())  # Float8Linear keeps nn.Linear's names: no torchao needed
    buckets = ev.score(plain, device, "float32")
    tokens = sum(b["tokens"] for b in buckets.values())
    return {"loss": sum(b["loss"] * b["tokens"] for b in buckets.values()) / tokens, "bpb": overall_bpb(buckets)}


def bench_config(args: argparse.Namespace, sets: list[str] = ()) -> Any:
    """The run's config, or --config's model and recipe (the tokens stay --run's), with the overrides."""
    if args.config is None:
        return tokenmill_config(args.run, args.overrides, sets)
    from tokenmill.config import load_config

    return load_config(args.config, [*QUIET, *args.overrides, *sets])


def arm(args: argparse.Namespace, ev: Any, fp8: bool) -> dict[str, Any]:
    """One training run of --steps steps; its speed and losses."""
    from tokenmill.train.trainer import run_train

    cuda = not args.smoke_cpu
    device = torch.device("cuda" if cuda else "cpu")
    root = Path(tempfile.mkdtemp(prefix="tm-fp8-"))
    scored: dict[str, float] = {}
    try:
        sets = [f"root={root}", "name=t", f"train.max_steps={args.steps}", f"train.seed={args.seed}",
                f"train.dtype={'bfloat16' if cuda else 'float32'}", f"train.compile={str(cuda).lower()}",
                f"train.device={device.type}", f"train.fp8={str(fp8).lower()}", "train.ckpt_every=0", "train.eval_every=0"]
        run = RunDir.create(bench_config(args, sets))
        shutil.copytree(args.run / "tokens", run.path / "tokens")
        t = time.time()
        run_train(run, resume=False, on_eval=lambda step, model: scored.update(held_out(ev, model, device)), progress=False)
        events = list(read_events(run.path / "events.jsonl"))
        steps = [e for e in events if e["kind"] == "train_step"]
        converted = next((e["converted"] for e in events if e["kind"] == "fp8"), [])
        secs = [e["seconds"] for e in steps]
        tokens = run.config.train.micro_batch * run.config.train.seq_len * run.config.train.grad_accum
        s_step = statistics.median(secs[args.warmup:]) if len(secs) > args.warmup else statistics.median(secs)
        return {"fp8": fp8, "steps": len(steps), "tokens_per_step": tokens, "s_per_step": s_step, "tokens_per_s": tokens / s_step,
                "first_step_s": secs[0], "final_train_loss": statistics.fmean(e["loss"] for e in steps[-LAST:]),
                "held_out_loss": scored.get("loss"), "held_out_bpb": scored.get("bpb"), "fp8_linears": len(converted),
                "loss_curve": [[e["step"], e["loss"]] for e in steps[:: max(1, len(steps) // 50)]], "wall_s": time.time() - t,
                "epochs": tokens * len(steps) / train_tokens(run.path / "tokens"), "peak_memory_gb": peak_gb(steps)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def train_tokens(store: Path) -> int:
    """Training-split tokens in the store (what one epoch holds)."""
    meta = json.loads((store / "_meta.json").read_text())
    return sum(b["train"]["tokens"] for b in meta["buckets"].values())


def peak_gb(steps: list[dict[str, Any]]) -> float | None:
    """The steps' highest logged peak memory (CUDA; None on a CPU)."""
    peaks = [e.get("memory_peak") for e in steps if e.get("memory_peak")]
    return max(peaks) / 1e9 if peaks else None


def ratios(bf16: dict[str, Any], fp8: dict[str, Any]) -> dict[str, Any]:
    """fp8 / bf16 for speed and each loss (a loss ratio above 1: FP8 trained worse), and issue
    43's targets at ~1 B: a speed-up >= 1.2 and the final training loss within 1%."""
    out: dict[str, Any] = {"speedup_tokens_per_s": fp8["tokens_per_s"] / bf16["tokens_per_s"]}
    for key in ("final_train_loss", "held_out_loss", "held_out_bpb"):
        out[key] = fp8[key] / bf16[key] if fp8.get(key) and bf16.get(key) else None
    out["target_speedup_1_2"] = out["speedup_tokens_per_s"] >= 1.2
    out["target_loss_within_1pct"] = abs(out["final_train_loss"] - 1) <= 0.01 if out["final_train_loss"] else None
    return out


def earlier(args: argparse.Namespace, same: dict[str, Any]) -> dict[str, Any]:
    """The --json of an earlier --arms call of the same comparison (its arms are kept), else a new one."""
    if args.json is None or not args.json.exists():
        return {**same, "arms": {}}
    old = json.loads(args.json.read_text())
    differ = [k for k in same if k in ("steps", "overrides", "config", "seed", "commit") and old.get(k) != same[k]]
    if differ:
        sys.exit(f"{args.json}: written by another comparison ({', '.join(differ)} differ); name another --json")
    return {**old, **same, "arms": old.get("arms", {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--config", type=Path, default=None, help="Model and recipe from this YAML (e.g. gpu_1b.yaml).")
    ap.add_argument("--arms", default="bf16,fp8", help="Arms run by this call; earlier arms in --json are kept.")
    ap.add_argument("--steps", type=int, default=300, help="Optimizer steps per arm (issue 43 asks >= 300).")
    ap.add_argument("--warmup", type=int, default=10, help="First steps left out of the step time (compilation).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-docs", type=int, default=64, help="Held-out documents per bucket scored (at most).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (both arms).")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--commit", default="unknown", help="The tokenmill commit that ran (recorded).")
    ap.add_argument("--smoke-cpu", action="store_true", help="Check the plumbing on a CPU (fp8 off, eager, fp32).")
    args = ap.parse_args()
    if not args.smoke_cpu and not torch.cuda.is_available():
        ap.error("no CUDA device here (--smoke-cpu checks the plumbing on a CPU)")
    if not set(args.arms.split(",")) <= {"bf16", "fp8"}:
        ap.error(f"--arms {args.arms}: the arms are bf16 and fp8")
    from tokenmill.eval.evaluate import Evaluator

    cfg = bench_config(args)
    ev = Evaluator(TokenStore(args.run / "tokens"), cfg.train.seq_len, args.eval_docs, batch_size=8)
    device = torch.cuda.get_device_name() if not args.smoke_cpu else "cpu (smoke: fp8 off in both arms)"
    same = {"commit": args.commit, "device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
            "steps": args.steps, "seed": args.seed, "overrides": args.overrides,
            "config": str(args.config) if args.config else None,
            "shape": {"d_model": cfg.model.d_model, "n_layers": cfg.model.n_layers, "micro_batch": cfg.train.micro_batch,
                      "seq_len": cfg.train.seq_len, "activation_checkpointing": cfg.train.activation_checkpointing}}
    if not args.smoke_cpu:
        import torchao

        same["torchao"] = torchao.__version__
    result = earlier(args, same)
    for name in args.arms.split(","):
        result["arms"][name] = arm(args, ev, name == "fp8" and not args.smoke_cpu)
        print(f"{name}: {json.dumps({k: v for k, v in result['arms'][name].items() if k != 'loss_curve'})}", flush=True)
        if "bf16" in result["arms"] and "fp8" in result["arms"]:
            result["fp8_over_bf16"] = ratios(result["arms"]["bf16"], result["arms"]["fp8"])
        if args.json:  # a part cut short keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1))
    if "fp8_over_bf16" in result:
        print(f"fp8 / bf16: {json.dumps(result['fp8_over_bf16'])}")


if __name__ == "__main__":
    main()
