"""What each curation step buys, measured on real data with `tokenmill ablate` (issue 28).

The configs are examples/ablate/{base,ablate}.yaml. Sources (shared/corpora/fetch_real_corpora.sh): English web HTML with its real boilerplate
(Debian installation guides for amd64 and i386 — near-copies of each other — the Debian
handbook, developers' reference, maintainers' guide and reference, trafilatura's test pages),
a WARC sample, books (Austen, Shakespeare, two editions of the English Bible: KJV and WEB) and
Python code. Arms: raw (extract + normalize), the full pipeline, and one step off at a time:
heuristic quality rules, the model-based quality step (a classifier cut), near-duplicate
removal, line dedup. Two model sizes, three seeds each, equal tokens per size.

    .venv/bin/python benchmarks/record.py benchmarks/results/ablate.json --result /tmp/ablate.json -- \\
        benchmarks/bench_ablate.py --corpora ../real_corpora --work /tmp/ablate-bench --json /tmp/ablate.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ablate"


def base_config(corpora: Path, threads: int) -> dict:
    """examples/ablate/base.yaml with its ../real_corpora paths pointed at `corpora`."""
    cfg = yaml.safe_load((EXAMPLE / "base.yaml").read_text())
    for src in cfg["curate"]["sources"]:
        src["path"] = src["path"].replace("../real_corpora", str(corpora))
    mq = cfg["curate"]["model_quality"]
    mq["reference"] = mq["reference"].replace("../real_corpora", str(corpora))
    cfg["curate"]["workers"] = cfg["train"]["threads"] = threads
    return cfg


def ablate_config(small_tokens: int | None, large_tokens: int | None, seeds: list[int] | None) -> dict:
    """examples/ablate/ablate.yaml, optionally with other budgets or seeds."""
    cfg = yaml.safe_load((EXAMPLE / "ablate.yaml").read_text())
    cfg.update(root="out", base="base.yaml")
    for size, tokens in zip(cfg["sizes"], (small_tokens, large_tokens)):
        size["tokens"] = tokens or size["tokens"]
    cfg["seeds"] = seeds or cfg["seeds"]
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--small-tokens", type=int, default=None, help="default: the example's")
    ap.add_argument("--large-tokens", type=int, default=None, help="default: the example's")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the example's")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "base.yaml").write_text(yaml.safe_dump(base_config(args.corpora.resolve(), args.threads)))
    (args.work / "ablate.yaml").write_text(yaml.safe_dump(ablate_config(args.small_tokens, args.large_tokens, args.seeds)))
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "tokenmill", "ablate", "ablate.yaml"], cwd=args.work, check=True)
    result = json.loads((args.work / "out" / "ablate" / "ablate.json").read_text())
    out = {"benchmark": "ablate", "wall_seconds_this_call": time.time() - t0, "threads": args.threads,
           "config": "examples/ablate/{base,ablate}.yaml",
           "ablate": result}
    args.json.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "ablate"}))


if __name__ == "__main__":
    main()
