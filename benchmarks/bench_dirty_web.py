"""Dirty web with an oracle: what each kind of junk loses to `tokenmill curate` at its defaults,
and to datatrove's Gopher, C4 and FineWeb filters at theirs, on the same labelled documents.

The corpus is built by benchmarks/dirty_web.py from the real corpora (no download): clean
prose, clean documentation, mojibake'd documentation (clean: must be repaired and kept) and
ten kinds of web junk, every document labelled. Then:

  tokenmill  `python -m tokenmill curate CORPUS.jsonl -o OUT --reference REF`, a real process, no
             kind declared, no --steps; REF is the corpus's reference (dirty_web.write_reference:
             other files of the same kinds of clean text, disjoint from the corpus by file). Kept rows (OUT/<bucket>/part-*.parquet) and rejected rows
             (OUT/_rejected/*.parquet, with step and rule) are joined back to the labels by id
             (the record's own id, or `metadata.id`). A mojibake row counts as repaired when its
             kept text holds no more mojibake pairs ("Ã©", "Â ", "â€") than the original page.
  datatrove  datatrove 0.10.1's FineWeb recipe at its best (benchmarks/peer_datatrove.py, issue 55):
             LanguageFilter with the offline lid.176 model given the corpus's languages, FTFY,
             GopherRepetitionFilter -> GopherQualityFilter (stop words per language) ->
             C4QualityFilter -> FineWebQualityFilter, on the text as given (no extraction: the
             corpus is text), stopping at the first step that rejects, as a pipeline does. Until
             issue 55 this arm ran the four filters alone at their defaults.

Targets (issue 41): every junk kind >= 95% removed, clean text >= 97% kept, mojibake >= 95%
repaired and kept (kept with no mojibake left; how many are also identical to the original
page, >= 0.99 similar, is counted apart: other default steps edit text too, e.g. a boilerplate
line dropped or an e-mail address masked). The result is printed as JSON last (benchmarks/record.py records it).

    .venv/bin/python benchmarks/bench_dirty_web.py --corpora /work/real_corpora [--per-kind 300]
Needs `pip install datatrove==0.10.1 orjson spacy` (benchmark-only).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dirty_web  # noqa: E402

TARGETS = {"junk_removed": 0.95, "clean_kept": 0.97, "mojibake_repaired_kept": 0.95}


def run_curate(corpus: Path, out: Path, reference: Path) -> float:
    """`tokenmill curate CORPUS -o OUT --reference REF` at its defaults, as a user runs it; its seconds."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tokenmill", "curate", str(corpus), "-o", str(out), "--reference", str(reference)],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"tokenmill curate exited {proc.returncode}: {proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def _row_id(row: dict) -> str:
    """The record's own id: the row id when tokenmill took it, else metadata.id."""
    try:
        meta = json.loads(row.get("metadata") or "{}")
    except json.JSONDecodeError:
        meta = {}
    return str(meta.get("id") or row["id"])


