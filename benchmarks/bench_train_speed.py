"""Training speed on this machine: tokenmill's trainer in fp32 eager, bf16 autocast (the default on
CPUs with AVX512-BF16/AMX and on CUDA) and with torch.compile, beside a plain PyTorch loop over
Hugging Face `LlamaForCausalLM` with the same config in fp32 and bf16 autocast; tokens/s, ratios,
MFU against the calibrated matmul peak of the same dtype, and fp32 vs bf16 loss curves.

Same model shape (the demo's: d=256, 4 layers, 4 heads, SwiGLU 704, vocab from the token store,
tied embeddings), same thread count, same batches (tokenmill's loader over the demo's token
store, one phase at train.seq_len, plain causal attention on both sides: HF's Llama has no
document masking), same AdamW and clipping. tokenmill's side is the real `run_train`; HF's is
the loop a user would write (explicit cross-entropy on the same targets). Runs are interleaved
A/B/C/D/E per repeat; each run's median s/step after WARMUP steps, then the median over repeats.

Loss curves: fp32 and bf16 tokenmill runs see the same init and batches; their per-step loss
difference is compared with the seed-to-seed difference of two fp32 runs (another init and
batch order), the noise a curve comparison has to beat.

MFU peak: the `tokenmill calibrate` entry for this CPU, thread count and dtype when there is one
(run `tokenmill calibrate --threads T` first), else a calibration run here (not written).

    .venv/bin/python benchmarks/bench_train_speed.py --run runs/demo --steps 30 --repeats 3 --threads 2
Needs the bench extra (transformers) and a tokenized run (`make demo`, or `tokenmill run
src/tokenmill/configs/demo.yaml`). `--set model.n_layers=1 ...` overrides both sides (smoke runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tokenmill.config import RunConfig, load_config
from tokenmill.model.transformer import resolve_ffn_hidden
from tokenmill.runs import RunDir, read_events
from tokenmill.scaling.flops import flops_per_token
from tokenmill.train.trainer import resolve_model_config, run_train

WARMUP = 5
DEFAULT = "tokenmill bf16 autocast (default)"
SAME_WORK = ["mixture.phases=[]", "mixture.doc_masking=false", "train.eval_every=0", "train.ckpt_every=0",
             "train.log_every=0"]


def config(src: Path, steps: int, threads: int, overrides: list[str]) -> RunConfig:
    return load_config(src / "config.yaml", [f"train.max_steps={steps}", f"train.threads={threads}",
                                             "train.warmup_steps=5", *SAME_WORK, *overrides])


def tokenmill_run(src: Path, steps: int, threads: int, overrides: list[str], dtype: str, compile_: bool = False,
                  seed: int | None = None) -> dict[str, Any]:
    """The real trainer; per-step seconds and losses from its train_step events."""
    with tempfile.TemporaryDirectory() as tmp:
        extra = [f"root={tmp}", "name=b", f"train.dtype={dtype}", f"train.compile={str(compile_).lower()}"]
        if seed is not None:
            extra.append(f"seed={seed}")
        cfg = config(src, steps, threads, [*overrides, *extra])
        run = RunDir.create(cfg)
        shutil.copytree(src / "tokens", run.path / "tokens")
        run_train(run, resume=False, progress=False)
        ev = [e for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"]
        return {"s_per_step": statistics.median(e["seconds"] for e in ev[WARMUP:]), "losses": [e["loss"] for e in ev]}


def hf_run(src: Path, steps: int, threads: int, overrides: list[str], dtype: str) -> dict[str, Any]:
    """A plain loop over HF LlamaForCausalLM with the same shape, batches, AdamW and clipping."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tokenmill.mixture.loader import Loader
    from tokenmill.tokens.store import TokenStore

    cfg = config(src, steps, threads, overrides)
    store = TokenStore(src / "tokens")
    m = resolve_model_config(cfg.model, store, cfg.train.seq_len)
    torch.manual_seed(cfg.seed)
    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=resolve_ffn_hidden(m),
        num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads, num_key_value_heads=m.n_kv_heads or m.n_heads,
        max_position_embeddings=m.max_seq_len, rms_norm_eps=m.norm_eps, rope_theta=m.rope_theta,
        tie_word_embeddings=m.tie_embeddings, attn_implementation="sdpa"))
    hf.train()
    tc = cfg.train
    opt = torch.optim.AdamW(hf.parameters(), lr=tc.lr, betas=(tc.beta1, tc.beta2), weight_decay=tc.weight_decay)
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, steps, cfg.seed)
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    secs, losses = [], []
    try:
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            total = 0.0
            for micro in range(tc.grad_accum):
                tokens = loader.batch(step, micro).tokens
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
                    logits = hf(input_ids=tokens[:, :-1]).logits
                    loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()) / tc.grad_accum
                loss.backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_(hf.parameters(), tc.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            secs.append(time.perf_counter() - t0)
            losses.append(total)
    finally:
        torch.set_num_threads(prev)
    return {"s_per_step": statistics.median(secs[WARMUP:]), "losses": losses}


def calibrated_peak(dtype: torch.dtype, threads: int) -> tuple[float, str]:
    from tokenmill.scaling.calibrate import calibrate, find_calibration

    entry = find_calibration("cpu", dtype, threads)
    if entry is not None:
        return float(entry["peak_flops"]), f"calibration of {entry['date']}"
    [fresh] = calibrate("cpu", threads=threads, seconds=3.0, dtypes=[dtype])
    return float(fresh["peak_flops"]), "calibrated now"


def mean_abs_diff(a: list[float], b: list[float]) -> float:
    return statistics.fmean(abs(x - y) for x, y in zip(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"), help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--no-compile", action="store_true", help="Leave out the torch.compile run (slow to compile).")
    ap.add_argument("--fp32-only", action="store_true",
                    help="Only the fp32 arms (tokenmill eager, HF), no second-seed run: the quick probe of "
                         "`make bench-check` (bf16 without native support is emulated and slow).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override for both sides.")
    args = ap.parse_args()
    if args.steps <= WARMUP:
        ap.error(f"--steps must exceed the {WARMUP} warm-up steps")
    import transformers

    from tokenmill.train.device import cpu_has_native_bf16

    default = DEFAULT if cpu_has_native_bf16() else "tokenmill bf16 autocast"
    variants: dict[str, Any] = {
        "tokenmill fp32 eager": lambda: tokenmill_run(args.run, args.steps, args.threads, args.overrides, "float32"),
        default: lambda: tokenmill_run(args.run, args.steps, args.threads, args.overrides, "bfloat16"),
        "HF Llama fp32": lambda: hf_run(args.run, args.steps, args.threads, args.overrides, "float32"),
        "HF Llama bf16 autocast": lambda: hf_run(args.run, args.steps, args.threads, args.overrides, "bfloat16"),
    }
    if args.fp32_only:
        variants = {k: v for k, v in variants.items() if "fp32" in k}
    if not args.no_compile and not args.fp32_only:
        variants["tokenmill bf16 + torch.compile"] = lambda: tokenmill_run(
            args.run, args.steps, args.threads, args.overrides, "bfloat16", compile_=True)
    times: dict[str, list[float]] = {k: [] for k in variants}
    curves: dict[str, list[float]] = {}
    for r in range(args.repeats):  # interleaved
        for name, fn in variants.items():
            out = fn()
            times[name].append(out["s_per_step"])
            curves.setdefault(name, out["losses"])
            print(f"repeat {r}: {name}: {out['s_per_step']:.4f} s/step", flush=True)
    other_seed = None if args.fp32_only else tokenmill_run(args.run, args.steps, args.threads, args.overrides, "float32", seed=load_config(
        args.run / "config.yaml").seed + 1)["losses"]

    cfg = config(args.run, args.steps, args.threads, args.overrides)
    from tokenmill.tokens.store import TokenStore

    mcfg = resolve_model_config(cfg.model, TokenStore(args.run / "tokens"), cfg.train.seq_len)
    tokens = cfg.train.micro_batch * cfg.train.seq_len * cfg.train.grad_accum
    fpt = flops_per_token(mcfg, cfg.train.seq_len)
    peaks = {"float32": calibrated_peak(torch.float32, args.threads)}
    if not args.fp32_only:
        peaks["bfloat16"] = calibrated_peak(torch.bfloat16, args.threads)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["tokenmill fp32 eager"]
    rows = []
    print("\n| run | s/step | tokens/s | × tokenmill fp32 eager | MFU (peak of its dtype) |")
    print("|---|---|---|---|---|")
    for name, s in med.items():
        dt = "float32" if "fp32" in name else "bfloat16"
        tps = tokens / s
        mfu = fpt * tps / peaks[dt][0]
        rows.append({"run": name, "s_per_step": s, "tokens_per_s": tps, "speedup_vs_fp32_eager": base / s, "mfu": mfu})
        print(f"| {name} | {s:.3f} | {tps:,.0f} | {base / s:.2f}× | {mfu:.1%} |")
    ratio_fp32 = med["HF Llama fp32"] / med["tokenmill fp32 eager"]
    ratio_bf16 = d_bf16 = d_seed = None
    print(f"\ntokenmill / HF speed at equal precision: fp32 {ratio_fp32:.2f}×")
    if not args.fp32_only:
        ratio_bf16 = med["HF Llama bf16 autocast"] / med[default]
        d_bf16 = mean_abs_diff(curves["tokenmill fp32 eager"], curves[default])
        d_seed = mean_abs_diff(curves["tokenmill fp32 eager"], other_seed)
        print(f"bf16 {ratio_bf16:.2f}×; loss curves over {args.steps} steps: mean |fp32 - bf16| = {d_bf16:.4f} nats; "
              f"mean |fp32 seed s - fp32 seed s+1| = {d_seed:.4f} nats -> bf16 "
              f"{'within' if d_bf16 <= d_seed else 'OUTSIDE'} seed noise")
    result = {
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(), "cores": len(os.sched_getaffinity(0)),
        "threads": args.threads, "native_bf16": cpu_has_native_bf16(), "steps": args.steps, "repeats": args.repeats,
        "overrides": args.overrides, "tokens_per_step": tokens, "flops_per_token": fpt,
        "peak_flops": {k: {"flops": v[0], "source": v[1]} for k, v in peaks.items()}, "rows": rows,
        "tokenmill_over_hf_fp32": ratio_fp32, "tokenmill_over_hf_bf16": ratio_bf16,
        "default_over_fp32_eager": base / med[default] if default in med else None,
        "loss_mean_abs_diff_fp32_bf16": d_bf16, "loss_mean_abs_diff_seed": d_seed,
        "losses": {"fp32": curves["tokenmill fp32 eager"], "bf16": curves.get(default),
                   "fp32_other_seed": other_seed},
        "s_per_step_all_repeats": times,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
