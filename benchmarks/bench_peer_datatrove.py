"""datatrove's FineWeb recipe (benchmarks/peer_datatrove.py) scored as a peer on a frozen set of
issue 55, with the frozen scorer's own set, metric and decision-rule checks (imported, unchanged):

  quality_signal  the set bench_quality_signal.build_set makes from benchmarks/frozen/quality_signal.json
                  (text, no extractor): kept per clean row and per junk kind with Wilson 95%;
                  `--frozen benchmarks/frozen/quality_signal2.json --fresh TARGET` the second one.
  docs_kept       every page of every row of benchmarks/frozen/docs_kept.json (HTML, extracted by
                  datatrove's Trafilatura): pages kept per language row and the gap to English on
                  the parity collections.

The LanguageFilter keeps the languages the set contains (ft176 codes: "zh-cn" -> "zh", "ja_JP" ->
"ja"), so the peer is not penalised for FineWeb's English-only choice; `--languages en` runs
FineWeb's own choice. The frozen rules name two tokenmill variants (with and without a perplexity
reference); the peer has no such option and is checked once, as variant "peer".

    PYTHONPATH=src .venv/bin/python benchmarks/bench_peer_datatrove.py --set quality_signal \\
        --corpora /work/real_corpora --json /tmp/qs.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import bench_docs_kept as dk  # noqa: E402
import bench_quality_signal as qs  # noqa: E402
from peer_datatrove import fineweb_recipe  # noqa: E402

TOP = 6
VARIANT = "peer"


def ft_code(lang: str) -> str:
    """A row's language as fastText lid.176 names it: "zh-cn" -> "zh", "pt-br" -> "pt", "ja_JP" -> "ja"."""
    return lang.replace("_", "-").split("-")[0].lower()


def top_reasons(outcomes: list[str]) -> list[dict[str, Any]]:
    return [{"reason": r, "docs": n} for r, n in Counter(o for o in outcomes if o != "kept").most_common(TOP)]


def run_quality_signal(corpora: Path, languages: tuple[str, ...] | None, stop_words: str,
                       frozen_path: Path = qs.FROZEN, fresh: Path | None = None) -> dict[str, Any]:
    """The quality-signal set built by the frozen scorer, judged by the peer, tallied as it tallies
    (quality_signal2.json: its rows read from the fetched set `fresh`, its digest checked)."""
    frozen = json.loads(frozen_path.read_text())
    if "files_sha256" in frozen:
        qs.check_digest(fresh, frozen["files_sha256"])
    ev = frozen["evaluation"]
    started = time.perf_counter()
    docs = qs.build_set(corpora, ev, fresh)
    set_seconds = round(time.perf_counter() - started, 1)
    langs = languages or tuple(sorted({ft_code(x) for r in ev["rows"].values() for x in r["languages"]}))
    print(f"set: {len(docs)} documents ({set_seconds} s); LanguageFilter keeps {langs}", flush=True)
    started = time.perf_counter()
    out = fineweb_recipe([{"id": d["id"], "text": d["text"]} for d in docs], "text", langs, stop_words)
    seconds = round(time.perf_counter() - started, 1)
    kept = {i for i, o in out.items() if o["outcome"] == "kept"}
    removed = {i: o["outcome"] for i, o in out.items() if o["outcome"] != "kept"}
    groups = qs.tally(docs, kept, removed, {})
    for g in groups.values():
        g.pop("perplexity_judged", None)
    for key, g in groups.items():
        if key.count("/") == 1 and not key.startswith("clean/"):
            continue
        top = "; ".join(f"{x['rule']} {x['docs']}" for x in g["removed_by"][:3])
        print(f"{key:32s} {g['kept']:4d}/{g['docs']:4d} kept ({g['keep_rate']:.3f}, 95% {g['wilson95']})  {top}", flush=True)
    return {"frozen": str(frozen_path.resolve().relative_to(qs.FROZEN.parents[2])), "documents": dict(Counter(d["kind"] for d in docs)),
            "languages": list(langs), "set_seconds": set_seconds, "recipe_seconds": seconds,
            "groups": groups, "removed_by": top_reasons(list(removed.values())),
            "verdict": qs.verdict(frozen["decision_rule"], list(ev["rows"]), list(ev["junk_kinds"]), {VARIANT: groups})}


