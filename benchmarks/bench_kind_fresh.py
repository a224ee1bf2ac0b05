"""The kind detector scored on collections its design never read, under the frozen rule of
benchmarks/frozen/kind_detect_fresh.json (committed before this scorer first ran).

Rows: man pages in 15 languages (whole pages, roff rendered) and three dictionaries (pages of
consecutive entries). Every document is fed to the detector as a JSONL record would be, after
normalize_text, with no kind declared; each row's share detected as `reference` is reported with
its 95% Wilson interval, the other kinds' counts, and the frozen rule's checks.

    .venv/bin/python benchmarks/record.py benchmarks/results/kind_detect_fresh.json -- \\
        benchmarks/bench_kind_fresh.py --corpora /work/real_corpora
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
from bench_quality_signal import cut_passages, render_roff  # noqa: E402

from tokenmill.data.steps.kind_detect import detect_kind  # noqa: E402
from tokenmill.data.steps.normalize import normalize_text  # noqa: E402

FROZEN = HERE / "frozen" / "kind_detect_fresh.json"
PER_ROW = 60
MIN_PAGE_CHARS = 500


def _sha(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def man_row(corpora: Path, lang: str) -> list[str]:
    """The language's man pages rendered whole (>= 500 characters), the first 60 by path hash."""
    root = corpora / "reference/manpages" / lang
    pages = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: _sha(str(p.relative_to(corpora))))
    out = []
    for page in pages:
        text = render_roff(page.read_text(encoding="utf-8", errors="replace"))
        if len(text) >= MIN_PAGE_CHARS:
            out.append(text)
        if len(out) == PER_ROW:
            break
    return out


def dict_row(corpora: Path, name: str) -> list[str]:
    """The dictionary cut into 2,000-6,000-character pages of entries, the first 60 by hash."""
    folder = corpora / "reference/dictd" / name
    path = folder / f"{name}.dict.gz" if name == "gcide" else folder / f"{name}.dict"
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    rel = str(path.relative_to(corpora))
    pages = cut_passages(raw.decode("utf-8", errors="replace"), 2000, 6000)
    order = sorted(range(len(pages)), key=lambda i: _sha(f"{rel}#{i}"))
    return [pages[i] for i in order[:PER_ROW]]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    mid, half = p + z * z / (2 * n), z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5
    return (round((mid - half) / (1 + z * z / n), 4), round((mid + half) / (1 + z * z / n), 4))


def score_row(texts: list[str]) -> dict[str, Any]:
    kinds = Counter(detect_kind(normalize_text(t), "jsonl")[0] for t in texts)
    n, k = len(texts), kinds["reference"]
    return {"n": n, "reference": round(k / n, 4) if n else None, "interval": wilson(k, n), "kinds": dict(kinds)}


def checks(rows: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """The frozen rule: every row >= 0.95 reference; every man-page language within 0.10 of English."""
    out = {f"{row} >= 0.95": (r["reference"] or 0) >= 0.95 for row, r in rows.items()}
    english = rows["man:en"]["reference"] or 0
    for row, r in rows.items():
        if row.startswith("man:") and row != "man:en":
            out[f"{row} within 0.10 of man:en"] = english - (r["reference"] or 0) <= 0.10
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=Path("/work/real_corpora"), help="Real corpora root.")
    args = ap.parse_args()
    if not (args.corpora / "reference/manpages").is_dir():
        print(f"{args.corpora}: not a real-corpora root (no reference/manpages)", file=sys.stderr)
        return 2
    frozen = json.loads(FROZEN.read_text())["evaluation"]["rows"]
    t0 = time.perf_counter()
    rows = {f"man:{lang}": score_row(man_row(args.corpora, lang)) for lang in frozen["man:<lang>"]["languages"]}
    rows |= {f"dict:{name}": score_row(dict_row(args.corpora, name)) for name in frozen["dict:<name>"]["names"]}
    held = checks(rows)
    result = {"benchmark": "kind_detect_fresh", "frozen": str(FROZEN.relative_to(HERE.parent)), "rows": rows,
              "checks": held, "checks_met": sum(held.values()), "checks_total": len(held),
              "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
