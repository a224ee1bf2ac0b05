"""Documentation kept at curate defaults on collections no design has read, under the frozen rule
of benchmarks/frozen/docs_kept_fresh.json (committed before any change it judges and before any
code was run on these collections).

The collections come from `benchmarks/fetch_fresh_docs.sh TARGET` (six Debian packages at pinned
versions); the scorer refuses a set whose FILES.tsv digest is not the frozen one. Each row (a
collection, an apache2-doc translation, or the English pages of that translation) is copied into
its own folder and curated alone by the real curate (what `tokenmill curate -o` calls), html, no
kind declared, defaults but the frozen run guards, without a reference (a) and with the reference
of benchmarks/frozen/docs_kept.json built from the real corpora (b). Per row: pages read, kept,
found empty, the rules that removed most; then the frozen checks.

    .venv/bin/python benchmarks/record.py benchmarks/results/docs_kept_fresh.json --result /tmp/dkf.json -- \\
        benchmarks/bench_docs_fresh.py --fresh ../fresh_corpora --corpora ../real_corpora --work /tmp/dkf --json /tmp/dkf.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_docs_kept as kept  # noqa: E402  (the same curate call, reference and measures)

FROZEN = Path(__file__).resolve().parent / "frozen" / "docs_kept_fresh.json"
VARIANTS = ("a_no_reference", "b_reference")


@dataclass(frozen=True)
class Row:
    """One curate run: a name, its pages (relative to the fresh root) and what it is compared with."""

    name: str  # "apache2-doc/fr", "apache2-doc/en@fr", "git-doc/en"
    pages: tuple[str, ...]
    english_of: str | None = None  # for "en@L": L


def _html(root: Path, folder: str, exclude: tuple[str, ...] = ()) -> list[str]:
    base = root / folder
    return sorted(
        str(p.relative_to(root)) for p in base.rglob("*.html") if p.is_file() and not str(p.relative_to(base)).startswith(exclude)
    )


def _sampled(pages: list[str], n: int | None) -> list[str]:
    """At most n pages: those first by ascending sha256 of their path (None: all), in path order."""
    if n is None or len(pages) <= n:
        return pages
    return sorted(sorted(pages, key=lambda p: hashlib.sha256(p.encode()).hexdigest())[:n])


def _english_name(page: str, lang: str, spec: dict[str, Any]) -> str:
    """The English page of a translated one: the same path under the English folder, with a
    language suffix in the name ("x.de.html") swapped for English's when the frozen file says so."""
    english = spec.get("english", "en")
    prefix = f"{spec['path']}/{lang}/"
    rel = page[len(prefix) :]
    names = spec.get("translation_names")
    if names:
        rel = rel.replace(names["from"].format(lang=lang), names["to"])
    return f"{spec['path']}/{english}/{rel}"


def rows(frozen: dict[str, Any], root: Path) -> list[Row]:
    """Every row of the frozen file, in its order: per collection its rows, then per translation
    L the row L and the row en@L (the English pages of L's pages)."""
    out: list[Row] = []
    for coll, spec in frozen["evaluation"].items():
        exclude = tuple(spec.get("exclude", ()))
        if "translations" not in spec:
            out.append(Row(f"{coll}/en", tuple(_sampled(_html(root, spec["path"], exclude), spec.get("sample")))))
            continue
        english = spec.get("english", "en")
        out.append(Row(f"{coll}/{english}", tuple(_html(root, f"{spec['path']}/{english}"))))
        for lang in spec["translations"]:
            pages = _html(root, f"{spec['path']}/{lang}")
            out.append(Row(f"{coll}/{lang}", tuple(pages)))
            english_pages = [_english_name(p, lang, spec) for p in pages]
            missing = [p for p in english_pages if not (root / p).is_file()]
            if missing:
                raise SystemExit(f"{coll}/{lang}: no English page for {missing[0]}")
            out.append(Row(f"{coll}/en@{lang}", tuple(english_pages), english_of=lang))
    return out


def check_digest(root: Path, frozen: dict[str, Any]) -> None:
    """Refuse a fetched set that is not the frozen one (another version, a file changed or added)."""
    files = root / "FILES.tsv"
    if not files.is_file():
        raise SystemExit(f"{files}: missing; run benchmarks/fetch_fresh_docs.sh {root}")
    digest = hashlib.sha256(files.read_bytes()).hexdigest()
    if digest != frozen["files_sha256"]:
        raise SystemExit(f"{files}: sha256 {digest}, the frozen set's is {frozen['files_sha256']}")


