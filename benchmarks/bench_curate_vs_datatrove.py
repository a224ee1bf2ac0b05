"""Curation per-document steps vs datatrove, single core, on real documentation HTML.

Three pipelines see the same pages, one page at a time, in a rotating order (A/B/C, B/C/A,
C/A/B, ...), so load on a shared machine hits all three alike:

  (a) datatrove default: Trafilatura extractor (favour_precision, deduplicate, its defaults)
      -> GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter -> FineWebQualityFilter
  (b) datatrove given tokenmill's extractor (resiliparse main content, trafilatura fallback)
      -> the same four filters
  (c) tokenmill: Extract -> Normalize -> Quality steps (Gopher quality + repetition, C4 and
      FineWeb rules, length floor), called in-process as the curate stage calls them

datatrove's extractor and filters are called directly (`extract(html)`, `filter(doc)`), as its
pipeline's `run` does, but without the per-document timeout sandbox process its extractors run
in: datatrove's best case. A filter stops a page at the first rule it breaks, as in a pipeline.
The process is pinned to one core (children inherit it) and numeric libraries to one thread:
documents/s here are documents/s per core. The first pages are a warm-up (spaCy's tokenizer,
trafilatura's caches), not timed.

Boilerplate that survives extraction is counted two ways on each pipeline's extracted text:
  markers      lines that are navigation or footer strings ("Table of Contents", "Previous
               topic", "Next", "Navigation", "Quick search", "Show Source", "© Copyright",
               "Created using Sphinx", DocBook "Prev"/"Up"/"Home", ...), exact or prefix match
  chrome       lines (with a letter or digit) that occur in the plain (no main-content
               detection) text of at least half of the benchmark's pages: site-wide chrome,
               whatever its wording

Smoke run (tiny, any machine):
    .venv/bin/python benchmarks/bench_curate_vs_datatrove.py --limit 30
Real run (quiet machine, all 444 python3.11-doc pages):
    .venv/bin/python benchmarks/bench_curate_vs_datatrove.py --json bench_curate.json
Needs `pip install datatrove spacy` (benchmark-only: datatrove's English word tokenizer is spaCy's).
"""

from __future__ import annotations

import os

# One thread everywhere, before numpy / spaCy load: per-core numbers.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

from resiliparse.extract.html2text import extract_plain_text  # noqa: E402

from tokenmill.config import CurateConfig  # noqa: E402
from tokenmill.data.document import Doc  # noqa: E402
from tokenmill.data.steps.extract import Extract, extract_main_text  # noqa: E402
from tokenmill.data.steps.normalize import Normalize  # noqa: E402
from tokenmill.data.steps.quality import Quality  # noqa: E402

DEFAULT_CORPUS = Path("/work/real_corpora/web_html/python3.11-doc")
WARMUP = 3

# --------------------------------------------------------------------------- boilerplate
NAV_EXACT = frozenset({
    "Table of Contents", "Previous topic", "Next topic", "This Page", "Report a Bug", "Show Source",
    "Navigation", "Quick search", "index", "modules |", "next |", "previous |",  # not bare
    "Prev", "Next", "Up", "Home", "Page source", "Download the ebook", "Logo",  # "modules": content
    "python logo", "Python »", "«", "»", "Go",
})
NAV_PREFIX = ("© Copyright", "Copyright ©", "©", "Last updated on", "Created using Sphinx",
              "Powered by Sphinx", "This page is licensed under", "Found a bug?", "Theme by",
              "The Python Software Foundation is a non-profit", "Product Site")
_NAV_NUMBERED = re.compile(r"(Prev|Next)\s*\d")  # DocBook "Prev5.5. Title" / "Next6.2. Title"
_BULLETS = "•*-·◦ \t"


def _lines(text: str) -> list[str]:
    return [s for s in (line.strip().lstrip(_BULLETS).strip() for line in text.split("\n")) if s]


