"""Continued pretraining on real data (issue 29, acceptance 1): a base model trained on books +
web, continued on code with 0%, 10% and 25% replay of the original data at equal new (code)
tokens, against a model trained on the same code tokens from scratch, over seeds.

1. base: `benchmarks/configs/continued_pretraining.yaml` through curate, tokenizer (trained on
   books + web only), tokenize and train;
2. data: the same sources plus CPython's standard library, `train.init_from` the base, so the
   tokenizer stage takes the base's tokenizer (tokenmill's inheritance) and the token store holds
   books, web and code under it; the held-out split of books and web is the base run's;
3. arms, each a run of its own over that store, seed by seed:
   - continued, replay 0 / 10 / 25%: `train.init_from` the base, `mixture.weights {code: 1}` and
     `mixture.replay {buckets: [books, web], share}`; `--new-tokens` of code, so the run trains
     new / (1 − share) tokens in all; LR re-warmed to `--lr`;
   - scratch: a random init on `--new-tokens` of code, the base's recipe (LR, warmup);
   every run evaluates its held-out slices at the end, and a continued run also before its first
   step (the inherited model): code bpb gained and books / web bpb lost.

    python benchmarks/bench_continued_pretraining.py --work runs/cpt --json out.json [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from tokenmill.config import RunConfig, load_config
from tokenmill.eval.evaluate import in_training_evaluator
from tokenmill.pipeline import run_pipeline
from tokenmill.runs import RunDir
from tokenmill.train.checkpoint import latest_checkpoint
from tokenmill.train.trainer import run_train

CODE = {"kind": "files", "path": "../real_corpora/code/python/cpython3.11-stdlib", "bucket": "code",
        "max_bytes": 4_000_000}
ORIGINAL = ["books", "web"]
ARMS: dict[str, float | None] = {"continued, no replay": 0.0, "continued, 10% replay": 0.1,
                                 "continued, 25% replay": 0.25, "scratch on code": None}


def base_run(config: Path, work: Path, overrides: list[str]) -> RunDir:
    run = RunDir.create(load_config(config, overrides), work / "base")
    run_pipeline(run, stages=("curate", "tokenizer", "tokenize", "train"))
    return run


def data_run(base: RunDir, work: Path) -> RunDir:
    """Books + web + code tokenized with the base model's tokenizer (inherited through init_from)."""
    data = base.config.model_dump(mode="json")
    data["name"] = "cpt-data"
    data["curate"]["sources"].append(CODE)
    data["curate"]["quality"]["kinds"]["code"] = "code"
    data["train"]["init_from"] = str(base.path / "checkpoints")
    run = RunDir.create(RunConfig.model_validate(data), work / "data")
    run_pipeline(run, stages=("curate", "tokenizer", "tokenize"))
    return run


def arm_run(base: RunDir, data_dir: RunDir, work: Path, name: str, share: float | None, seed: int,
            new_tokens: int, lr: float) -> RunDir:
    data = data_dir.config.model_dump(mode="json")
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") + f"-s{seed}"
    data["name"] = slug
    data["mixture"]["weights"] = {"code": 1.0}
    total = new_tokens if not share else round(new_tokens / (1 - share))
    data["train"].update(max_tokens=total, seed=seed, ckpt_every=10_000)
    if share is None:  # from scratch: the base recipe on the new data
        data["train"]["init_from"] = None
    else:
        data["train"].update(init_from=str(base.path / "checkpoints"), lr=lr)
        data["mixture"]["replay"] = {"buckets": ORIGINAL, "share": share} if share else None
    run = RunDir.create(RunConfig.model_validate(data), work / slug)
    for sub in ("tokens", "tokenizer"):
        if not run.sub(sub).exists():
            run.sub(sub).symlink_to(data_dir.sub(sub).resolve())
    if not run.finished("train"):
        run_train(run, resume=latest_checkpoint(run.sub("checkpoints")) is not None,
                  on_eval=in_training_evaluator(run), progress=False)
        run.mark_done("train")
    return run


def bpb_at(run: RunDir, step: int | None) -> dict[str, float] | None:
    files = sorted(run.sub("eval").glob("*.json"), key=lambda p: int(p.stem))
    pick = [p for p in files if step is None or int(p.stem) == step]
    if not pick:
        return None
    return {b: m["bpb"] for b, m in json.loads(pick[-1].read_text())["buckets"].items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=Path(__file__).parent / "configs" / "continued_pretraining.yaml")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--set", nargs="*", default=[], help="Overrides of the base config (key=value).")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--new-tokens", type=int, default=750_000, help="Code tokens every arm trains on.")
    ap.add_argument("--lr", type=float, default=1e-3, help="Peak LR of the continued runs (re-warmed, cosine).")
    args = ap.parse_args()
    t0 = time.monotonic()
    args.work.mkdir(parents=True, exist_ok=True)
    base = base_run(args.config, args.work, args.set)
    data = data_run(base, args.work)
    result: dict[str, Any] = {
        "command": " ".join(sys.argv), "torch": torch.__version__, "python": platform.python_version(),
        "threads": torch.get_num_threads(), "base_config": base.config.model_dump(mode="json"),
        "base_bpb": bpb_at(base, None), "new_tokens": args.new_tokens, "lr": args.lr, "seeds": args.seeds,
        "tokenizer_inherited": json.loads(data.sub("tokenizer", "audit.json").read_text()).get("inherited_from"),
        "arms": {name: {"replay": share, "runs": []} for name, share in ARMS.items()}}
    for seed in args.seeds:  # seed by seed, so a cut benchmark has whole seeds
        for name, share in ARMS.items():
            t = time.monotonic()
            run = arm_run(base, data, args.work, name, share, seed, args.new_tokens, args.lr)
            record = {"seed": seed, "run": str(run.path), "tokens": run.config.train.max_tokens,
                      "seconds": round(time.monotonic() - t, 1), "before": bpb_at(run, 0), "after": bpb_at(run, None)}
            result["arms"][name]["runs"].append(record)
            print(f"seed {seed} {name}: before {record['before']} after {record['after']}", flush=True)
            result["seconds"] = round(time.monotonic() - t0, 1)
            args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
