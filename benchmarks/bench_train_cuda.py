"""Training speed on one CUDA GPU: tokenmill's trainer beside Hugging Face's LlamaForCausalLM in a
plain loop and karpathy/nanoGPT's unmodified `train.py`, at the GPT-2-small shape (d 768, 12
layers, 12 heads, seq 1024), all in bf16 autocast with SDPA (flash) attention.

Each arm runs in its own process (a fresh CUDA context and compiler state), arms interleaved per
repeat, each arm's median s/step after WARMUP steps, then the median over repeats:
- tokenmill: the real `run_train` (fp32 master weights, bf16 autocast, fused AdamW, per-step
  metrics), plain causal attention (`mixture.doc_masking=false`, the same work as the peers),
  eager and `train.compile=true`; and its default recipe with document masking (FlexAttention).
- HF: `LlamaForCausalLM` with the same shape (SwiGLU width, RoPE, RMSNorm, tied embeddings),
  `attn_implementation="sdpa"`, fused AdamW, the same batches from tokenmill's loader, all of them
  on the device before the clock starts; eager and `torch.compile(model)`.
- nanoGPT: `python train.py --device=cuda --dtype=bfloat16 --compile=True|False` (its CUDA defaults
  otherwise), GPT-2 architecture, data written as its prepare.py does (uint16 .bin + meta.pkl).
Same batch (micro_batch x seq_len tokens, no accumulation), vocabulary, AdamW (0.9, 0.95), weight
decay 0.1, clip 1.0 on every side.

FLOPs: the same formula for every side, 6 x (matmul parameters, the tied head included) + 12 x L x
d x T per token (scaling/flops.py); MFU against the bf16 matmul peak measured here in this run
(`tokenmill.scaling.calibrate`) and against the datasheet's dense bf16 989 TFLOP/s.

    python benchmarks/bench_train_cuda.py --run RUN --peer ../shared/peers/nanogpt --json out.json
RUN holds config.yaml and tokens/ (benchmarks/configs/gpu_125m.yaml builds one from the real
corpora). --budget stops starting arms after that many seconds; the JSON is rewritten after every
arm, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
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
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from bench_vs_nanogpt import ITER_LINE, PEER_FILES, write_peer_data  # noqa: E402

from tokenmill.config import RunConfig, load_config  # noqa: E402
from tokenmill.runs import RunDir, read_events  # noqa: E402

WARMUP = 5
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: --smoke-cpu only (the plumbing, not a figure)
DATASHEET_BF16 = 989e12  # H100/H200 SXM dense bf16
SAME_WORK = ["mixture.phases=[]", "train.eval_every=0", "train.ckpt_every=0", "train.log_every=0"]
ARMS: dict[str, dict[str, Any]] = {
    "tokenmill bf16 eager": {"kind": "tokenmill", "compile": False, "doc_masking": False},
    "HF Llama bf16 eager": {"kind": "hf", "compile": False},
    "nanoGPT bf16 compiled (its default)": {"kind": "nanogpt", "compile": True},
    "tokenmill bf16 compiled": {"kind": "tokenmill", "compile": True, "doc_masking": False},
    "HF Llama bf16 compiled": {"kind": "hf", "compile": True},
    "nanoGPT bf16 eager": {"kind": "nanogpt", "compile": False},
    "tokenmill default recipe: compiled + document masking (FlexAttention)":
        {"kind": "tokenmill", "compile": True, "doc_masking": True},
    # what the per-step metrics (per-group gradient norms, update ratio) cost; the peers compute neither
    "tokenmill bf16 compiled, per-step metrics off (train.metrics_every=0)":
        {"kind": "tokenmill", "compile": True, "doc_masking": False, "overrides": ["train.metrics_every=0"]},
}


def config(run: Path, steps: int, overrides: list[str]) -> RunConfig:
    warm = max(1, steps // 10)
    return load_config(run / "config.yaml", [f"train.max_steps={steps}", f"train.warmup_steps={warm}",
                                             "train.grad_accum=1", *SAME_WORK, *overrides])


def tokenmill_arm(run: Path, steps: int, overrides: list[str], arm: dict[str, Any]) -> dict[str, Any]:
    from tokenmill.train.trainer import run_train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(run, steps, [*overrides, f"root={tmp}", "name=b", "train.dtype=bfloat16",
                                  f"train.compile={str(arm['compile']).lower()}",
                                  f"mixture.doc_masking={str(arm['doc_masking']).lower()}",
                                  *arm.get("overrides", [])])
        rd = RunDir.create(cfg)
        shutil.copytree(run / "tokens", rd.path / "tokens")
        run_train(rd, resume=False, progress=False)
        ev = [e for e in read_events(rd.path / "events.jsonl") if e["kind"] == "train_step"]
        out = {"seconds": [e["seconds"] for e in ev], "losses": [e["loss"] for e in ev]}
        if DEV == "cuda":
            # The trainer logs each step's peak (it resets the counter after every step): their max is
            # the run's peak. The allocator's reserved bytes at the end are a check that no reset
            # touches: the peak can be no larger than what the allocator ever reserved.
            out["peak_memory_gb"] = max(e["memory_peak"] for e in ev) / 1e9
            out["reserved_at_end_gb"] = torch.cuda.memory_reserved() / 1e9
        return out


def hf_arm(run: Path, steps: int, overrides: list[str], arm: dict[str, Any]) -> dict[str, Any]:
    """The loop a user writes around LlamaForCausalLM: autocast, fused AdamW, clipping."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tokenmill.mixture.loader import Loader
    from tokenmill.model.transformer import resolve_ffn_hidden
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.trainer import resolve_model_config

    cfg = config(run, steps, overrides)
    store = TokenStore(run / "tokens")
    m = resolve_model_config(cfg.model, store, cfg.train.seq_len)
    torch.manual_seed(cfg.seed)
    dev = torch.device(DEV)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, intermediate_size=resolve_ffn_hidden(m),
        num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads, num_key_value_heads=m.n_kv_heads or m.n_heads,
        max_position_embeddings=m.max_seq_len, rms_norm_eps=m.norm_eps, rope_theta=m.rope_theta,
        tie_word_embeddings=m.tie_embeddings, attn_implementation="sdpa")).to(dev)
    model.train()
    tc = cfg.train
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(tc.beta1, tc.beta2), weight_decay=tc.weight_decay,
                            fused=DEV == "cuda")
    fwd = torch.compile(model) if arm["compile"] else model
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, 1, steps, cfg.seed)
    # Every batch is built and on the device before the clock starts: HF has no loader of its own,
    # so its timed step is the model, the loss and the optimizer only (tokenmill's includes its loader).
    batches = [loader.batch(step, 0).tokens.to(dev) for step in range(1, steps + 1)]
    secs, losses = [], []
    for tokens in batches:
        t0 = time.perf_counter()
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits = fwd(input_ids=tokens[:, :-1]).logits
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # syncs: the step is done
        secs.append(time.perf_counter() - t0)
    return {"seconds": secs, "losses": losses}


