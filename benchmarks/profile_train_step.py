"""Where a training step's time goes: torch.profiler over real steps of the trainer's own code,
grouped by op class (matmul, attention, norm, RoPE, activation, loss, optimizer, elementwise, ...).

The step is `compute_update` + `optimizer.step()` exactly as `run_train` runs it (same model,
loader, autocast, fused loss, clipping, AdamW), on the batches of the run's token store.
Self CPU time of every aten op is attributed to a class by the op's name (backward ops carry the
forward op's name), so the table adds up to the aten self time; the explicit attention's batched
matmuls count as matmul, its softmax as attention.

    .venv/bin/python benchmarks/profile_train_step.py --run runs/demo --threads 2 --dtype bfloat16
    .venv/bin/python benchmarks/profile_train_step.py --run runs/demo --set model.d_model=512 --set model.n_layers=8
    # A/B of the attention kernels (explicit vs torch's SDPA) in the same step, interleaved:
    .venv/bin/python benchmarks/profile_train_step.py --run runs/demo --ab-attention --set train.seq_len=128 \
        --set train.micro_batch=32
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from tokenmill.config import load_config
from tokenmill.mixture.loader import Loader
from tokenmill.model.transformer import Transformer, attention_kernel
from tokenmill.scaling.flops import flops_per_token
from tokenmill.tokens.store import TokenStore
from tokenmill.train.optimizer import build_optimizer
from tokenmill.train.trainer import compute_update, resolve_model_config

# aten op name fragment -> class, first match wins (backward ops carry the forward op's name).
CLASSES: list[tuple[str, tuple[str, ...]]] = [
    ("attention (SDPA; softmax)", ("scaled_dot_product", "flash_attention", "efficient_attention", "sdpa",
                                   "softmax")),
    ("matmul", ("mm", "matmul", "linear", "addmm", "bmm", "baddbmm")),
    ("optimizer", ("_fused_adam", "_foreach", "adam", "lerp", "addcdiv", "addcmul")),
    ("norm", ("rms_norm", "layer_norm", "rsqrt", "pow", "mean")),
    ("loss (softmax/logsumexp)", ("logsumexp", "log_softmax", "exp", "gather", "scatter", "nll")),
    ("activation", ("silu", "gelu", "sigmoid")),
    ("dtype casts / copies", ("to_copy", "copy_", "_to_copy", "clone", "contiguous")),
    ("cat / split / index", ("cat", "split", "chunk", "index", "narrow", "slice", "select", "stack", "unbind")),
    ("reduction (clip, norms)", ("norm", "sum", "amax", "max", "min")),
    ("elementwise", ("add", "mul", "sub", "div", "neg", "where", "fill", "zero", "eq", "ne", "masked")),
    ("allocation / views", ("empty", "view", "reshape", "transpose", "permute", "expand", "t", "as_strided",
                            "unsqueeze", "squeeze", "detach", "resolve", "alias")),
]


def op_class(name: str) -> str:
    short = name.removeprefix("aten::").lower().lstrip("_")
    for label, frags in CLASSES:
        if any(f == short or f in short.split("_") or short.startswith(f) for f in frags):
            return label
    return "other"


def build(run: Path, threads: int, dtype: str, overrides: list[str]):
    cfg = load_config(run / "config.yaml", ["mixture.phases=[]", f"train.dtype={dtype}", f"train.threads={threads}",
                                             "train.warmup_steps=5", *overrides])
    store = TokenStore(run / "tokens")
    tc = cfg.train
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.seed))
    model.train()
    opt = build_optimizer(model, tc, torch.device("cpu"))
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, cfg.seed)
    return cfg, mcfg, model, opt, loader


def step(model, opt, loader, s: int, tc, dtype: torch.dtype) -> None:
    compute_update(model, opt, loader, s, tc, torch.device("cpu"), dtype, None, {})
    opt.step()
    opt.zero_grad(set_to_none=True)


def ab_attention(args: argparse.Namespace) -> None:
    """Median s/step of fresh models forced to each attention kernel, A/B interleaved per repeat."""
    dt = getattr(torch, args.dtype)
    times: dict[str, list[float]] = {"sdpa": [], "explicit": []}
    for r in range(args.repeats):
        for kernel, runs in times.items():
            cfg, _, model, opt, loader = build(args.run, args.threads, args.dtype, args.overrides)
            model.attn_kernel = kernel
            secs = []
            for s in range(1, 4 + max(args.steps, 5)):
                t0 = time.perf_counter()
                step(model, opt, loader, s, cfg.train, dt)
                secs.append(time.perf_counter() - t0)
            runs.append(statistics.median(secs[3:]))
            print(f"repeat {r}: {kernel}: {runs[-1]:.4f} s/step", flush=True)
    sdpa, explicit = (statistics.median(v) for v in times.values())
    print(f"T={cfg.train.seq_len} B={cfg.train.micro_batch} {args.dtype}: SDPA {sdpa:.3f} s/step, explicit "
          f"{explicit:.3f} s/step ({explicit / sdpa - 1:+.1%}); 'auto' picks "
          f"{attention_kernel('cpu', dt, cfg.train.seq_len)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--steps", type=int, default=5, help="Profiled steps (after 3 warm-up steps).")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--ab-attention", action="store_true",
                    help="Instead of profiling: step time with each attention kernel, interleaved.")
    ap.add_argument("--repeats", type=int, default=3, help="--ab-attention: interleaved repeats.")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.ab_attention:
        ab_attention(args)
        return
    cfg, mcfg, model, opt, loader = build(args.run, args.threads, args.dtype, args.overrides)
    tc, dt = cfg.train, getattr(torch, args.dtype)
    for s in range(1, 4):
        step(model, opt, loader, s, tc, dt)
    walls = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for s in range(4, 4 + args.steps):
            t0 = time.perf_counter()
            step(model, opt, loader, s, tc, dt)
            walls.append(time.perf_counter() - t0)
    by_class: dict[str, float] = collections.defaultdict(float)
    by_op: dict[str, float] = collections.defaultdict(float)
    for evt in prof.key_averages():
        if not evt.key.startswith("aten::"):
            continue
        by_class[op_class(evt.key)] += evt.self_cpu_time_total / 1e6
        by_op[evt.key] += evt.self_cpu_time_total / 1e6
    total = sum(by_class.values())
    wall = sum(walls)
    tokens = tc.micro_batch * tc.seq_len * tc.grad_accum
    fpt = flops_per_token(mcfg, tc.seq_len)
    print(f"model d={mcfg.d_model} L={mcfg.n_layers} H={mcfg.n_heads} T={tc.seq_len} B={tc.micro_batch} "
          f"{args.dtype}, {args.threads} threads: median {statistics.median(walls):.3f} s/step (profiled), "
          f"{fpt * tokens / statistics.median(walls) / 1e9:.1f} GFLOP/s model FLOPs")
    print(f"\n| op class | s per step | share of aten self time |\n|---|---|---|")
    for label, secs in sorted(by_class.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {secs / args.steps:.4f} | {secs / total:.1%} |")
    print(f"| (aten self total / profiled wall) | {total / args.steps:.4f} / {wall / args.steps:.4f} | |")
    print("\ntop ops:")
    for name, secs in sorted(by_op.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {name:45s} {secs / args.steps * 1000:8.2f} ms/step  [{op_class(name)}]")


if __name__ == "__main__":
    main()
