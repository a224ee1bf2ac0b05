"""The recorded mixture winner, confirmed on seeds its choice did not see.

`tokenmill mixture optimize examples/mixture/optimize.yaml` chose DoReMi's weights because they
measured the lowest mean held-out bpb on seeds 1, 2, 3 — and its recorded gain over uniform was
reported on those same seeds, a choice and its evidence from one sample. This reruns only the
confirmation step of that command (`decisions/optimize.confirm_step`, what `compare.confirm_seeds`
runs after a full optimization) for the recorded candidates: the winner and the uniform and
token-proportional baselines, with their recorded weights, trained again with the base recipe on
`compare.confirm_seeds` (4, 5, 6) and scored the same way; the paired Δ bpb per seed is the
out-of-sample evidence. DoReMi's proxies and the mixing law are not retrained: the weights under
test are the recorded ones, whatever this machine's proxies would give.

    .venv/bin/python benchmarks/record.py benchmarks/results/mixture_opt/confirm.json -- \\
        benchmarks/bench_mixture_confirm.py examples/mixture/optimize.yaml
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenmill.config import load_config
from tokenmill.decisions.optimize import choose, confirm_step, load_optimize_config
from tokenmill.scaling.sweep import prepare_data

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", type=Path, help="the mixture optimize config that made the recorded choice")
    ap.add_argument("--recorded", type=Path, default=HERE / "results" / "mixture_opt",
                    help="the recorded optimization (its compare.json: candidates, weights, seeds)")
    ap.add_argument("--out", type=Path, default=Path("runs/mixture-confirm"), help="experiment directory")
    ap.add_argument("--baselines", nargs="+", default=["uniform", "proportional"], choices=["uniform", "proportional"],
                    help="the baselines trained beside the winner (each costs one base run per seed)")
    args = ap.parse_args()
    cfg = load_optimize_config(args.config)
    if cfg.compare is None or not cfg.compare.confirm_seeds:
        raise SystemExit(f"{args.config}: compare.confirm_seeds is empty: nothing to confirm on")
    compare = json.loads((args.recorded / "compare.json").read_text())
    seen = {r["seed"] for c in compare.values() for r in c["runs"]}
    if seen & set(cfg.compare.confirm_seeds):
        raise SystemExit(f"confirm_seeds {sorted(seen & set(cfg.compare.confirm_seeds))} were used by the choice")
    chosen = choose(cfg, {"compare": compare})
    # confirm_step trains the winner and whichever baselines the comparison listed
    cfg = cfg.model_copy(update={"compare": cfg.compare.model_copy(update={"mixtures": [chosen, *args.baselines]})})
    base = load_config(cfg.base, cfg.set)
    args.out.mkdir(parents=True, exist_ok=True)
    data = prepare_data(args.out, base, cfg.data)
    candidates = {name: c["weights"] for name, c in compare.items()}
    record = confirm_step(cfg, chosen, base, data, candidates, args.out, lambda s: print(s, flush=True))
    record["choice"] = {"seeds": sorted(seen), "mean_bpb": {n: c["mean_bpb"] for n, c in compare.items()},
                        "paired": {n: c.get("paired") for n, c in compare.items()}}
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