def nanogpt_arm(run: Path, steps: int, overrides: list[str], arm: dict[str, Any], peer: Path) -> dict[str, Any]:
    from tokenmill.tokens.store import TokenStore

    cfg = config(run, steps, overrides)
    m, tc = cfg.model, cfg.train
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for f in PEER_FILES:
            shutil.copy(peer / f, work / f)
        write_peer_data(TokenStore(run / "tokens"), work / "data" / "tokenmill")
        args = [f"--out_dir={work / 'out'}", "--dataset=tokenmill", f"--device={DEV}", "--dtype=bfloat16",
                f"--compile={arm['compile']}", f"--n_layer={m.n_layers}", f"--n_head={m.n_heads}",
                f"--n_embd={m.d_model}", f"--block_size={tc.seq_len}", f"--batch_size={tc.micro_batch}",
                "--gradient_accumulation_steps=1", f"--learning_rate={tc.lr}", f"--min_lr={tc.lr * tc.min_lr_ratio}",
                f"--warmup_iters={max(1, steps // 10)}", f"--lr_decay_iters={steps}", f"--max_iters={steps}",
                f"--weight_decay={tc.weight_decay}", f"--beta1={tc.beta1}", f"--beta2={tc.beta2}",
                f"--grad_clip={tc.grad_clip}", "--dropout=0.0", "--eval_interval=1000000000", "--eval_iters=1",
                "--log_interval=1", "--always_save_checkpoint=False"]
        proc = subprocess.run([sys.executable, "train.py", *args], cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nanoGPT train.py failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    iters = [g.groups() for g in map(ITER_LINE.match, proc.stdout.splitlines()) if g][:steps]
    return {"seconds": [float(t) / 1000 for _, _, t in iters], "losses": [float(x) for _, x, _ in iters]}


def run_arm(args: argparse.Namespace) -> None:
    arm = ARMS[args.arm]
    if DEV == "cuda":
        torch.cuda.reset_peak_memory_stats()
    if arm["kind"] == "tokenmill":
        out = tokenmill_arm(args.run, args.steps, args.overrides, arm)
    elif arm["kind"] == "hf":
        out = hf_arm(args.run, args.steps, args.overrides, arm)
    else:
        out = nanogpt_arm(args.run, args.steps, args.overrides, arm, args.peer)
    if arm["kind"] == "hf" and DEV == "cuda":  # nanoGPT's memory is in its own process
        out["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
        out["reserved_at_end_gb"] = torch.cuda.memory_reserved() / 1e9
    Path(args.result).write_text(json.dumps(out))


def flops_per_token_all(run: Path, overrides: list[str]) -> dict[str, float]:
    """One formula for every side: 6 x matmul params (tied head included) + 12 L d T."""
    from tokenmill.scaling.flops import flops_per_token
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.trainer import resolve_model_config

    cfg = config(run, 10, overrides)
    store = TokenStore(run / "tokens")
    m = resolve_model_config(cfg.model, store, cfg.train.seq_len)
    d, L, T = cfg.model.d_model, cfg.model.n_layers, cfg.train.seq_len
    gpt2 = 6 * (L * (12 * d * d + 2 * d) + d + store.vocab_size * d) + 12 * L * d * T
    ours = flops_per_token(m, T)
    return {"tokenmill": ours, "hf": ours, "nanogpt": float(gpt2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="Run directory with tokens/ and config.yaml.")
    ap.add_argument("--peer", type=Path, default=Path(__file__).resolve().parents[2] / "shared/peers/nanogpt")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget", type=float, default=400.0, help="Start no arm after this many seconds.")
    ap.add_argument("--arm-timeout", type=float, default=200.0)
    ap.add_argument("--arms", default="all", help="Comma-separated arm indexes (0-based) or 'all'.")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--commit", default="unknown", help="The tokenmill commit that ran (recorded).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override for every side.")
    ap.add_argument("--smoke-cpu", action="store_true", help="Check the plumbing on a CPU (no figures).")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        return run_arm(args)
    if DEV != "cuda" and not args.smoke_cpu:
        ap.error("no CUDA device here (--smoke-cpu checks the plumbing on a CPU)")
    names = list(ARMS) if args.arms == "all" else [list(ARMS)[int(i)] for i in args.arms.split(",")]
    start = time.monotonic()
    from tokenmill.scaling.calibrate import calibrate

    [cal] = calibrate(DEV, seconds=3.0 if DEV == "cuda" else 0.5, dtypes=[torch.bfloat16])
    if DEV == "cuda":
        torch.cuda.empty_cache()
    import transformers

    cfg = config(args.run, args.steps, args.overrides)
    fpt = flops_per_token_all(args.run, args.overrides)
    tokens = cfg.train.micro_batch * cfg.train.seq_len
    result: dict[str, Any] = {
        "command": " ".join(sys.argv), "commit": args.commit,
        "device": torch.cuda.get_device_name() if DEV == "cuda" else platform.processor(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "python": platform.python_version(), "cpu_cores": os.cpu_count(), "load_avg": os.getloadavg(),
        "peak_bf16_measured": cal["peak_flops"], "peak_bf16_datasheet": DATASHEET_BF16,
        "shape": {"d_model": cfg.model.d_model, "n_layers": cfg.model.n_layers, "n_heads": cfg.model.n_heads,
                  "seq_len": cfg.train.seq_len, "batch": cfg.train.micro_batch},
        "tokens_per_step": tokens, "flops_per_token": fpt, "steps": args.steps, "warmup": WARMUP, "arms": {}}
    print(f"{result['device']}: bf16 matmul peak {cal['peak_flops'] / 1e12:.0f} TFLOP/s measured", flush=True)
    for r in range(args.repeats):
        for name in names:
            if time.monotonic() - start > args.budget:
                print(f"budget spent: {name} repeat {r} not started", flush=True)
                continue
            arm = result["arms"].setdefault(name, {"kind": ARMS[name]["kind"], "repeats": []})
            with tempfile.NamedTemporaryFile(suffix=".json") as res:
                t0 = time.monotonic()
                cmd = [sys.executable, __file__, "--arm", name, "--result", res.name, "--run", str(args.run),
                       "--peer", str(args.peer), "--steps", str(args.steps)]
                cmd += [x for o in args.overrides for x in ("--set", o)]
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.arm_timeout)
                    ok = proc.returncode == 0
                    err = "" if ok else (proc.stdout[-1500:] + proc.stderr[-2500:])
                except subprocess.TimeoutExpired:
                    ok, err = False, f"timed out after {args.arm_timeout} s"
                wall = time.monotonic() - t0
                if not ok:
                    arm["repeats"].append({"error": err, "wall_s": wall})
                    print(f"repeat {r}: {name}: FAILED\n{err}", flush=True)
                else:
                    out = json.loads(Path(res.name).read_text())
                    s = statistics.median(out["seconds"][WARMUP:])
                    out.update(s_per_step=s, first_step_s=out["seconds"][0], wall_s=wall)
                    arm["repeats"].append(out)
                    print(f"repeat {r}: {name}: {s * 1000:.1f} ms/step (first {out['seconds'][0]:.1f} s, "
                          f"wall {wall:.0f} s)", flush=True)
            summarize(result)
            if args.json:
                args.json.write_text(json.dumps(result, indent=1))
    print_table(result)


def summarize(result: dict[str, Any]) -> None:
    """Medians, tokens/s and MFU per arm from its repeats."""
    for arm in result["arms"].values():
        good = [r for r in arm["repeats"] if "s_per_step" in r]
        if not good:
            continue
        s = statistics.median(r["s_per_step"] for r in good)
        tps = result["tokens_per_step"] / s
        flops = result["flops_per_token"][arm["kind"]] * tps
        arm.update(s_per_step=s, tokens_per_s=tps, model_tflops=flops / 1e12,
                   mfu_measured_peak=flops / result["peak_bf16_measured"], mfu_datasheet=flops / DATASHEET_BF16)


def print_table(result: dict[str, Any]) -> None:
    print("\n| arm | ms/step | tokens/s | MFU (measured peak) | MFU (989 TFLOP/s) | peak mem GB | reserved GB |")
    print("|---|---|---|---|---|---|---|")
    for name, arm in result["arms"].items():
        if "s_per_step" not in arm:
            print(f"| {name} | failed | | | | | |")
            continue
        mem = [r.get("peak_memory_gb") for r in arm["repeats"] if r.get("peak_memory_gb")]
        res = [r.get("reserved_at_end_gb") for r in arm["repeats"] if r.get("reserved_at_end_gb")]
        print(f"| {name} | {arm['s_per_step'] * 1000:.1f} | {arm['tokens_per_s']:,.0f} | {arm['mfu_measured_peak']:.1%} "
              f"| {arm['mfu_datasheet']:.1%} | {max(mem) if mem else float('nan'):.1f} "
              f"| {max(res) if res else float('nan'):.1f} |")


if __name__ == "__main__":
    main()
