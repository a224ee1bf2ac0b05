"""The design side of the garbled-word cut (issue 55): near_miss_word_frac on clean text only.

The cut `quality.max_near_miss_word_frac` was set from this distribution, never from a corrupted
text: every HTML page of the design collections of benchmarks/frozen/docs_kept.json (the Python
docs, the Debian handbook in 23 languages, the i386 installation guide, the Debian history,
trafilatura's test pages) through tokenmill's extractor; the dirty-web benchmark's clean prose and
documentation (its design pools, benchmarks/dirty_web.py, seed 41, 150 per kind); and 200 passages
of 1,500-6,000 characters each of the World English Bible, Austen and Spurgeon (ascending sha256
of "path#k"). All are design collections of benchmarks/frozen/quality_signal.json.

    .venv/bin/python benchmarks/record.py benchmarks/results/design_garble_cut.json --result /tmp/g.json -- \\
        benchmarks/design_garble_cut.py --corpora ../real_corpora --json /tmp/g.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

HTML = ("web_html/python3.11-doc", "web_html/debian-handbook", "web_html/installation-guide-i386",
        "web_html/debian-history", "web_html/trafilatura-tests")
BOOKS = ("books/bible-en-web", "books/austen", "books/spurgeon-treasury-of-david")
PER_BOOK_COLLECTION = 200
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def passages(path: Path, lo: int = 1500, hi: int = 6000) -> list[str]:
    """Runs of blank-line paragraphs of lo-hi characters, in order."""
    paras = [p for p in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace")) if p.strip()]
    out, cur, n = [], [], 0
    for p in paras:
        cur.append(p)
        n += len(p)
        if n >= lo:
            if n <= hi:
                out.append("\n\n".join(cur))
            cur, n = [], 0
    return out


def texts(corpora: Path) -> list[tuple[str, str]]:
    """(name, text) of every clean design document."""
    import dirty_web
    from tokenmill.data.steps.extract import extract

    out = []
    for coll in HTML:
        for page in sorted((corpora / coll).rglob("*.htm*")):
            text, _ = extract(page.read_text(encoding="utf-8", errors="replace"))
            if text:
                out.append((str(page.relative_to(corpora)), text))
    rows, _ = dirty_web.build(corpora, per_kind=150, seed=41)
    out += [(r["id"], r["text"]) for r in rows if r["clean"] and r["kind"] != "mojibake"]
    for coll in BOOKS:
        files = sorted((corpora / coll).glob("*.txt"))
        cut = [(hashlib.sha256(f"{f.relative_to(corpora)}#{k}".encode()).hexdigest(), p)
               for f in files for k, p in enumerate(passages(f))]
        out += [(f"{coll}#{h[:8]}", p) for h, p in sorted(cut)[:PER_BOOK_COLLECTION]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from tokenmill.data.config import QualityConfig
    from tokenmill.data.steps.garble import near_miss_word_frac

    values = sorted(((near_miss_word_frac(t.split()), name) for name, t in texts(args.corpora.resolve())), reverse=True)
    xs = sorted(v for v, _ in values)
    result = {"documents": len(xs), "cut": QualityConfig().max_near_miss_word_frac,
              "quantiles": {str(q): round(xs[int(q * (len(xs) - 1))], 4) for q in QUANTILES},
              "largest": [{"value": round(v, 4), "document": n} for v, n in values[:10]],
              "above_cut": sum(v > QualityConfig().max_near_miss_word_frac for v in xs)}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