def nav_markers(text: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for s in _lines(text):
        if s in NAV_EXACT:
            found[s] += 1
        elif s.startswith(NAV_PREFIX):
            found[s[:24]] += 1
        elif _NAV_NUMBERED.match(s):
            found["Prev/Next <section>"] += 1
    return found


def site_chrome(pages: list[str], share: float = 0.5) -> frozenset[str]:
    """Lines present in the plain text of at least `share` of the pages; lines without a letter
    or digit ("|", "»") are left out: content has them too (regex docs, ASCII diagrams)."""
    seen: Counter[str] = Counter()
    for html in pages:
        seen.update(set(_lines(extract_plain_text(html, main_content=False))))
    return frozenset(line for line, k in seen.items() if k >= share * len(pages) and re.search(r"\w", line))


# --------------------------------------------------------------------------- pipelines
@dataclass
class Tally:
    """What one pipeline did to the pages."""

    seconds: float = 0.0
    docs: int = 0
    kept: int = 0
    kept_chars: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    markers: Counter[str] = field(default_factory=Counter)
    chrome: int = 0
    stages: Counter[str] = field(default_factory=Counter)  # seconds per extractor / filter / step

    def add(self, seconds: float, extracted: str | None, outcome: str, final: str | None,
            chrome: frozenset[str]) -> None:
        self.seconds += seconds
        self.docs += 1
        self.outcomes[outcome] += 1
        if extracted:
            self.markers += nav_markers(extracted)
            self.chrome += sum(line in chrome for line in _lines(extracted))
        if outcome == "kept":
            self.kept += 1
            self.kept_chars += len(final or "")

    def summary(self) -> dict:
        return {"docs": self.docs, "seconds": round(self.seconds, 3),
                "docs_per_s": round(self.docs / self.seconds, 3) if self.seconds else None,
                "kept": self.kept, "kept_chars": self.kept_chars,
                "nav_markers": sum(self.markers.values()), "chrome_lines": self.chrome,
                "stage_ms_per_doc": {k: round(v / self.docs * 1e3, 3) for k, v in self.stages.items()},
                "top_markers": self.markers.most_common(8), "outcomes": dict(self.outcomes.most_common())}


# A pipeline maps one page to (extracted text or None, outcome, final text or None) and adds
# the seconds each of its stages took to a Counter.
Result = tuple[str | None, str, str | None]
Pipeline = Callable[[str, Counter], Result]


def datatrove_pipeline(extract: Callable[[str], str | None]) -> Pipeline:
    from datatrove.data import Document
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)

    filters = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]

    def run(html: str, stages: Counter) -> Result:
        t0 = time.perf_counter()
        try:
            text = extract(html)
        except Exception as exc:  # noqa: BLE001 - datatrove's run() counts and skips these
            return None, f"extract_error:{type(exc).__name__}", None
        finally:
            stages["extract"] += time.perf_counter() - t0
        if not text:
            return None, "extract:empty", None
        doc = Document(text=text, id="page")
        for f in filters:
            t0 = time.perf_counter()
            verdict = f.filter(doc)
            stages[type(f).__name__] += time.perf_counter() - t0
            if verdict is not True:
                return text, f"{f.name}:{verdict[1] if isinstance(verdict, tuple) else 'rejected'}", None
        return text, "kept", doc.text

    return run


def datatrove_default() -> Pipeline:
    from datatrove.pipeline.extractors import Trafilatura

    return datatrove_pipeline(Trafilatura().extract)


def datatrove_our_extractor() -> Pipeline:
    return datatrove_pipeline(extract_main_text)


def tokenmill_pipeline() -> Pipeline:
    cfg = CurateConfig()
    steps = [Extract(cfg), Normalize(cfg), Quality(cfg)]

    def run(html: str, stages: Counter) -> Result:
        doc = Doc(id="page", text=html, source="bench", url="", bucket="web", license="", format="html")
        extracted = None
        for step in steps:
            if not step.applies(doc):
                continue
            t0 = time.perf_counter()
            rejection = step.process(doc)
            stages[step.name] += time.perf_counter() - t0
            if step.name == "extract":
                extracted = doc.text if rejection is None else None
            if rejection is not None:
                return extracted, f"{rejection.step}:{rejection.rule}", None
        return extracted, "kept", doc.text

    return run


