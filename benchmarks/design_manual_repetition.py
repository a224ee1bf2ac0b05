"""The design side of the manuals' repetition limit (`quality.REFERENCE_MAX_DUP_CHAR_FRAC`, issue 55):
how much of a manual page repeats itself, and how much of a junk page does, on design text only.

Two measurements, neither of which depends on the limit (the shares are signals computed on every
document, kept or removed):

  manuals    every page detected as `reference` in the given curated runs (bench_docs_fresh.py's
             work folders on spent documentation sets, variant a), less those under the length floor
             (removed whatever they repeat): the distribution of `dup_para_char_frac` and
             `dup_text_line_char_frac`, how many pages are over Gopher's web limit (0.2) and over the
             manual limit, and which pages are over the manual limit.
  dirty web  the dirty-web design corpus (benchmarks/dirty_web.py, seed 41) curated at defaults with its
             reference: per label, the documents detected as `reference` whose larger share lies
             between the two limits (the only ones the manual limit can change) or over it, and the
             smallest share of a repeated-paragraph page.

    .venv/bin/python benchmarks/record.py benchmarks/results/design_manual_repetition.json --result /tmp/dmr.json -- \\
        benchmarks/design_manual_repetition.py --corpora ../real_corpora --work /tmp/dmr --json /tmp/dmr.json \\
        --curated /tmp/dkf1/a_no_reference --curated /tmp/dkf2/a_no_reference ...
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dirty_web  # noqa: E402

from tokenmill.data.steps.quality import REFERENCE_MAX_DUP_CHAR_FRAC  # noqa: E402

WEB_LIMIT = 0.2  # Gopher's limit on both shares (QualityConfig's defaults)
SHARES = ("dup_para_char_frac", "dup_text_line_char_frac")
PERCENTILES = (50, 90, 99, 99.9, 100)


def _rows(folder: Path) -> list[dict[str, Any]]:
    """Every row (kept or rejected) of the curated runs under `folder`: url, kind, rule, quality, metadata."""
    out = []
    for part in sorted(folder.rglob("*.parquet")):
        names = pq.read_schema(part).names  # kept rows have no `rule`; the text is never read
        cols = [c for c in ("id", "url", "kind", "rule", "quality", "metadata") if c in names]
        out += [{"rule": None, **r} for r in pq.read_table(part, columns=cols).to_pylist()]
    return out


def manuals(folders: list[Path]) -> dict[str, Any]:
    """The two shares over the manual pages of the curated runs (see the module docstring)."""
    pages = [r for f in folders for r in _rows(f) if r["kind"] == "reference" and r["quality"] and r["rule"] != "min_chars"]
    out: dict[str, Any] = {"pages": len(pages), "limit": REFERENCE_MAX_DUP_CHAR_FRAC}
    for share in SHARES:
        v = np.array([p["quality"][share] for p in pages])
        out[share] = {
            "percentiles": {str(q): round(float(np.percentile(v, q)), 4) for q in PERCENTILES},
            "over_web_limit": int((v > WEB_LIMIT).sum()),
            "over_limit": int((v > REFERENCE_MAX_DUP_CHAR_FRAC).sum()),
        }
    over = [p for p in pages if max(p["quality"][s] for s in SHARES) > REFERENCE_MAX_DUP_CHAR_FRAC]
    out["pages_over_limit"] = sorted(
        ({"page": p["url"].split("/pages/")[-1], **{s: round(p["quality"][s], 3) for s in SHARES}} for p in over),
        key=lambda x: x["page"],
    )
    return out


def dirty(corpora: Path, work: Path, seed: int) -> dict[str, Any]:
    """The dirty-web design corpus's reference-kind documents by label and share (see the docstring)."""
    rows, _ = dirty_web.build(corpora, 300, seed)
    work.mkdir(parents=True, exist_ok=True)
    dirty_web.write_jsonl(rows, work / "dirty.jsonl")
    dirty_web.write_reference(corpora, work / "reference")
    cmd = [
        sys.executable,
        "-m",
        "tokenmill",
        "curate",
        str(work / "dirty.jsonl"),
        "-o",
        str(work / "out"),
        "--reference",
        str(work / "reference"),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    labels = {r["id"]: r["kind"] for r in rows}
    between: Counter[str] = Counter()
    over: Counter[str] = Counter()
    repeated: list[float] = []
    for r in _rows(work / "out"):
        rid = r["id"] if r["id"] in labels else json.loads(r["metadata"] or "{}").get("id")
        label, q = labels[rid], r["quality"]
        if label == "repeated_paragraph" and q:
            repeated.append(max(q[s] for s in SHARES))
        if r["kind"] != "reference" or not q:
            continue
        top = max(q[s] for s in SHARES)
        if WEB_LIMIT < top <= REFERENCE_MAX_DUP_CHAR_FRAC:
            between[label] += 1
        elif top > REFERENCE_MAX_DUP_CHAR_FRAC:
            over[label] += 1
    return {
        "seed": seed,
        "documents": len(rows),
        "reference_between_limits": dict(sorted(between.items())),
        "reference_over_limit": dict(sorted(over.items())),
        "repeated_paragraph_smallest_share": round(min(repeated), 4),
        "repeated_paragraph_measured": len(repeated),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--curated", type=Path, action="append", required=True, help="a folder of curated runs on design text")
    ap.add_argument("--corpora", type=Path, required=True, help="the real corpora root (the dirty-web corpus's material)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = {
        "curated": [str(f) for f in args.curated],
        "manuals": manuals(args.curated),
        "dirty_web": dirty(args.corpora.resolve(), args.work.resolve(), args.seed),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
