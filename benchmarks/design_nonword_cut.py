"""The design side of the non-word cut (issue 55): nonword_frac on clean text only.

The cut `model_quality.max_nonword_frac` is set from this distribution, never from a corrupted
text (benchmarks/frozen/quality_signal3.json forbids reading one while designing). The LM is the
one the step trains on quality_signal3.json's reference (design collections: the Python docs, the
Debian handbook in five languages, Austen, Spurgeon). The clean text is design text the reference
does not hold: the clean documents of the two spent quality-signal judgements (Shakespeare, two
Bibles, man pages in four languages, GIMP's manual in four, LilyPond's documentation in four;
FocaLinux left out, its accents lost to a wrong decoding), and up to PER_COLLECTION pages (ascending sha256 of their path) of each
design HTML collection below, through tokenmill's extractor. Only documents in a language the gate
judges are measured, as in the step.

    PYTHONPATH=src .venv/bin/python benchmarks/record.py benchmarks/results/design_nonword_cut.json --result /tmp/nw.json -- \\
        benchmarks/design_nonword_cut.py --corpora /work/real_corpora --fresh-root /work --work /tmp/nw --json /tmp/nw.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_quality_signal as qs  # noqa: E402

from tokenmill.config import CurateConfig  # noqa: E402
from tokenmill.data.classifiers import ngram_lm  # noqa: E402
from tokenmill.data.classifiers.nonwords import COMMON_WORDS, NearWords  # noqa: E402
from tokenmill.data.steps import model_quality as mq  # noqa: E402
from tokenmill.data.steps.extract import extract  # noqa: E402
from tokenmill.data.steps.langid import Identifier  # noqa: E402

FROZEN = Path(__file__).resolve().parent / "frozen"
PER_COLLECTION = 200
HTML = {  # collection -> (root name, folder): the real corpora, or a spent fetched set under --fresh-root
    "installation-guide-i386": ("corpora", "web_html/installation-guide-i386"),
    "developers-reference": ("corpora", "web_html/developers-reference"),
    "debian-reference": ("corpora", "web_html/debian-reference"),
    "debian-history": ("corpora", "web_html/debian-history"),
    "maint-guide": ("corpora", "web_html/maint-guide"),
    "linux-doc": ("corpora", "web_html/linux-doc"),
    "trafilatura-tests": ("corpora", "web_html/trafilatura-tests"),
    "postgresql": ("fresh_corpora", "web_html/postgresql-doc-15"),
    "apache": ("fresh_corpora", "web_html/apache2-doc"),
    "django": ("fresh_corpora_2", "web_html/python-django-doc"),
    "harden-doc": ("fresh_corpora_2", "web_html/harden-doc"),
    "rust-book": ("fresh_corpora_3", "web_html/rust-doc/book"),
    "pandas": ("fresh_corpora_3", "web_html/python-pandas-doc"),
    "java-base": ("fresh_corpora_4", "web_html/openjdk-doc/java.base"),
    "erlang": ("fresh_corpora_4", "web_html/erlang-doc"),
    "gtk3": ("fresh_corpora_4", "web_html/gtk3-doc"),
}
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def train_lm(corpora: Path, work: Path) -> tuple[ngram_lm.NgramLM, set[str]]:
    """The step's LM and judged languages on quality_signal3.json's reference."""
    frozen = json.loads((FROZEN / "quality_signal3.json").read_text())
    ref = qs.build_reference(corpora, frozen["reference"], frozen["evaluation"]["cutting"], work / "reference.jsonl")
    cfg = CurateConfig.model_validate({"sources": [{"path": str(work), "bucket": "x"}],
                                       "model_quality": {"reference": ref["path"], "classifier": False, "tier_perplexities": [1.0, 2.0]}})
    step = mq.ModelQuality(cfg)
    step.prepare(work / "mq")
    step.setup(work / "mq")
    assert step.lm is not None
    return step.lm, step.judged_languages


def clean_texts(corpora: Path, fresh_root: Path) -> dict[str, list[str]]:
    """Collection -> its clean design texts."""
    out: dict[str, list[str]] = defaultdict(list)
    sets = (("quality_signal.json", None), ("quality_signal2.json", fresh_root / "fresh_text_1"),
            ("quality_signal3.json", fresh_root / "fresh_text_2"))
    for name, fresh in sets:
        frozen = json.loads((FROZEN / name).read_text())
        for d in qs.build_set(corpora, frozen["evaluation"], fresh):
            if d["kind"] == "clean" and d["row"] != "focalinux":
                out[d["row"]].append(d["text"])
    for coll, (root_name, folder) in HTML.items():
        root = corpora if root_name == "corpora" else fresh_root / root_name
        pages = sorted((p for p in (root / folder).rglob("*.html") if p.is_file()),
                       key=lambda p: hashlib.sha256(str(p.relative_to(root)).encode()).hexdigest())[:PER_COLLECTION]
        for p in pages:
            text = extract(p.read_text(encoding="utf-8", errors="replace"))[0]
            if text:
                out[coll].append(text)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--fresh-root", type=Path, required=True, help="the folder holding fresh_corpora*, fresh_text_1")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--common", type=int, default=COMMON_WORDS, help="near one of the LM's this many commonest words")
    args = ap.parse_args()
    lm, judged = train_lm(args.corpora.resolve(), args.work.resolve())
    near, ident = NearWords(lm, args.common), Identifier()
    per: dict[str, list[float]] = {}
    worst: list[tuple[float, str, str]] = []
    for coll, texts in clean_texts(args.corpora.resolve(), args.fresh_root.resolve()).items():
        values = []
        for t in texts:
            lang = ident.identify(t)[0]
            if lang not in judged or (v := near.frac(ngram_lm.tokenize(t))) is None:
                continue
            values.append(v)
            worst.append((v, coll, t[:160].replace("\n", " | ")))
        per[coll] = sorted(values)
    every = sorted(v for vs in per.values() for v in vs)

    def q(vs: list[float]) -> dict[str, float]:
        return {f"q{p}": round(vs[min(len(vs) - 1, int(p * len(vs)))], 4) for p in QUANTILES} | {"max": round(vs[-1], 4)}

    result = {"common_words": args.common, "judged_languages": sorted(judged), "documents": len(every), "all": q(every),
              "collections": {c: {"documents": len(v), **q(v)} for c, v in per.items() if v},
              "largest": [{"value": round(v, 4), "collection": c, "start": s} for v, c, s in sorted(worst, reverse=True)[:10]]}
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
