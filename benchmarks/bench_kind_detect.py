"""The kind detector (src/tokenmill/data/steps/kind_detect.py) on labelled real documents.

Labels come from where a document is in the real corpora (no download), and each document is
the text curate's quality step would see (HTML through tokenmill's own extractor):

  web        the pages of web_html/trafilatura-tests and the HTML records of web_warc (their
             extracted main text), and four kinds of web junk of benchmarks/dirty_web.py built
             from real page chrome, anchors and words (boilerplate_only, link_list, tag_cloud,
             shop_template): junk is not a kind, it must come out web so the web rules judge it
  reference  documentation pages of web_html (python3.11-doc, debian-reference, maint-guide,
             developers-reference, installation-guide-amd64, linux-doc, debian-handbook; index
             pages left out), their extracted main text; and reference/doc-sources: every .rst
             file and the plain-text manuals (.txt) cut into sections of <= 20,000 characters
  books      every file of books/* as it is (hard-wrapped Austen, verse-per-line Bibles, Markdown
             Shakespeare, paragraph-per-line Spurgeon, the founding documents)
  prose      passages of 2,500-6,000 characters of the same books with every paragraph joined
             onto one line, as a scraper's JSONL carries them (paragraphs split by a blank line or
             by one newline, alternately)
  code       files of code/* (C, JavaScript, Perl, Python, TypeScript), up to --per-group each

Every document's path (or path and section / passage number) is hashed: the thresholds of the
detector were designed on the documents whose hash is even (`--half design`) and the accuracy
reported is on the others (`--half heldout`, the default). The result (confusion matrix,
per-kind accuracy, per-group accuracy, detection time; and every document labelled reference
judged whole as a web page, a manual and prose: what each kind's rules remove of real manuals)
is printed as JSON last
(benchmarks/record.py records it).

    .venv/bin/python benchmarks/record.py benchmarks/results/kind_detect.json -- \\
        benchmarks/bench_kind_detect.py --corpora /work/real_corpora
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import xxhash

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
import dirty_web  # noqa: E402

from tokenmill.data.steps.extract import extract_main_text  # noqa: E402
from tokenmill.data.steps.kind_detect import detect_kind  # noqa: E402
from tokenmill.data.steps.normalize import normalize_text  # noqa: E402
from tokenmill.data.readers.base import RecordMaker  # noqa: E402
from tokenmill.data.readers.warc import WarcReader  # noqa: E402
from tokenmill.data.config import SourceConfig  # noqa: E402

KINDS = ("web", "reference", "prose", "books", "code")
DOC_SITES = ("python3.11-doc", "debian-reference", "maint-guide", "developers-reference",
             "installation-guide-amd64", "linux-doc", "debian-handbook")
WEB_JUNK = ("boilerplate_only", "link_list", "tag_cloud", "shop_template")
SECTION_CHARS = 20_000
FORMAT = "jsonl"  # every document as a JSONL record carries it: the format says nothing of its kind
# Confusions that cost little: the two kinds' rule families differ by one exemption or unit.
ACCEPTABLE = {
    # Costly, so not listed: reference <-> web (a manual judged by FineWeb loses most pages, a page
    # judged as a manual escapes FineWeb) and reference -> prose (Gopher's duplicated n-grams).
    ("prose", "reference"): "clean prose keeps its sentences (C4's five) and escapes only the duplicated 5-10-gram rules",
    ("books", "prose"): "a short book is judged whole (max_words, all n-gram rules), not per 5,000 words",
    ("prose", "books"): "a passage escapes max_words and the duplicated 5-10-gram rules",
}


def half(key: str) -> str:
    return "design" if xxhash.xxh64_intdigest(key.encode()) % 2 == 0 else "heldout"


def _sample(paths: list[Path], n: int, seed: str) -> list[Path]:
    return sorted(random.Random(seed).sample(paths, n)) if len(paths) > n else paths


def web_docs(corpora: Path) -> Iterator[tuple[str, str, str, str]]:
    """(label, group, key, text) of the web pages and WARC records, extracted."""
    for page in sorted((corpora / "web_html/trafilatura-tests").glob("*.html")):
        text = extract_main_text(page.read_text(encoding="utf-8", errors="replace"))
        if text:
            yield "web", "trafilatura-tests", str(page.relative_to(corpora)), text
    make = RecordMaker("warc", SourceConfig(path=str(corpora), bucket="web"))
    for warc in sorted((corpora / "web_warc").rglob("*.warc*")):
        try:
            records = list(WarcReader().read(make, warc, warc.name, 10 << 20))
        except Exception:  # noqa: BLE001 - a broken sample archive holds no labelled page
            continue
        for r in records:
            text = extract_main_text(r.text) if r.text and r.format == "html" else r.text
            if text:
                yield "web", "web_warc", f"{warc.relative_to(corpora)}:{r.locator}", text
    m = dirty_web.Material(corpora)
    rng = random.Random(41)
    for kind in WEB_JUNK:
        for i in range(60):
            yield "web", f"junk:{kind}", f"junk:{kind}:{i}", dirty_web.JUNK[kind](m, rng)


def reference_docs(corpora: Path, per_group: int) -> Iterator[tuple[str, str, str, str]]:
    for site in DOC_SITES:
        pages = [p for p in (corpora / "web_html" / site).rglob("*.html")
                 if not re.search(r"genindex|modindex|search\.html|/translations/", str(p))]
        for page in _sample(sorted(pages), per_group, site):
            text = extract_main_text(page.read_text(encoding="utf-8", errors="replace"))
            if text and len(text) >= 200:
                yield "reference", f"html:{site}", str(page.relative_to(corpora)), text
    src = corpora / "reference/doc-sources"
    rst = sorted(src.rglob("*.rst"))
    for f in _sample(rst, 2 * per_group, "rst"):
        text = f.read_text(encoding="utf-8", errors="replace")
        if len(text) >= 200:
            yield "reference", "rst", str(f.relative_to(corpora)), text[:SECTION_CHARS]
    for f in sorted(src.rglob("*.txt")):
        text = f.read_text(encoding="utf-8", errors="replace")
        for i, section in enumerate(_sections(text)):
            yield "reference", "txt:" + f.parent.name, f"{f.relative_to(corpora)}#{i}", section


def _sections(text: str) -> Iterator[str]:
    """Consecutive paragraphs up to SECTION_CHARS (a manual cut into chapter-sized parts)."""
    buf: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        if buf and sum(map(len, buf)) + len(para) > SECTION_CHARS:
            yield "\n\n".join(buf)
            buf = []
        buf.append(para)
    if buf and sum(map(len, buf)) >= 500:
        yield "\n\n".join(buf)


def book_docs(corpora: Path) -> Iterator[tuple[str, str, str, str]]:
    """Every book file as it is (books), and paragraph-per-line passages of it (prose)."""
    for f in sorted((corpora / "books").rglob("*")):
        if not f.is_file() or f.suffix not in (".txt", ".md"):
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        group = f.relative_to(corpora / "books").parts[0]
        key = str(f.relative_to(corpora))
        yield "books", group, key, text
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
        for i, passage in enumerate(_passages(paragraphs)):
            if i % 7 == 0:  # a sample: a Bible book alone makes dozens
                yield "prose", group, f"{key}@{i}", ("\n\n" if i % 2 else "\n").join(passage)


def _passages(paragraphs: list[str]) -> Iterator[list[str]]:
    buf: list[str] = []
    for p in paragraphs:
        buf.append(p)
        if sum(map(len, buf)) >= 2500:
            if sum(map(len, buf)) <= 6000:
                yield buf
            buf = []


def code_docs(corpora: Path, per_group: int) -> Iterator[tuple[str, str, str, str]]:
    for lang in sorted(p.name for p in (corpora / "code").iterdir()):
        files = sorted(f for f in (corpora / "code" / lang).rglob("*") if f.is_file() and f.stat().st_size >= 200)
        for f in _sample(files, per_group, lang):
            yield "code", lang, str(f.relative_to(corpora)), f.read_text(encoding="utf-8", errors="replace")


def labelled(corpora: Path, per_group: int) -> list[tuple[str, str, str, str]]:
    docs = [*web_docs(corpora), *reference_docs(corpora, per_group), *book_docs(corpora),
            *code_docs(corpora, per_group)]
    # as curate's quality step sees it: normalized (code keeps its spacing)
    return [(label, group, key, normalize_text(text, code=label == "code")) for label, group, key, text in docs]


def evaluate(docs: list[tuple[str, str, str, str]], which: str) -> dict:
    confusion = {k: Counter() for k in KINDS}
    groups: dict[str, Counter] = {}
    slowest, t_all = 0.0, 0.0
    for label, group, key, text in docs:
        if half(key) != which:
            continue
        t0 = time.perf_counter()
        kind, _evidence = detect_kind(text, FORMAT)
        dt = time.perf_counter() - t0
        t_all, slowest = t_all + dt, max(slowest, dt)
        confusion[label][kind] += 1
        groups.setdefault(f"{label}:{group}", Counter())[kind] += 1
    per_kind = {}
    for k in KINDS:
        n = sum(confusion[k].values())
        ok = confusion[k][k]
        cheap = sum(v for (t, p), v in ((( k, p), confusion[k][p]) for p in KINDS) if (t, p) in ACCEPTABLE)
        per_kind[k] = {"n": n, "accuracy": round(ok / n, 4) if n else None,
                       "acceptable": round((ok + cheap) / n, 4) if n else None}
    return {"half": which, "docs": sum(sum(c.values()) for c in confusion.values()),
            "confusion": {k: dict(confusion[k]) for k in KINDS}, "per_kind": per_kind,
            "groups": {g: dict(c) for g, c in sorted(groups.items())},
            "detect_ms": {"mean": round(1000 * t_all / max(1, sum(sum(c.values()) for c in confusion.values())), 3),
                          "max": round(1000 * slowest, 2)}}


def manual_rules(docs: list[tuple[str, str, str, str]]) -> dict:
    """The documents labelled reference, judged whole as each kind would judge them (their
    language from tokenmill's langid): the share any rule removes, and the share each rule
    breaks (every broken rule counted, not only the first) — why manuals get their own family."""
    from tokenmill.config import CurateConfig
    from tokenmill.data.steps.langid import Identifier
    from tokenmill.data.steps.quality import Quality, failed_rules, measure

    step, ident = Quality(CurateConfig()), Identifier()
    step.setup(None)
    manuals = [text for label, _, _, text in docs if label == "reference"]
    out: dict = {"docs": len(manuals)}
    for kind in ("web", "reference", "prose"):
        removed, rules = 0, Counter()
        for text in manuals:
            judge = step.judge(ident.identify(text)[0], kind)
            broken = set(failed_rules(measure(text, rules=judge.rules, book=judge.book)[0], judge.cfg, judge.apply))
            removed += bool(broken)
            rules.update(broken)
        out[kind] = {"removed": round(removed / len(manuals), 4),
                     "rules": {r: round(n / len(manuals), 4) for r, n in rules.most_common(6)}}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=Path("/work/real_corpora"), help="Real corpora root.")
    ap.add_argument("--per-group", type=int, default=80, help="Documents per code language / documentation site.")
    ap.add_argument("--half", choices=("design", "heldout"), default="heldout", help="Which half to measure.")
    ap.add_argument("--errors", type=int, default=0, help="Print this many misdetected documents per kind.")
    args = ap.parse_args()
    if not (args.corpora / "books").is_dir():
        print(f"{args.corpora}: not a real-corpora root (shared/corpora/fetch_real_corpora.sh)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    docs = labelled(args.corpora, args.per_group)
    build_s = time.perf_counter() - t0
    result = evaluate(docs, args.half)
    if args.errors:
        shown: Counter = Counter()
        for label, group, key, text in docs:
            if half(key) == args.half and shown[label] < args.errors:
                kind, ev = detect_kind(text, FORMAT)
                if kind != label:
                    shown[label] += 1
                    print(f"{label} -> {kind}  {key}  {ev}", file=sys.stderr)
    result = {"corpora": str(args.corpora), "per_group": args.per_group, "build_s": round(build_s, 1),
              "acceptable_confusions": {f"{t}->{p}": why for (t, p), why in ACCEPTABLE.items()}, **result,
              "manual_rules": manual_rules(docs)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
