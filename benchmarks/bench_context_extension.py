"""Context extension on real data (issue 29, acceptance 2): a model trained at 256 tokens,
extended to 1024 for a small share of its tokens, once per RoPE method.

1. base: `benchmarks/configs/context_extension.yaml` through curate, tokenizer, tokenize and
   train (books, web pages, CPython; a 4-layer d 192 model at 256 tokens);
2. for each method — RoPE unchanged (the pitfall), a base-frequency increase (ABF, theta
   10k → 500k), linear position interpolation ×4, NTK-aware ×4 and YaRN ×4 — and a control that
   keeps training at 256 with RoPE unchanged:
   - before: the base weights with the method's RoPE, no training (zero-shot);
   - after: a run of its own, `train.init_from` the base checkpoint, seq_len 1024 (the same tokens
     per step), `--share` of the base run's tokens, LR re-warmed to `--lr`, one run per seed;
   - both scored at 1024 tokens (eval/long_context.py): bits per byte by position bucket on
     held-out documents of at least 1024 tokens (0-256 is the trained range, 256-1024 beyond),
     and passkey retrieval accuracy by distance.

    python benchmarks/bench_context_extension.py --work runs/ctx --json out.json [--seeds 0 1]
    python benchmarks/bench_context_extension.py --work W --json out.json --tokens-from runs/ctx/base \
        --set model.d_model=384 model.n_layers=6 model.n_heads=6 train.max_tokens=12000000   # a GPU

Everything is a normal run directory under --work (report, events); a rerun reuses the base
and every finished extension run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from tokenmill.config import RunConfig, load_config
from tokenmill.eval.config import LongContextConfig
from tokenmill.eval.long_context import evaluate_long_context
from tokenmill.model.transformer import Transformer
from tokenmill.pipeline import run_pipeline
from tokenmill.runs import RunDir
from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokens.store import TokenStore
from tokenmill.train.checkpoint import latest_checkpoint
from tokenmill.train.device import resolve_device
from tokenmill.train.restore import load_model
from tokenmill.train.trainer import run_train

LONG = 1024
METHODS: dict[str, dict[str, Any]] = {
    "RoPE unchanged": {},
    "base frequency 10k → 500k (ABF)": {"rope_theta": 500_000.0},
    "linear interpolation ×4": {"rope_scaling": "linear", "rope_scaling_factor": 4.0},
    "NTK-aware ×4": {"rope_scaling": "ntk", "rope_scaling_factor": 4.0},
    "YaRN ×4": {"rope_scaling": "yarn", "rope_scaling_factor": 4.0},
}
CONTROL = "control: continued at 256, RoPE unchanged"


def base_run(config: Path, work: Path, overrides: list[str], tokens_from: Path | None) -> RunDir:
    """The base model at 256 tokens; with tokens_from, another run's token store and tokenizer are
    used as they are (a machine without the corpora: only the train stage runs)."""
    cfg = load_config(config, overrides)
    run = RunDir.create(cfg, work / "base")
    if tokens_from is None:
        run_pipeline(run, stages=("curate", "tokenizer", "tokenize", "train"))
        return run
    for sub in ("tokens", "tokenizer"):
        if not run.sub(sub).exists():
            run.sub(sub).symlink_to((tokens_from / sub).resolve())
    if not run.finished("train"):
        run_train(run, resume=latest_checkpoint(run.sub("checkpoints")) is not None, progress=False)
        run.mark_done("train")
    return run


def extension_run(base: RunDir, work: Path, name: str, rope: dict[str, Any], seq_len: int, seed: int,
                  share: float, lr: float) -> RunDir:
    """A run that continues the base model at seq_len with `rope`, for share × the base's tokens."""
    data = base.config.model_dump(mode="json")
    btc = base.config.train
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:40] + f"-s{seed}"
    data["name"] = slug
    data["model"].update(max_seq_len=max(seq_len, base.config.model.max_seq_len), **rope)
    steps = max(1, round(share * (btc.max_tokens or 0) / btc.global_batch_tokens))
    data["train"].update(seq_len=seq_len, micro_batch=btc.micro_batch * btc.seq_len // seq_len, max_tokens=None,
                         max_steps=steps, warmup_steps=max(1, steps // 10), lr=lr, seed=seed,
                         init_from=str(base.path / "checkpoints"), ckpt_every=steps)
    run = RunDir.create(RunConfig.model_validate(data), work / slug)
    if not (run.path / "tokens").exists():
        (run.path / "tokens").symlink_to((base.path / "tokens").resolve())
    if not run.finished("train"):  # a rerun skips a finished extension and resumes a cut one
        run_train(run, resume=latest_checkpoint(run.path / "checkpoints") is not None, progress=False)
        run.mark_done("train")
    return run


def score(model: torch.nn.Module, base: RunDir, lc: LongContextConfig, device: torch.device) -> dict[str, Any]:
    store = TokenStore(base.path / "tokens")
    tok = load_tokenizer(base.path / "tokenizer" / "tokenizer.json")
    model = model.to(device).eval()
    return evaluate_long_context(model, store, tok, lc, base.config.train.seq_len, 8, device,
                                 base.config.train.dtype, seed=base.config.seed)


def zero_shot(base: RunDir, rope: dict[str, Any], lc: LongContextConfig, device: torch.device) -> dict[str, Any]:
    """The base weights with the method's RoPE and 1024-token tables, no training."""
    trained, _ = load_model(base.path / "checkpoints", "cpu")
    model = Transformer(trained.config.model_copy(update={"max_seq_len": LONG, **rope}))
    model.load_state_dict(trained.state_dict())
    return score(model, base, lc, device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=Path(__file__).parent / "configs" / "context_extension.yaml")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--set", nargs="*", default=[], help="Overrides of the base config (key=value).")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--share", type=float, default=0.1, help="Extension tokens as a share of the base run's.")
    ap.add_argument("--lr", type=float, default=1e-3, help="Peak LR of the extension (re-warmed, cosine).")
    ap.add_argument("--docs", type=int, default=48, help="Held-out documents of >= 1024 tokens scored by position.")
    ap.add_argument("--passkeys", type=int, default=40)
    ap.add_argument("--tokens-from", type=Path, default=None,
                    help="A run whose tokens/ and tokenizer/ to train on (skips curate and tokenize).")
    ap.add_argument("--budget", type=float, default=None, help="Start no extension run after this many seconds.")
    ap.add_argument("--commit", default=None, help="The commit measured (a machine without the git directory).")
    args = ap.parse_args()
    t0 = time.monotonic()
    args.work.mkdir(parents=True, exist_ok=True)
    base = base_run(args.config, args.work, args.set, args.tokens_from)
    device = resolve_device(base.config.train.device)
    lc = LongContextConfig(enabled=True, seq_len=LONG, position_buckets=4, max_docs=args.docs,
                           passkey_trials=args.passkeys)
    result: dict[str, Any] = {
        "command": " ".join(sys.argv), "commit": args.commit, "load_avg": list(os.getloadavg()),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
        "cpu_cores": os.cpu_count(), "torch": torch.__version__,
        "python": platform.python_version(), "threads": torch.get_num_threads(),
        "base": {"config": base.config.model_dump(mode="json"), "tokens": base.config.train.max_tokens},
        "share": args.share, "lr": args.lr, "seeds": args.seeds, "long": LONG, "arms": {}}
    arms = {**METHODS, CONTROL: {}}
    for name, rope in arms.items():
        seq = base.config.train.seq_len if name == CONTROL else LONG
        arm: dict[str, Any] = {"rope": rope, "seq_len": seq, "before": zero_shot(base, rope, lc, device), "after": []}
        for seed in args.seeds:
            if args.budget is not None and time.monotonic() - t0 > args.budget:
                print(f"budget spent: {name} seed {seed} not started", flush=True)
                continue
            t = time.monotonic()
            run = extension_run(base, args.work, name, rope, seq, seed, args.share, args.lr)
            model, step = load_model(run.path / "checkpoints", "cpu")
            if name == CONTROL:  # scored at 1024 like the others: its tables extended, RoPE unchanged
                grown = Transformer(model.config.model_copy(update={"max_seq_len": LONG}))
                grown.load_state_dict(model.state_dict())
                model = grown
            arm["after"].append({"seed": seed, "run": str(run.path), "steps": step,
                                 "seconds": round(time.monotonic() - t, 1), **score(model, base, lc, device)})
            print(f"{name} seed {seed}: " + ", ".join(
                f"{b['from']}-{b['to']} {b['bpb']:.3f}" for b in arm["after"][-1]["positions"]["buckets"])
                + f"; passkey {arm['after'][-1]['passkey']['accuracy']:.0%}", flush=True)
        result["arms"][name] = arm
        result["seconds"] = round(time.monotonic() - t0, 1)
        args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
