"""The same text in every language, on translated man pages, under the frozen rule of
benchmarks/frozen/manpage_parity.json (committed before this scorer first ran).

Every translated page is paired with its English original (same section folder and file name),
both rendered to plain text; each language, and English, is curated in its own run at `tokenmill
curate` defaults with no kind declared and no reference. Per language: the share of its paired
pages kept, the share of their English originals kept (95% Wilson intervals), the rules that
removed its pages but not their originals, and the frozen rule's check (within 10 points).

    .venv/bin/python benchmarks/record.py benchmarks/results/manpage_parity.json -- \\
        benchmarks/bench_manpage_parity.py --corpora /work/real_corpora --work /tmp/manpage-parity
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
import bench_quality_signal as qs  # noqa: E402

FROZEN = HERE / "frozen" / "manpage_parity.json"
MIN_CHARS = 200
SMALL = 20
BUCKET = "man"


def pairs(corpora: Path, lang: str) -> dict[str, tuple[str, str]]:
    """{relative path: (page in lang, English original)}, both rendered, both >= 200 characters."""
    root, en = corpora / "reference/manpages" / lang, corpora / "reference/manpages/en"
    out = {}
    for page in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(page.relative_to(root))
        if not (en / rel).is_file():
            continue
        text, original = (qs.render_roff(p.read_text(encoding="utf-8", errors="replace")) for p in (page, en / rel))
        if len(text) >= MIN_CHARS and len(original) >= MIN_CHARS:
            out[rel] = (text, original)
    return out


def curate_pages(pages: dict[str, str], folder: Path, guards: dict[str, Any]) -> tuple[set[str], dict[str, str]]:
    """Curate {id: text} as one JSONL source in one run; (ids kept, {id: "step/rule"} removed)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "pages.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in pages.items()))
    config = qs.run_config(data, guards, None)
    config["curate"]["sources"][0]["bucket"] = BUCKET
    curated = qs.curate_set(config, folder)
    kept: set[str] = set()
    removed: dict[str, str] = {}
    for part in sorted(curated.glob(f"{BUCKET}/*.parquet")):
        kept |= {qs._row_id(r) for r in pq.read_table(part, columns=["id", "metadata"]).to_pylist()}
    for part in sorted((curated / "_rejected").glob("*.parquet")):
        for r in pq.read_table(part, columns=["id", "metadata", "step", "rule"]).to_pylist():
            removed.setdefault(qs._row_id(r), f"{r['step']}/{r['rule']}")
    return kept, removed


def score_language(lang: str, paired: dict[str, tuple[str, str]], work: Path, guards: dict[str, Any]) -> dict[str, Any]:
    """Curate the language's pages and, apart, their English originals; both rates and the rule's check."""
    kept, removed = curate_pages({f"{lang}/{rel}": t for rel, (t, _) in paired.items()}, work / lang, guards)
    kept_en, removed_en = curate_pages({f"en/{rel}": o for rel, (_, o) in paired.items()}, work / f"en-for-{lang}", guards)
    n = len(paired)
    k = sum(f"{lang}/{rel}" in kept for rel in paired)
    k_en = sum(f"en/{rel}" in kept_en for rel in paired)
    only_here = Counter(removed.get(f"{lang}/{rel}", "?") for rel in paired
                        if f"{lang}/{rel}" not in kept and f"en/{rel}" in kept_en)
    return {"pairs": n, "small": n < SMALL, "kept": k, "keep": round(k / n, 4) if n else None,
            "interval": qs.wilson(k, n), "kept_en": k_en, "keep_en": round(k_en / n, 4) if n else None,
            "interval_en": qs.wilson(k_en, n), "removed_here_not_in_english": dict(only_here.most_common()),
            "removed_in_english": dict(Counter(removed_en.values()).most_common()),
            "within_10_points": n > 0 and (k_en - k) / n <= 0.10}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=Path("/work/real_corpora"), help="Real corpora root.")
    ap.add_argument("--work", type=Path, required=True, help="A new or empty folder for the runs.")
    args = ap.parse_args()
    if not (args.corpora / "reference/manpages/en").is_dir():
        print(f"{args.corpora}: not a real-corpora root (no reference/manpages/en)", file=sys.stderr)
        return 2
    frozen = json.loads(FROZEN.read_text())
    guards = {"workers": 1, "max_removal_share": 1.0, "allow_empty_bucket": True}
    t0 = time.perf_counter()
    langs = {lang: score_language(lang, pairs(args.corpora, lang), args.work, guards)
             for lang in frozen["evaluation"]["languages"]}
    met = sum(v["within_10_points"] for v in langs.values())
    result = {"benchmark": "manpage_parity", "frozen": str(FROZEN.relative_to(HERE.parent)), "languages": langs,
              "checks_met": met, "checks_total": len(langs), "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
