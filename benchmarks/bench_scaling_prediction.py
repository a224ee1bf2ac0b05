"""Does a small IsoFLOP sweep on this machine predict a 4x larger run? (issue 8's done-when)

Runs `tokenmill scaling sweep` on examples/scaling/sweep.yaml (books, Python documentation and
Python code from shared/corpora/fetch_real_corpora.sh; resumable: finished runs are reused) in
the pre-registered order: the sweep without its held-out runs, the fit, the held-out predictions
registered (`scaling fit --register`: predictions.json, never overwritten), then the held-out
runs. Prints each held-out run's registered prediction vs its actual final validation loss, the
fitted law, the run-to-run noise of the repeated pair, the wall-clock, and writes the
loss-vs-compute chart to docs/scaling_mixed.svg.

    .venv/bin/python benchmarks/bench_scaling_prediction.py [--sweep examples/scaling/sweep.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, default=Path("examples/scaling/sweep.yaml"))
    ap.add_argument("--chart", type=Path, default=Path("docs/scaling_mixed.svg"))
    ap.add_argument("--bootstrap", type=int, default=200)
    args = ap.parse_args()

    from tokenmill.scaling.analysis import analyze
    from tokenmill.scaling.fit import FitConfig
    from tokenmill.report.fit_charts import loss_vs_compute_chart
    from tokenmill.scaling.results import load_results
    from tokenmill.scaling.preregister import register, registered_checks
    from tokenmill.scaling.sweep import load_sweep, run_sweep

    out = run_sweep(args.sweep, holdout=False)
    sweep_dir = Path(out["sweep"])
    before = analyze(load_results(sweep_dir / "results.json"), FitConfig(bootstrap_samples=args.bootstrap))
    for p in register(sweep_dir, before):
        print(f"registered {p['registered_at']}: {p['name']} predicted {p['predicted']:.4f}")
    run_sweep(args.sweep)
    results = json.loads((sweep_dir / "results.json").read_text())
    a = analyze(load_results(sweep_dir / "results.json"), FitConfig(bootstrap_samples=args.bootstrap))
    f = a.chinchilla.fit
    seconds = sum(r.get("seconds") or 0 for r in results["runs"] if r["role"] == "sweep")
    held = sum(r.get("seconds") or 0 for r in results["runs"] if r["role"] == "holdout")
    cfg = load_sweep(args.sweep)
    print(f"cores {os.cpu_count()}, {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")
    print(f"sweep: {len(cfg.budgets)} budgets {cfg.budgets}, {sum(r['role'] == 'sweep' for r in results['runs'])} runs, "
          f"train seconds {seconds:.0f} (held-out run {held:.0f}); diverged: {[x['name'] for x in results['failed']]}")
    print(f"L(N, D) = {f.E:.4f} + {f.A:.4g}/N^{f.alpha:.4f} + {f.B:.4g}/D^{f.beta:.4f}; a = {f.a:.3f}, b = {f.b:.3f}")
    for name in ("E", "alpha", "beta"):
        iv = a.chinchilla.interval(name)
        print(f"  {name} bootstrap {a.config.interval}: [{iv.low:.4f}, {iv.high:.4f}]" if iv else f"  {name}: no interval")
    for h in a.holdout:
        iv = f" [{h.interval.low:.4f}, {h.interval.high:.4f}]" if h.interval else ""
        print(f"held-out {h.name}: N {h.params:,}, D {h.tokens:,}, C {h.flops:.3g}: predicted {h.predicted:.4f}{iv}, "
              f"actual {h.actual:.4f}, error {h.relative_error:+.2%}")
    for p in registered_checks(sweep_dir, a):
        err = "pending" if p["actual"] is None else f"actual {p['actual']:.4f}, error {p['relative_error']:+.2%}"
        print(f"registered {p['registered_at']} {p['name']}: predicted {p['predicted']:.4f}, {err}")
    for n in a.noise:
        print(f"run-to-run noise {', '.join(n.names)}: losses {[round(x, 4) for x in n.losses]}, "
              f"std {n.std:.4f} ({n.relative_std:.2%})")
    for h in a.frontier_holdout:
        print(f"  L(C) frontier check {h.name}: predicted {h.predicted:.4f}, error {h.relative_error:+.2%}")
    for n in a.notes:
        print("note:", n)
    args.chart.parent.mkdir(parents=True, exist_ok=True)
    args.chart.write_text(loss_vs_compute_chart(a))
    print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
