"""What the early-warning signals (train.health, issue 30) cost on the demo model.

One process, the demo's config and token store, the trainer's own step (`compute_update` +
`optimizer.step`, the real code path, its first phase's batches), interleaved per repeat:

  base        a training step without the per-bucket loss (health.bucket_loss: false)
  buckets     the same step with it (the NLL split by row bucket, one float64 index_add per micro-batch)
  probe       one activation probe (ActivationProbe.measure: a no-grad forward of activation_rows
            rows of the step's first micro-batch with the hooks, plus the attention-logit maxima)
  drift       one GradDrift.update on the step's per-group gradient norms
  bucket_add  the per-bucket bookkeeping of one step alone (grad_accum BucketLoss.add on an NLL of
            the micro-batch's shape, with Loader.row_buckets, and one result()): the precise
            figure for what the buckets-base difference can only bound (that difference is two
            noisy step timings)
  run_health  the run-health work every step does (one process): the hang watchdog's beat (its
            faulthandler backstop re-armed), the rank clock and the step-end stop/rank-time
            agreement, the per-bucket loss warning's update (under torchrun the agreement is the
            one all-reduce the Ctrl-C check already made)

Each is timed `--repeats` times in the order base, buckets, probe, drift, bucket_add (the model trains on, so
every repeat is a real step), after `--warmup` untimed steps; medians are reported. The overhead
of the defaults per step is bucket_add + probe / activation_stats_every + drift + run_health, as a share
of the base step; `every_for_2pct` is the smallest sampling interval that keeps the probe under 2%.

    .venv/bin/python benchmarks/record.py benchmarks/results/health_overhead.json -- \\
        benchmarks/bench_health_overhead.py --run runs/demo --threads 1
Needs a tokenized demo run (`make demo`). Run it on a quiet machine: other processes' load moves
step times by more than the differences measured here (record.py logs the load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from tokenmill.config import load_config
from tokenmill.mixture.loader import Loader
from tokenmill.model.transformer import Transformer
from tokenmill.tokens.store import TokenStore
from tokenmill.train.activation_stats import ActivationProbe
from tokenmill.train.bucket_loss import BucketLoss
from tokenmill.train.config import HealthConfig
from tokenmill.train.device import autocast, resolve_dtype
from tokenmill.train.bucket_alert import BucketLossAlert
from tokenmill.train.distributed import DistContext
from tokenmill.train.drift import GradDrift
from tokenmill.train.rank_times import RankClock, step_end_agreement
from tokenmill.train.watchdog import Watchdog
from tokenmill.train.metrics import grad_norms_by_group
from tokenmill.train.optimizer import build_optimizer
from tokenmill.train.trainer import compute_update, resolve_model_config


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, default=Path("runs/demo"), help="a tokenized demo run directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override (smoke runs)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    cfg = load_config(args.run / "config.yaml", [f"train.threads={args.threads}", *args.overrides])
    tc, hc = cfg.train, HealthConfig()
    store = TokenStore(args.run / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    device, dtype = torch.device("cpu"), resolve_dtype(torch.device("cpu"), tc.dtype)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.train_seed))
    model.train()
    optimizer = build_optimizer(model, tc, device)
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, cfg.train_seed)
    probe = ActivationProbe(model, hc.activation_rows, hc.attn_logit_queries)
    drift = GradDrift(hc.drift_window, hc.drift_ratio, start_after=0)
    buckets = BucketLoss(list(store.buckets))
    step = 0

    def train_step(with_buckets: bool) -> None:
        nonlocal step
        step += 1
        compute_update(model, optimizer, loader, step, tc, device, dtype, None, {},
                       buckets=buckets if with_buckets else None)
        if with_buckets:
            buckets.result()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def probe_once() -> None:
        with autocast(device, dtype):
            probe.measure(loader.rebuild(max(step, 1), 0))

    for _ in range(args.warmup):
        train_step(True)
        probe_once()
    times: dict[str, list[float]] = {"base": [], "buckets": [], "probe": [], "drift": [], "bucket_add": [],
                                     "run_health": []}
    import tempfile

    dog = Watchdog(300.0, Path(tempfile.mkdtemp()) / "hangs", 0).start()
    clock, alert, single = RankClock(), BucketLossAlert(), DistContext()
    losses = {b: 3.0 for b in store.buckets}

    def run_health() -> None:
        dog.beat(step)
        clock.add(0.001, 0.5)
        step_end_agreement(single, 0, clock if step % 10 == 0 else None)
        alert.update(step, losses)

    phase = loader.phase_at(1)
    fake = torch.rand(phase.rows, phase.seq_len)
    mask = torch.ones(phase.rows, phase.seq_len, dtype=torch.bool)

    def bookkeeping() -> None:
        for micro in range(tc.grad_accum):
            buckets.add(fake, mask, loader.row_buckets(max(step, 1), micro))
        buckets.result()

    for _ in range(args.repeats):
        times["base"].append(timed(lambda: train_step(False)))
        times["buckets"].append(timed(lambda: train_step(True)))
        times["probe"].append(timed(probe_once))
        compute_update(model, optimizer, loader, step + 1, tc, device, dtype, None, {})  # gradients to norm
        norms = grad_norms_by_group(model)
        optimizer.zero_grad(set_to_none=True)
        times["drift"].append(timed(lambda: drift.update(step, norms)))
        times["bucket_add"].append(timed(bookkeeping))
        times["run_health"].append(timed(run_health))
    dog.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["base"]
    bucket_cost = med["bucket_add"]
    per_step = bucket_cost + med["probe"] / hc.activation_stats_every + med["drift"] + med["run_health"]
    room = 0.02 * base - bucket_cost - med["drift"] - med["run_health"]  # what the probe may cost per step within 2%
    return {
        "model": {"d_model": mcfg.d_model, "n_layers": mcfg.n_layers, "n_heads": mcfg.n_heads,
                  "vocab_size": mcfg.vocab_size},
        "batch": {"phase": phase.name, "seq_len": phase.seq_len, "rows": phase.rows, "grad_accum": tc.grad_accum,
                  "probe_rows": hc.activation_rows, "probe_queries": hc.attn_logit_queries},
        "threads": args.threads, "dtype": str(dtype).replace("torch.", ""), "repeats": args.repeats,
        "median_s": med,
        "spread_s": {k: [min(v), max(v)] for k, v in times.items()},
        "bucket_loss_share": bucket_cost / base,
        "run_health_share": med["run_health"] / base,
        "buckets_minus_base_share": (med["buckets"] - base) / base,  # an A/B bound on the same cost: noise-dominated
        "probe_share_per_call": med["probe"] / base,
        "activation_stats_every": hc.activation_stats_every,
        "defaults_overhead_share": per_step / base,
        "every_for_2pct": max(1, int(-(-med["probe"] // room))) if room > 0 else None,
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
