"""Quality rules across languages and kinds of text, before and after per-language profiles (issue 27).

    .venv/bin/python benchmarks/record.py benchmarks/results/quality_languages.json -- \\
        benchmarks/bench_quality_languages.py --corpora ../real_corpora [--write-profiles]

Data (`shared/corpora/fetch_real_corpora.sh`): the Debian Administrator's Handbook (23
languages), the Debian Reference (11) and the installation guide for amd64 (12), every page
extracted and normalized by tokenmill. A page counts under the language its directory names
(zh-cn and zh-tw: zh; pt-br: pt) and only when lid.176 agrees: an untranslated page (English
text under /de/) is counted and left out.

- Calibration: the handbook pages whose file name hashes even (xxh64) give the shipped
  profiles (`--write-profiles` rewrites src/tokenmill/data/steps/resources/language_profiles.json).
- Held out: the handbook's other half, the Reference and the installation guide. Keep rate per
  language with the old rules (English rules for every language: `language_rules=false`) and
  the new ones, for the web kind (the default for HTML) and the reference kind.
- Low quality: a page whose body text is at least half link text (a table of contents, an index,
  a navigation page: link density measured on the HTML, independent of every quality rule).
- Books: each book of books/ (Austen, the King James and World English Bibles, Shakespeare,
  Spurgeon, the US founding documents) through normalize + quality as `format: text`, declared
  `books` against the old default: share of characters kept (each book's language from its
  directory: Spanish for bible-es-*, English for the rest; langid agrees on all of them).
- Code: the code rules on every file of code/ (C headers, JavaScript, Perl, Python): kept per
  language, removed by rule, examples.
- Segmentation: ms per document of measuring Chinese and Japanese pages with and without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import lxml.html
import xxhash

from tokenmill.data.steps.code_quality import check_code, code_signals
from tokenmill.data.config import CurateConfig
from tokenmill.data.curate_eval import eval_quality
from tokenmill.data.steps.extract import extract
from tokenmill.data.steps.langid import Identifier
from tokenmill.data.steps.language_calibration import calibrate, justext_stoplists, write_profiles
from tokenmill.data.steps.language_profiles import SHIPPED
from tokenmill.data.steps.normalize import normalize_text, unwrap_paragraphs
from tokenmill.data.steps.quality import Quality, check_min_chars, check_rules, measure

SITES = ("debian-handbook", "debian-reference", "installation-guide-amd64")
LANG_DIRS = {"zh-cn": "zh", "zh-tw": "zh", "pt-br": "pt", "nb": "no"}
LINK_DENSITY = 0.5


def link_density(html: str) -> float:
    """Characters of link text / characters of body text."""
    try:
        root = lxml.html.fromstring(html)
    except (ValueError, lxml.etree.ParserError):
        return 0.0
    body = root.find("body")
    body = body if body is not None else root
    total = len("".join(body.itertext()).split())
    links = sum(len("".join(a.itertext()).split()) for a in body.iter("a"))
    return links / total if total else 1.0


def pages(corpora: Path, ident: Identifier) -> tuple[list[dict], Counter]:
    out, skipped = [], Counter()
    for site in SITES:
        for lang_dir in sorted((corpora / "web_html" / site).iterdir()):
            lang = LANG_DIRS.get(lang_dir.name, lang_dir.name)
            for f in sorted(lang_dir.rglob("*.htm*")):
                html = f.read_bytes().decode("utf-8", "replace")
                text, _ = extract(html)
                if not text:
                    skipped[f"{site}/{lang}: no text"] += 1
                    continue
                text = normalize_text(text)
                found, _ = ident.identify(text)
                if found != lang:
                    skipped[f"{lang} page identified as {found}"] += 1
                    continue
                name = str(f.relative_to(lang_dir))
                out.append({"site": site, "language": lang, "group": f"{site}/{name}", "text": text,
                            "calibration": site == SITES[0] and xxhash.xxh64_intdigest(name.encode()) % 2 == 0,
                            "low_quality": link_density(html) >= LINK_DENSITY})
    return out, skipped


def keep_rates(docs: list[dict], cfg: CurateConfig, kind: str, tmp: Path, tag: str) -> dict:
    path = tmp / f"{tag}.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d["text"], "language": d["language"], "group": d["group"], "kind": kind,
                                "low_quality": d["low_quality"]}, ensure_ascii=False) + "\n")
    out = eval_quality(path, cfg)
    out.pop("file")
    return out


def books(corpora: Path) -> dict:
    out = {}
    for label, kind in (("before (old default: text read as web, English rules)", "web"),
                        ("after (declared books)", "books")):
        cfg = CurateConfig(quality={"kinds": {"books": kind}})
        step = Quality(cfg)
        step.setup(None)
        rows = []
        for f in sorted((corpora / "books").rglob("*.txt")):
            text = normalize_text(f.read_text(encoding="utf-8", errors="replace"))
            if kind == "books":
                text = unwrap_paragraphs(text)
            judge = step.judge("en" if "-es-" not in str(f) else "es", kind)
            s, _ = measure(text, rules=judge.rules, book=judge.book)
            rej = check_min_chars(len(text), judge.rules.min_chars(cfg.min_chars)) or check_rules(s, judge.cfg, judge.apply)
            rows.append({"file": str(f.relative_to(corpora)), "chars": len(text),
                         "removed_by": None if rej is None else rej.rule})
        chars = sum(r["chars"] for r in rows)
        out[label] = {"files": len(rows), "kept_files": sum(r["removed_by"] is None for r in rows),
                      "kept_char_share": sum(r["chars"] for r in rows if r["removed_by"] is None) / chars,
                      "removed": {r["file"]: r["removed_by"] for r in rows if r["removed_by"]}}
    return out


def code(corpora: Path) -> dict:
    out = {}
    for lang_dir in sorted((corpora / "code").iterdir()):
        kept, rules, examples = 0, Counter(), defaultdict(list)
        files = [f for f in sorted(lang_dir.rglob("*")) if f.is_file()]
        for f in files:
            text = f.read_bytes().decode("utf-8", "replace")
            rej = check_code(code_signals(text))
            if rej is None:
                kept += 1
            else:
                rules[rej.rule] += 1
                if len(examples[rej.rule]) < 3:
                    examples[rej.rule].append(str(f.relative_to(corpora)))
        out[lang_dir.name] = {"files": len(files), "kept": kept, "removed_by": dict(rules), "examples": dict(examples)}
    return out


def segmentation_ms(docs: list[dict]) -> dict:
    step = Quality(CurateConfig())
    step.setup(None)
    out = {}
    for lang in ("zh", "ja", "en"):
        texts = [d["text"] for d in docs if d["language"] == lang][:60]
        if not texts:
            continue
        timings = {}
        for label, rules in (("whitespace words", step.judge("en", "web").rules), ("own profile", step.judge(lang, "web").rules)):
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                for t in texts:
                    measure(t, rules=rules)
                runs.append((time.perf_counter() - t0) / len(texts) * 1000)
            timings[label] = statistics.median(runs)
        out[lang] = {"docs": len(texts), "mean_chars": statistics.mean(map(len, texts)), "ms_per_doc": timings}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, default=Path("../real_corpora"))
    ap.add_argument("--write-profiles", action="store_true", help="Rewrite the shipped profiles from the calibration half.")
    ap.add_argument("--json", type=Path, help="Also write the results here (record.py adds provenance).")
    args = ap.parse_args()
    t0 = time.perf_counter()
    docs, skipped = pages(args.corpora, Identifier())
    print(f"{len(docs)} pages in {time.perf_counter() - t0:.0f} s; left out: {sum(skipped.values())}", file=sys.stderr)
    calib = defaultdict(list)
    for d in docs:
        if d["calibration"]:
            calib[d["language"]].append(d["text"])
    profiles = calibrate(dict(calib), justext_stoplists())
    if args.write_profiles:
        write_profiles(profiles, SHIPPED, source="debian-handbook (fetch_real_corpora.sh web_html/debian-handbook), "
                       "pages whose file name's xxh64 is even, extracted and normalized by tokenmill, "
                       "kept when lid.176 agrees with the directory's language")
    held = [d for d in docs if not d["calibration"]]
    result: dict = {"pages": len(docs), "left_out": dict(skipped), "calibration_pages": sum(map(len, calib.values())),
                    "held_out_pages": len(held), "link_density_low_quality": LINK_DENSITY,
                    "profiles": {k: p.model_dump() for k, p in profiles.items()}}
    with tempfile.TemporaryDirectory() as tmp:
        before = CurateConfig(quality={"language_rules": False})
        after = CurateConfig()
        result["languages"] = {
            "before (English rules, web)": keep_rates(held, before, "web", Path(tmp), "before"),
            "after (own profile, web)": keep_rates(held, after, "web", Path(tmp), "after_web"),
            "after (own profile, reference)": keep_rates(held, after, "reference", Path(tmp), "after_ref"),
        }
    result["books"] = books(args.corpora)
    result["code"] = code(args.corpora)
    result["segmentation"] = segmentation_ms(held)
    text = json.dumps(result, indent=1, ensure_ascii=False)
    if args.json:
        args.json.write_text(text + "\n")
    for label, r in result["languages"].items():
        print(label, f"spread {r['spread']:.3f}", "max gap", r["max_gap_to_english"], "agreement", r["agreement"])
        for lang, v in r["by_language"].items():
            print(f"  {lang}: {v['kept']}/{v['docs']} {v['keep_rate']:.2f} gap {v['gap_to_english']} {v['top_rules']} "
                  f"lowq removed {v.get('low_quality_removed')} good kept {v.get('good_kept')}")
    print(json.dumps({k: result[k] for k in ("books", "code", "segmentation")}, indent=1))


if __name__ == "__main__":
    main()