def row_pages(corpora: Path, row: dk.Row) -> list[Path]:
    """The row's HTML pages, as the files source reads its paths (a file, or a folder's HTML files)."""
    from tokenmill.data.readers.html import HTML_EXTS

    pages: list[Path] = []
    for p in (corpora / x for x in row.paths):
        pages += [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in HTML_EXTS)
    return pages


def score_row(corpora: Path, row: dk.Row, langs: tuple[str, ...], stop_words: str) -> dict[str, Any]:
    """Pages read, kept, found empty by the extractor, the top reasons, seconds: one row."""
    started = time.perf_counter()
    pages = row_pages(corpora, row)
    docs = [{"id": str(p.relative_to(corpora)), "text": p.read_text(encoding="utf-8", errors="replace")} for p in pages]
    out = fineweb_recipe(docs, "html", langs, stop_words)
    outcomes = [o["outcome"] for o in out.values()]
    kept = outcomes.count("kept")
    return {"read": len(docs), "kept": kept, "keep_rate": round(kept / len(docs), 4) if docs else None,
            "empty": outcomes.count("Trafilatura:empty"), "top_reasons": top_reasons(outcomes),
            "examples": {r: [i for i, o in out.items() if o["outcome"] == r][:3] for r in dict(Counter(outcomes)) if r != "kept"},
            "languages": dict(Counter(o["language"] for o in out.values() if o["outcome"] == "kept")),
            "seconds": round(time.perf_counter() - started, 1)}


def run_docs_kept(corpora: Path, languages: tuple[str, ...] | None, stop_words: str) -> dict[str, Any]:
    """Every docs_kept row judged by the peer; the frozen rule's checks and the English gaps."""
    frozen = json.loads(dk.FROZEN.read_text())
    all_rows = dk.rows(frozen)
    langs = languages or tuple(sorted({ft_code(r.lang) for r in all_rows}))
    print(f"rows: {len(all_rows)}; LanguageFilter keeps {langs}", flush=True)
    per_row: dict[str, dict[str, Any]] = {}
    for row in all_rows:
        r = per_row[row.name] = score_row(corpora, row, langs, stop_words)
        top = "; ".join(f"{x['reason']} {x['docs']}" for x in r["top_reasons"][:3])
        print(f"{row.name:34s} {r['kept']:4d}/{r['read']:4d} kept ({r['keep_rate']}) empty {r['empty']:3d} {r['seconds']:6.1f}s  {top}",
              flush=True)
    verdict = dk.verdict(frozen["decision_rule"], all_rows, {VARIANT: per_row})
    gaps = {c["check"].split(":")[0]: c["value"] for c in verdict["checks"] if "English" in c["check"]}
    every = [o for r in per_row.values() for o in r["top_reasons"]]
    totals = Counter()
    for o in every:
        totals[o["reason"]] += o["docs"]
    return {"frozen": "benchmarks/frozen/docs_kept.json", "languages": list(langs), "rows": per_row,
            "collections": dk.pooled(all_rows, per_row), "gap_to_english": gaps,
            "removed_by": [{"reason": r, "docs": n} for r, n in totals.most_common(TOP)], "verdict": verdict}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=["quality_signal", "docs_kept"], required=True)
    ap.add_argument("--corpora", type=Path, required=True, help="the real corpora root")
    ap.add_argument("--languages", nargs="+", help="the LanguageFilter's languages (default: the set's own; FineWeb: en)")
    ap.add_argument("--stop-words", choices=["per_language", "english"], default="per_language")
    ap.add_argument("--json", type=Path, help="write the result here")
    ap.add_argument("--frozen", type=Path, default=qs.FROZEN, help="with --set quality_signal: the frozen judgement")
    ap.add_argument("--fresh", type=Path, help="with --set quality_signal: the fetched set its rows are read from")
    args = ap.parse_args()
    started = time.perf_counter()
    langs = tuple(args.languages) if args.languages else None
    if args.set == "quality_signal":
        scored = run_quality_signal(args.corpora.resolve(), langs, args.stop_words, args.frozen, args.fresh)
    else:
        scored = run_docs_kept(args.corpora.resolve(), langs, args.stop_words)
    result = {"set": args.set, "peer": "datatrove FineWeb recipe (benchmarks/peer_datatrove.py)",
              "stop_words": args.stop_words, **scored}
    result["seconds"] = round(time.perf_counter() - started, 1)
    for c in result["verdict"]["checks"]:
        print(f"{'holds' if c['holds'] else 'FAILS':6s} {c['check']}: {c['value']}")
    print(f"all hold: {result['verdict']['all_hold']}; removed by {result['removed_by']} ({result['seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
