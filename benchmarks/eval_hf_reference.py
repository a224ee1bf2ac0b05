"""tokenmill's generative and code scoring against a reference path through Hugging Face generate,
on the model `make demo` trains (export/hf_reference.py; `tokenmill eval --reference-hf` is the
same check for any run).

Exports the demo run's newest checkpoint to a temporary directory (`tokenmill export hf`), then
scores the demo config's two generative tasks over every item of their shipped sets (quiz_qa:
149 questions, 2 shots, exact match; python_code: 30 CPython functions, pass@1 in the sandbox),
each with the demo config's generation settings (greedy, its token limit and stop strings), and
again without stop strings (every generated token compared), once with tokenmill's scorer on the checkpoint and once through transformers on the export. Prints
one JSON object last (benchmarks/record.py adds commit, command, versions and load): per task
both paths' numbers, how many items' answers differ (and the first few, with the first
differing token), how many answers were not empty and how many distinct, and each path's seconds.

    make demo
    .venv/bin/python benchmarks/record.py benchmarks/results/eval_hf_reference.json -- \\
        benchmarks/eval_hf_reference.py --run runs/demo
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from tokenmill.config import load_config  # noqa: E402
from tokenmill.export.hf import export_hf  # noqa: E402
from tokenmill.export.hf_reference import check_against_hf, comparison_lines, run_tasks  # noqa: E402
from tokenmill.runs import RunDir  # noqa: E402
from tokenmill.train.checkpoint import latest_checkpoint  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "demo", help="a finished demo run directory")
    ap.add_argument("--limit", type=int, default=None, help="the first N items of each task (default: all)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for both paths")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    run = RunDir.create(load_config(args.run / "config.yaml", []), args.run)
    ckpt = latest_checkpoint(run.sub("checkpoints"))
    if ckpt is None:
        raise SystemExit(f"{args.run}: no checkpoint; run `make demo` first")
    # every item of each set (the demo config scores a prefix of each; the comparison wants them all)
    tasks = [t.model_copy(update={"limit": args.limit}) for t in run_tasks(run)]
    # The demo model's answers stop early (most quiz answers are empty: its first token is a
    # newline), so each task is also compared without stop strings: every token it generates.
    tasks += [t.model_copy(update={"name": f"{t.name}, no stop", "generation": t.generation.model_copy(update={"stop": []})}) for t in tasks]
    with tempfile.TemporaryDirectory(prefix="hfref-") as tmp:
        t0 = time.perf_counter()
        export = export_hf(ckpt, Path(tmp) / "hf")
        export_s = time.perf_counter() - t0
        rows = check_against_hf(run, export, ckpt, tasks)
    print("\n".join(comparison_lines(rows)), file=sys.stderr)
    result: dict[str, Any] = {
        "run": str(args.run),
        "checkpoint": ckpt.name,
        "threads": args.threads,
        "export_seconds": round(export_s, 2),
        "tasks": [
            {**{k: v for k, v in r.items() if k != "differing"}, "n_differing": len(r["differing"]), "differing": r["differing"][:5]}
            for r in rows
        ],
        "settings": {t.name: {"shots": t.shots, **t.generation.model_dump(include={"max_new_tokens", "stop", "temperature"})} for t in tasks},
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