def stage(root: Path, row: Row, dest: Path) -> Path:
    """Copy the row's pages into dest (relative paths kept): one folder, one source."""
    if dest.exists():
        shutil.rmtree(dest)
    for page in row.pages:
        (dest / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / page, dest / page)
    return dest


def verdict(rule: dict[str, Any], all_rows: list[Row], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The frozen checks per variant: every row's keep rate, every translation's gap to its en@L row."""
    checks = []
    for variant, per_row in results.items():
        for row in all_rows:
            rate = per_row[row.name]["keep_rate"]
            checks.append(
                {
                    "variant": variant,
                    "check": f"{row.name}: keep rate >= {rule['keep_at_least']}",
                    "value": rate,
                    "holds": rate is not None and rate >= rule["keep_at_least"],
                }
            )
        for row in (r for r in all_rows if r.english_of):
            lang = row.name.replace(f"en@{row.english_of}", row.english_of)
            a, b = per_row[lang]["keep_rate"], per_row[row.name]["keep_rate"]
            gap = None if a is None or b is None else round(abs(a - b), 4)
            checks.append(
                {
                    "variant": variant,
                    "check": f"{lang}: |keep - keep of en@{row.english_of}| <= {rule['parity_within']}",
                    "value": gap,
                    "holds": gap is not None and gap <= rule["parity_within"],
                }
            )
    return {
        "checks": checks,
        "holds": sum(c["holds"] for c in checks),
        "of": len(checks),
        "all_hold": bool(checks) and all(c["holds"] for c in checks),
    }


def score_variant(
    args: argparse.Namespace, frozen: dict[str, Any], all_rows: list[Row], reference: Path | None, variant: str
) -> dict[str, dict[str, Any]]:
    guards = frozen["configuration"]["run_guards"]
    out: dict[str, dict[str, Any]] = {}
    for row in all_rows:
        started = time.perf_counter()
        folder = args.work / variant / row.name.replace("/", "__")
        pages = stage(args.fresh, row, folder / "pages")
        curated = kept.curate_row(kept.run_config([str(pages)], guards, reference), folder)
        r = {**kept.measure(curated, pages), "seconds": round(time.perf_counter() - started, 1)}
        out[row.name] = r
        top = "; ".join(f"{x['rule']} {x['pages']}" for x in r["top_rejections"][:3])
        print(
            f"{variant:14s} {row.name:26s} {r['kept']:4d}/{r['read']:4d} kept ({r['keep_rate']}) empty {r['empty']:3d} "
            f"{r['seconds']:6.1f}s  {top}",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fresh", type=Path, required=True, help="the folder fetch_fresh_docs.sh wrote")
    ap.add_argument("--corpora", type=Path, required=True, help="the real corpora root (the reference of variant b)")
    ap.add_argument("--work", type=Path, required=True, help="one folder per variant and row is written here")
    ap.add_argument("--json", type=Path, help="write the result here")
    ap.add_argument("--frozen", type=Path, default=FROZEN, help="the frozen judgement (default: docs_kept_fresh.json)")
    args = ap.parse_args()
    args.fresh, args.corpora, args.work = args.fresh.resolve(), args.corpora.resolve(), args.work.resolve()
    frozen = json.loads(args.frozen.read_text())
    check_digest(args.fresh, frozen)
    all_rows = rows(frozen, args.fresh)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "frozen": str(args.frozen.resolve().relative_to(FROZEN.parents[2])),
        "rows": {r.name: len(r.pages) for r in all_rows},
        "variants": {},
    }
    for variant in VARIANTS:
        reference = None
        if variant == "b_reference":
            ref = kept.build_reference(args.corpora, frozen["reference"], args.work / "reference" / "reference.jsonl")
            result["reference"] = ref
            reference = Path(ref["path"])
        result["variants"][variant] = score_variant(args, frozen, all_rows, reference, variant)
    result["verdict"] = verdict(frozen["decision_rule"], all_rows, result["variants"])
    result["seconds"] = round(time.perf_counter() - started, 1)
    for c in result["verdict"]["checks"]:
        print(f"{'holds' if c['holds'] else 'FAILS':6s} {c['variant']:14s} {c['check']}: {c['value']}")
    print(f"checks holding: {result['verdict']['holds']} of {result['verdict']['of']}  ({result['seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
