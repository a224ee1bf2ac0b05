"""The design side of the documentation judgement (issue 55): the same per-language curate runs as
benchmarks/bench_docs_kept.py, on the frozen file's *design* collections only, so that kind detection,
rule families and language ID are tuned where the frozen evaluation collections never are.

Each language folder of a design collection is curated alone (no kind declared, defaults, the frozen
run guards); it prints keep rates and the rules that removed pages, with examples, and writes them.

    .venv/bin/python benchmarks/design_docs_kept.py --corpora ../real_corpora --work /tmp/dd --json /tmp/dd.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_docs_kept import FROZEN, Row, curate_row, measure, pooled, run_config  # noqa: E402

# Design collections with one folder per language; the others are one English row each.
PER_LANGUAGE = ("web_html/debian-handbook", "web_html/installation-guide-i386", "web_html/debian-history")
ENGLISH_ONLY = ("web_html/python3.11-doc", "web_html/trafilatura-tests")


def design_rows(corpora: Path, frozen: dict[str, Any]) -> list[Row]:
    """One row per language folder of each per-language design collection, one per English-only one."""
    design = set(frozen["design_collections"])
    out = []
    for coll in (c for c in PER_LANGUAGE if c in design):
        for folder in sorted(p for p in (corpora / coll).iterdir() if p.is_dir()):
            name = coll.split("/")[-1]
            out.append(Row(f"{name}/{folder.name}", name, folder.name, folder.name == "en", (f"{coll}/{folder.name}",)))
    for coll in (c for c in ENGLISH_ONLY if c in design):
        name = coll.split("/")[-1]
        out.append(Row(f"{name}/en", name, "en", True, (coll,)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--only", action="append", default=[], help="only rows whose name starts with this; repeatable")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    corpora, work = args.corpora.resolve(), args.work.resolve()
    frozen = json.loads(FROZEN.read_text())
    chosen = [r for r in design_rows(corpora, frozen) if not args.only or any(r.name.startswith(o) for o in args.only)]
    guards = frozen["configuration"]["run_guards"]
    per_row: dict[str, dict[str, Any]] = {}
    for row in chosen:
        started = time.perf_counter()
        curated = curate_row(run_config([str(corpora / p) for p in row.paths], guards, None), work / row.name.replace("/", "__"))
        r = per_row[row.name] = {**measure(curated, corpora), "seconds": round(time.perf_counter() - started, 1)}
        top = "; ".join(f"{x['rule']} {x['pages']}" for x in r["top_rejections"][:4])
        print(f"{row.name:34s} {r['kept']:4d}/{r['read']:4d} ({r['keep_rate']}) empty {r['empty']:3d}  {top}", flush=True)
    for coll, c in pooled(chosen, per_row).items():
        print(f"{coll:26s} {c['kept']}/{c['read']} kept ({c['keep_rate']})")
    if args.json:
        args.json.write_text(json.dumps(per_row, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