# --------------------------------------------------------------------------- the run
def load_pages(corpus: Path, limit: int | None) -> list[tuple[str, str]]:
    paths = sorted(corpus.rglob("*.html"))
    if limit:
        # Evenly spread over the sorted list, so a small run still mixes sections and index pages.
        step = max(1, len(paths) // limit)
        paths = paths[::step][:limit]
    return [(str(p.relative_to(corpus)), p.read_text(encoding="utf-8", errors="replace")) for p in paths]


def pin_to_one_core() -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for dist in ("datatrove", "trafilatura", "resiliparse", "spacy", "numpy", "ftfy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "-"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="Directory of .html pages.")
    ap.add_argument("--limit", type=int, default=None, help="Use this many pages, spread over the corpus.")
    ap.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    args = ap.parse_args()
    try:
        importlib.metadata.version("datatrove")
    except importlib.metadata.PackageNotFoundError:
        print("datatrove is not installed: .venv/bin/pip install datatrove spacy", file=sys.stderr)
        return 2
    if not args.corpus.is_dir():
        print(f"{args.corpus}: no such directory (shared/corpora/fetch_real_corpora.sh)", file=sys.stderr)
        return 2
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    cpu = pin_to_one_core()
    pages = load_pages(args.corpus, args.limit)
    html_bytes = sum(len(h.encode("utf-8")) for _, h in pages)
    chrome = site_chrome([h for _, h in pages])
    pipelines = {"datatrove_default": datatrove_default(),
                 "datatrove_our_extractor": datatrove_our_extractor(),
                 "tokenmill": tokenmill_pipeline()}
    names = list(pipelines)
    for _, html in pages[:WARMUP]:
        for run in pipelines.values():
            run(html, Counter())
    tallies = {name: Tally() for name in names}
    for i, (_, html) in enumerate(pages):
        for name in names[i % 3:] + names[: i % 3]:  # rotate who goes first
            t0 = time.perf_counter()
            extracted, outcome, final = pipelines[name](html, tallies[name].stages)
            tallies[name].add(time.perf_counter() - t0, extracted, outcome, final, chrome)

    rate = {n: t.docs / t.seconds for n, t in tallies.items()}
    result = {
        "corpus": str(args.corpus), "pages": len(pages), "html_mb": round(html_bytes / 1e6, 2),
        "cpu": cpu, "versions": versions(), "chrome_lines_defined": sorted(chrome),
        "pipelines": {n: t.summary() for n, t in tallies.items()},
        "speedup_vs_datatrove_default": round(rate["tokenmill"] / rate["datatrove_default"], 2),
        "speedup_vs_datatrove_same_extractor": round(rate["tokenmill"] / rate["datatrove_our_extractor"], 2),
    }
    print(f"{len(pages)} pages, {result['html_mb']} MB of HTML, pinned to cpu {cpu}; "
          f"{len(chrome)} site-chrome lines; versions {result['versions']}")
    print(f"{'pipeline':26s} {'docs/s':>8s} {'kept':>5s} {'markers':>8s} {'chrome':>7s}  top outcomes")
    for n, t in tallies.items():
        print(f"{n:26s} {rate[n]:8.2f} {t.kept:5d} {sum(t.markers.values()):8d} {t.chrome:7d}  "
              f"{t.outcomes.most_common(4)}")
        print(f"{'':26s} ms/doc by stage: {result['pipelines'][n]['stage_ms_per_doc']}")
    print(f"tokenmill / datatrove default:        {result['speedup_vs_datatrove_default']:.2f}x (target >= 10)")
    print(f"tokenmill / datatrove same extractor: {result['speedup_vs_datatrove_same_extractor']:.2f}x (target >= 3)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
