"""Templated pages and the documentation sites beside them, at curate defaults, under the frozen rule
of benchmarks/frozen/template_pages.json (committed before any change it judges and before any
tokenmill code read the sites).

Clean rows: documentation sites no design has read (`benchmarks/fetch_fresh_docs.sh TARGET web1`:
CMake's, Octave's and GnuCash's HTML), each curated alone as a folder of HTML pages, as
bench_docs_fresh.py curates a row. Template rows: for each of three page templates of the frozen
file (a shop's product page, a job board's listing, an estate agent's property page), `instances`
HTML pages of one site, only their slots changed: names, numbers and real sentences taken from
held-out pages of the clean sites (pages outside the clean samples, rendered by
bench_quality_signal.render_html). Each template row is curated alone too, so the pages of one
template see each other as a crawl would. Without (a) and with (b) the reference of
docs_kept_fresh.json. Per row: pages read, kept, the rules that removed most; then the checks.

    PYTHONPATH=src .venv/bin/python benchmarks/record.py benchmarks/results/template_pages.json --result /tmp/tp.json -- \\
        benchmarks/bench_template_pages.py --fresh /work/fresh_web_1 --corpora /work/real_corpora --work /tmp/tp --json /tmp/tp.json
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_docs_fresh as fresh  # noqa: E402
import bench_docs_kept as kept  # noqa: E402
import bench_quality_signal as qs  # noqa: E402

FROZEN = Path(__file__).resolve().parent / "frozen" / "template_pages.json"
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def slot_material(root: Path, spec: dict[str, Any], clean: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(sentences, names, words) from the held-out pages: per collection, the pages outside its clean
    sample, first `pages` by ascending sha256 of their path; sentences of 6-30 words ending in a full
    stop, names and words as bench_quality_signal.slot_words finds them."""
    texts: list[str] = []
    for coll in spec["collections"]:
        pages = [p for p in fresh._html(Path(root), coll) if p not in clean]
        pages = sorted(pages, key=lambda p: hashlib.sha256(p.encode()).hexdigest())[: spec["pages"]]
        texts += [qs.render_html((root / p).read_text(encoding="utf-8", errors="replace")) for p in pages]
    sentences = [
        s.strip()
        for t in texts
        for para in t.split("\n\n")
        for s in _SENTENCE.split(" ".join(para.split()))
        if 6 <= len(s.split()) <= 30 and s.strip().endswith(".")
    ]
    names, words = qs.slot_words(texts)
    return sorted(set(sentences)), names, words


def _fill(template: str, rng: random.Random, site: dict[str, str], sentences: list[str], names: list[str], words: list[str]) -> str:
    """The template with every slot filled; {s} a sentence, {n} a name, {w} a word, {d} 1-99,
    {p} a price, {c} a code; {site:...} the site's fixed values. Slot text is HTML-escaped."""

    def slot(m: re.Match[str]) -> str:
        key = m.group(1)
        if key.startswith("site:"):
            return html.escape(site[key[5:]])
        value = {
            "s": lambda: rng.choice(sentences),
            "n": lambda: rng.choice(names),
            "w": lambda: rng.choice(words),
            "W": lambda: rng.choice(words).capitalize(),
            "d": lambda: str(rng.randint(1, 99)),
            "p": lambda: f"{rng.randint(5, 900)}.{rng.choice(('00', '49', '95', '99'))}",
            "c": lambda: f"{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{rng.randint(10000, 99999)}",
        }[key]()
        return html.escape(value)

    return re.sub(r"\{([a-zA-Z]|site:[a-z]+)\}", slot, template)


def write_templates(
    spec: dict[str, Any], material: tuple[list[str], list[str], list[str]], seed: int, dest: Path
) -> dict[str, Path]:
    """Each template's `instances` pages under dest/<kind>/; the site's fixed values drawn once per
    kind (its name), every page from random.Random('<seed>:<kind>:<i>')."""
    sentences, names, words = material
    out = {}
    for kind, t in spec["kinds"].items():
        folder = dest / kind
        folder.mkdir(parents=True, exist_ok=True)
        site_rng = random.Random(f"{seed}:{kind}:site")
        site = {"name": f"{site_rng.choice(names)} {t['site_suffix']}", "city": site_rng.choice(names)}
        for i in range(spec["instances"]):
            page = _fill(t["html"], random.Random(f"{seed}:{kind}:{i}"), site, sentences, names, words)
            (folder / f"page-{i:03d}.html").write_text(page, encoding="utf-8")
        out[kind] = folder
    return out


