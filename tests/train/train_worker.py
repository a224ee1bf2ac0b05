"""Runs `run_train` on a run directory in its own process, as the CLI would (test helper).

    python train_worker.py RUN_DIR [--resume] [--sleep SECONDS]

--sleep slows every micro-batch down (without changing any number) so a test can signal the
process mid-training. A first Ctrl-C exits 130 with the trainer's message, like the CLI.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tokenmill.config import load_config
from tokenmill.runs import RunDir
from tokenmill.train import trainer
from tokenmill.train.trainer import TrainingInterrupted, run_train


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()
    run = RunDir(config=load_config(args.run_dir / "config.yaml"), path=args.run_dir)
    if args.sleep:
        real = trainer.token_nll_batch

        def slow(model, batch):
            time.sleep(args.sleep)
            return real(model, batch)

        trainer.token_nll_batch = slow
    try:
        summary = run_train(run, resume=args.resume, progress=False)
    except TrainingInterrupted as exc:
        print(exc, file=sys.stderr)
        return 130
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
