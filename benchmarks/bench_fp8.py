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
from bench_vs_nanogpt import overall_bpb, tokenmill_config  # noqa: E402

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
        run = RunDir.create(tokenmill_config(args.run, args.overrides, sets))
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
                "loss_curve": [[e["step"], e["loss"]] for e in steps[:: max(1, len(steps) // 50)]], "wall_s": time.time() - t}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ratios(bf16: dict[str, Any], fp8: dict[str, Any]) -> dict[str, float | None]:
    """fp8 / bf16 for speed and each loss (a loss ratio above 1: FP8 trained worse)."""
    out: dict[str, float | None] = {"speedup_tokens_per_s": fp8["tokens_per_s"] / bf16["tokens_per_s"]}
    for key in ("final_train_loss", "held_out_loss", "held_out_bpb"):
        out[key] = fp8[key] / bf16[key] if fp8.get(key) and bf16.get(key) else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--steps", type=int, default=300, help="Optimizer steps per arm (issue 43 asks >= 300).")
    ap.add_argument("--warmup", type=int, default=10, help="First steps left out of the step time (compilation).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-docs", type=int, default=64, help="Held-out documents per bucket scored (at most).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (both arms).")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--commit", default="unknown", help="The tokenmill commit that ran (recorded).")
    ap.add_argument("--smoke-cpu", action="store_true", help="Check the plumbing on a CPU (fp8 off, eager, fp32).")
    args = ap.parse_args()
    from tokenmill.eval.evaluate import Evaluator

    cfg = tokenmill_config(args.run, args.overrides)
    ev = Evaluator(TokenStore(args.run / "tokens"), cfg.train.seq_len, args.eval_docs, batch_size=8)
    device = torch.cuda.get_device_name() if not args.smoke_cpu else "cpu (smoke: fp8 off in both arms)"
    result: dict[str, Any] = {"commit": args.commit, "device": device, "torch": torch.__version__, "steps": args.steps,
                              "overrides": args.overrides, "arms": {}}
    if not args.smoke_cpu:
        import torchao

        result["torchao"] = torchao.__version__
    for name, fp8 in (("bf16", False), ("fp8", not args.smoke_cpu)):
        result["arms"][name] = arm(args, ev, fp8)
        print(f"{name}: {json.dumps({k: v for k, v in result['arms'][name].items() if k != 'loss_curve'})}", flush=True)
        if args.json:  # a part cut short keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1))
    result["fp8_over_bf16"] = ratios(result["arms"]["bf16"], result["arms"]["fp8"])
    print(f"fp8 / bf16: {json.dumps(result['fp8_over_bf16'])}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