def verdict(rule: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per variant: every clean row kept >= keep_at_least, every template row kept <= template_keep_at_most."""
    checks = []
    for variant, per_row in results.items():
        for name, r in per_row.items():
            is_template = name.startswith("template/")
            bound = rule["template_keep_at_most"] if is_template else rule["keep_at_least"]
            holds = r["keep_rate"] is not None and (r["keep_rate"] <= bound if is_template else r["keep_rate"] >= bound)
            checks.append({"variant": variant, "check": f"{name}: kept {'<=' if is_template else '>='} {bound}", "value": r["keep_rate"], "holds": holds})
    return {"checks": checks, "holds": sum(c["holds"] for c in checks), "of": len(checks), "all_hold": all(c["holds"] for c in checks)}


def score_variant(args: argparse.Namespace, frozen: dict[str, Any], rows: list[fresh.Row], templates: dict[str, Path],
                  reference: Path | None, variant: str) -> dict[str, dict[str, Any]]:
    """Curate each clean row and each template row alone; pages read, kept and the top rules."""
    guards = frozen["configuration"]["run_guards"]
    out: dict[str, dict[str, Any]] = {}
    folders = {r.name: (lambda r=r: fresh.stage(args.fresh, r, args.work / variant / r.name.replace("/", "__") / "pages")) for r in rows}
    folders.update({f"template/{k}": (lambda p=p: p) for k, p in templates.items()})
    for name, pages in folders.items():
        started = time.perf_counter()
        folder = args.work / variant / name.replace("/", "__")
        src = pages()
        curated = kept.curate_row(kept.run_config([str(src)], guards, reference), folder)
        out[name] = {**kept.measure(curated, src), "seconds": round(time.perf_counter() - started, 1)}
        r = out[name]
        top = "; ".join(f"{x['rule']} {x['pages']}" for x in r["top_rejections"][:3])
        print(f"{variant:14s} {name:26s} {r['kept']:4d}/{r['read']:4d} kept ({r['keep_rate']}) {r['seconds']:6.1f}s  {top}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fresh", type=Path, required=True, help="the folder `fetch_fresh_docs.sh TARGET web1` wrote")
    ap.add_argument("--corpora", type=Path, required=True, help="the real corpora root (the reference of variant b)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--frozen", type=Path, default=FROZEN)
    args = ap.parse_args()
    args.fresh, args.corpora, args.work = args.fresh.resolve(), args.corpora.resolve(), args.work.resolve()
    frozen = json.loads(args.frozen.read_text())
    fresh.check_digest(args.fresh, frozen)
    rows = fresh.rows(frozen, args.fresh)
    started = time.perf_counter()
    material = slot_material(args.fresh, frozen["templates"]["slot_material"], {p for r in rows for p in r.pages})
    templates = write_templates(frozen["templates"], material, frozen["templates"]["seed"], args.work / "templates")
    digest = hashlib.sha256(b"".join(p.read_bytes() for k in sorted(templates) for p in sorted(templates[k].glob("*.html")))).hexdigest()
    result: dict[str, Any] = {
        "frozen": str(args.frozen.resolve().relative_to(FROZEN.parents[2])),
        "rows": {r.name: len(r.pages) for r in rows},
        "slot_material": {"sentences": len(material[0]), "names": len(material[1]), "words": len(material[2])},
        "templates_sha256": digest,
        "variants": {},
    }
    print(f"rows {result['rows']}; slots {result['slot_material']}; templates {digest[:16]}", flush=True)
    for variant in fresh.VARIANTS:
        reference = None
        if variant == "b_reference":
            ref = kept.build_reference(args.corpora, frozen["reference"], args.work / "reference" / "reference.jsonl")
            result["reference"] = ref
            reference = Path(ref["path"])
        result["variants"][variant] = score_variant(args, frozen, rows, templates, reference, variant)
    result["verdict"] = verdict(frozen["decision_rule"], result["variants"])
    result["seconds"] = round(time.perf_counter() - started, 1)
    for c in result["verdict"]["checks"]:
        print(f"{'holds' if c['holds'] else 'FAILS':6s} {c['variant']:14s} {c['check']}: {c['value']}")
    print(f"checks holding: {result['verdict']['holds']} of {result['verdict']['of']}  ({result['seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
