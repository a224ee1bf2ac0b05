"""Loader throughput vs the trainer's token consumption (issue 4: at least 50×).

Reads the token store of a run (the demo's by default) with the demo's layout (seq 256, micro 16)
and measures, for each packing mode, the tokens/s `Loader.batch` delivers:
  sync      batch(step, 0) computed on demand in the caller's thread, steps in order;
  prefetch  the same steps taken from the background thread (its queue kept full);
  hidden    a consumer that "trains" for --compute-ms per micro-batch (sleeps, releasing the GIL
            like torch kernels do): the mean time batch() still blocks it, i.e. the loading cost
            the trainer actually sees with prefetch on.
The trainer's consumption is the median tokens_per_s of the run's train_step events (the demo
model d=256 L=4 on this CPU: about 5,000 tokens/s), or --trainer-tps. Medians of --repeats.

    .venv/bin/python benchmarks/bench_loader.py --run runs/demo --steps 300 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from tokenmill.config import MixtureConfig
from tokenmill.mixture.loader import Loader
from tokenmill.tokens.store import TokenStore


def trainer_tokens_per_s(run: Path) -> float | None:
    events = run / "events.jsonl"
    if not events.exists():
        return None
    tps = [e["tokens_per_s"] for e in map(json.loads, events.read_text().splitlines())
           if e.get("kind") == "train_step" and "tokens_per_s" in e]
    return statistics.median(tps) if tps else None


def make_loader(store: TokenStore, mixture: MixtureConfig, steps: int) -> Loader:
    return Loader(store, mixture, seq_len=256, micro_batch=16, grad_accum=1, max_steps=steps, seed=1234)


def tokens_per_s(loader: Loader, steps: int, prefetch: bool) -> float:
    if prefetch:
        loader.start_prefetch(1)
        time.sleep(0.2)  # let the queue fill, as it does during the trainer's first step
    t0 = time.perf_counter()
    n = sum(loader.batch(step, 0).tokens[:, 1:].numel() for step in range(1, steps + 1))
    dt = time.perf_counter() - t0
    loader.close()
    return n / dt


def blocked_ms(loader: Loader, steps: int, compute_ms: float) -> float:
    loader.start_prefetch(1)
    waits = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        loader.batch(step, 0)
        waits.append(time.perf_counter() - t0)
        time.sleep(compute_ms / 1000)
    loader.close()
    return 1000 * statistics.mean(waits[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--trainer-tps", type=float, default=None, help="default: the run's train_step median")
    args = ap.parse_args()
    store = TokenStore(args.run / "tokens")
    trainer = args.trainer_tps or trainer_tokens_per_s(args.run) or 5000.0
    modes = {"packed+doc_masking": MixtureConfig(), "packed": MixtureConfig(doc_masking=False),
             "padded": MixtureConfig(packing="padded")}
    result: dict = {"trainer_tokens_per_s": trainer, "steps": args.steps, "tokens_per_step": 16 * 256, "modes": {}}
    for name, mixture in modes.items():
        sync, pre = [], []
        for _ in range(args.repeats):  # interleaved
            sync.append(tokens_per_s(make_loader(store, mixture, args.steps), args.steps, prefetch=False))
            pre.append(tokens_per_s(make_loader(store, mixture, args.steps), args.steps, prefetch=True))
        hidden = blocked_ms(make_loader(store, mixture, args.steps), min(args.steps, 100), args.compute_ms)
        row = {"sync_tokens_per_s": statistics.median(sync), "prefetch_tokens_per_s": statistics.median(pre),
               "x_trainer_sync": statistics.median(sync) / trainer, "blocked_ms_per_batch": hidden,
               "compute_ms_per_batch": args.compute_ms}
        result["modes"][name] = row
        print(f"{name:20s} sync {row['sync_tokens_per_s']:>12,.0f} tok/s ({row['x_trainer_sync']:,.0f}x trainer)  "
              f"prefetch {row['prefetch_tokens_per_s']:>12,.0f} tok/s  blocked {hidden:.3f} ms/batch "
              f"behind {args.compute_ms:g} ms compute", flush=True)
    worst = min(r["x_trainer_sync"] for r in result["modes"].values())
    result["meets_50x"] = worst >= 50
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
