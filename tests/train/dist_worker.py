"""One rank of a data-parallel training run under torchrun (test helper for the distributed tests).

    python -m torch.distributed.run --standalone --nproc-per-node 2 dist_worker.py RUN_DIR
        [--resume] [--sleep SECONDS] [--flip-param-after STEP]

Each rank writes its pid to RUN_DIR/.pid.<rank> (so a test can SIGKILL the ranks themselves:
torchrun starts them in their own sessions). --sleep slows every micro-batch down without
changing any number, so a test can kill the job mid-run. --flip-param-after N makes rank 1 alone
nudge one parameter right after its N-th optimizer step: silent corruption on one rank, which the
cross-rank check must catch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from tokenmill.config import load_config
from tokenmill.runs import RunDir
from tokenmill.train import trainer
from tokenmill.train.trainer import TrainingInterrupted, run_train


def _flip_after(n: int) -> None:
    real = torch.optim.AdamW.step
    calls = {"n": 0}

    def step(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == n:
            with torch.no_grad():
                p = self.param_groups[0]["params"][0]
                (p.to_local() if hasattr(p, "to_local") else p).view(-1)[0] += 1e-3
        return out

    torch.optim.AdamW.step = step  # type: ignore[method-assign]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--flip-param-after", type=int, default=0)
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    (args.run_dir / f".pid.{rank}").write_text(str(os.getpid()))
    run = RunDir(config=load_config(args.run_dir / "config.yaml"), path=args.run_dir)
    if args.sleep:
        real = trainer.token_nll_batch

        def slow(model, batch):  # type: ignore[no-untyped-def]
            time.sleep(args.sleep)
            return real(model, batch)

        trainer.token_nll_batch = slow
    if args.flip_param_after and rank == 1:
        _flip_after(args.flip_param_after)
    try:
        summary = run_train(run, resume=args.resume, progress=False)
    except TrainingInterrupted as exc:
        print(exc, file=sys.stderr)
        return 130
    if rank == 0:
        print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