def read_curated(out: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({id: kept text}, {id: "step:rule"}) from curate's output folder."""
    kept: dict[str, str] = {}
    for part in sorted(out.glob("*/part-*.parquet")):
        if part.parent.name.startswith("_"):
            continue
        for row in pq.read_table(part, columns=["id", "text", "metadata"]).to_pylist():
            kept[_row_id(row)] = row["text"]
    rejected: dict[str, str] = {}
    for part in sorted((out / "_rejected").glob("*.parquet")):
        for row in pq.read_table(part, columns=["id", "metadata", "step", "rule"]).to_pylist():
            rejected.setdefault(_row_id(row), f"{row['step']}:{row['rule']}")
    return kept, rejected


# The corpus's languages: English clean text and junk, mojibake'd pages in de/es/fr/it/pt(-br).
DIRTY_WEB_LANGUAGES = ("en", "de", "es", "fr", "it", "pt")


def run_datatrove(rows: list[dict]) -> dict[str, str]:
    """{id: "kept" or "<Step>:<reason>"} for datatrove's FineWeb recipe at its best
    (benchmarks/peer_datatrove.py: its language filter with the offline lid.176 model given the
    corpus's languages, FTFY, Gopher's stop words per language, Gopher, C4 and FineWeb filters)."""
    from peer_datatrove import fineweb_recipe

    judged = fineweb_recipe([{"id": r["id"], "text": r["text"]} for r in rows], "text", DIRTY_WEB_LANGUAGES)
    return {i: j["outcome"] for i, j in judged.items()}


# Marks cp1252/latin-1 mojibake of UTF-8 leaves: "Ã©", "Â ", "â€™" (a lead byte's character
# followed by a continuation byte's character).
_MOJIBAKE = re.compile("[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc\u2013-\u2122]")


def _repaired(kept: str, original: str) -> bool:
    """No mojibake left that the original did not have: other steps may still edit the text
    (boilerplate lines dropped, e-mails masked), which `_same_text` counts apart."""
    return len(_MOJIBAKE.findall(kept)) <= len(_MOJIBAKE.findall(original))


def _same_text(kept: str, original: str) -> bool:
    a, b = " ".join(kept.split()), " ".join(original.split())
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= 0.99


def _share(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def per_kind(rows: list[dict], kept: dict[str, str], rejected: dict[str, str], dt: dict[str, str]) -> dict:
    """Per kind: n, each pipeline's removed share and the steps/rules (filters/reasons) that removed it."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_kind[row["kind"]].append(row)
    out = {}
    for kind in dirty_web.KINDS:
        group = by_kind[kind]
        tm = Counter(rejected.get(r["id"], "kept" if r["id"] in kept else "missing") for r in group)
        dtc = Counter(dt[r["id"]] for r in group)
        n = len(group)
        out[kind] = {
            "n": n, "clean": kind in dirty_web.CLEAN_KINDS,
            "tokenmill_removed": _share(n - tm["kept"], n),
            "tokenmill_by": [[k, v] for k, v in tm.most_common() if k != "kept"][:5],
            "tokenmill_missing": tm["missing"],
            "datatrove_removed": _share(n - dtc["kept"], n),
            "datatrove_by": [[k, v] for k, v in dtc.most_common() if k != "kept"][:5]}
    return out


def mojibake_repaired(rows: list[dict], kept: dict[str, str]) -> dict:
    """Mojibake rows kept with no mojibake left (the target), and those whose kept text is also
    the original page text (>= 0.99 similar: no other step edited it)."""
    moji = [r for r in rows if r["kind"] == "mojibake"]
    kept_rows = [r for r in moji if r["id"] in kept]
    repaired = [r for r in kept_rows if _repaired(kept[r["id"]], r["_original"])]
    same = sum(_same_text(kept[r["id"]], r["_original"]) for r in repaired)
    return {"n": len(moji), "kept": len(kept_rows), "repaired_and_kept": len(repaired),
            "share": _share(len(repaired), len(moji)), "identical_to_original": same}


def verdicts(kinds: dict, moji: dict) -> dict:
    clean_n = sum(v["n"] for v in kinds.values() if v["clean"])
    out: dict = {}
    for name, removed_key in (("tokenmill", "tokenmill_removed"), ("datatrove", "datatrove_removed")):
        clean_kept = sum(v["n"] * (1 - v[removed_key]) for v in kinds.values() if v["clean"]) / clean_n
        junk = {k: v[removed_key] for k, v in kinds.items() if not v["clean"]}
        out[name] = {"clean_kept": round(clean_kept, 4),
                     "clean_kept_by_kind": {k: round(1 - v[removed_key], 4) for k, v in kinds.items() if v["clean"]},
                     "clean_kept_met": clean_kept >= TARGETS["clean_kept"],
                     "junk_kinds_met": sorted(k for k, s in junk.items() if s >= TARGETS["junk_removed"]),
                     "junk_kinds_missed": sorted(k for k, s in junk.items() if s < TARGETS["junk_removed"])}
    out["tokenmill"]["mojibake_repaired_kept"] = moji["share"]
    out["tokenmill"]["mojibake_met"] = (moji["share"] or 0) >= TARGETS["mojibake_repaired_kept"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=Path("/work/real_corpora"), help="Real corpora root.")
    ap.add_argument("--per-kind", type=int, default=300, help="Documents per kind.")
    ap.add_argument("--seed", type=int, default=41, help="Seed of the corpus build.")
    args = ap.parse_args()
    try:
        dt_version = importlib.metadata.version("datatrove")
    except importlib.metadata.PackageNotFoundError:
        print("datatrove is not installed: .venv/bin/pip install 'datatrove==0.10.1' orjson spacy", file=sys.stderr)
        return 2
    if not (args.corpora / "books").is_dir():
        print(f"{args.corpora}: not a real-corpora root (shared/corpora/fetch_real_corpora.sh)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows, _ = dirty_web.build(args.corpora, args.per_kind, args.seed)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="dirty-web-") as tmp:
        corpus = Path(tmp) / "dirty_web.jsonl"
        dirty_web.write_jsonl(rows, corpus)
        reference = Path(tmp) / "reference"
        dirty_web.write_reference(args.corpora, reference)
        curate_s = run_curate(corpus, Path(tmp) / "out", reference)
        kept, rejected = read_curated(Path(tmp) / "out")
    t0 = time.perf_counter()
    dt = run_datatrove(rows)
    dt_s = time.perf_counter() - t0
    kinds = per_kind(rows, kept, rejected, dt)
    moji = mojibake_repaired(rows, kept)
    print(f"{'kind':20s} {'n':>4s} {'tm rm%':>7s} {'dt rm%':>7s}  tokenmill by / datatrove by")
    for k, v in kinds.items():
        print(f"{k:20s} {v['n']:4d} {100 * v['tokenmill_removed']:7.1f} {100 * v['datatrove_removed']:7.1f}  "
              f"{v['tokenmill_by'][:2]} / {v['datatrove_by'][:2]}")
    result = {"corpora": str(args.corpora), "per_kind": args.per_kind, "seed": args.seed, "docs": len(rows),
              "datatrove_version": dt_version, "seconds": {"build": round(build_s, 1), "tokenmill_curate": round(curate_s, 1),
                                                           "datatrove_filters": round(dt_s, 1)},
              "targets": TARGETS, "kinds": kinds, "mojibake": moji, "verdicts": verdicts(kinds, moji)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
