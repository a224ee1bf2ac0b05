"""Documentation pages kept at curate defaults, per language, under the frozen rule of
benchmarks/frozen/docs_kept.json (written and committed before any default it judges changes).

Each evaluation row (one language folder of a manual) is curated alone by the real curate
(`tokenmill.data.curate.curate`, what `tokenmill curate -o` calls) from a run config the script
writes: one `files` source per path of the row, format html, no kind declared, every curate key at
its default but the run guards the frozen file names. Two variants: (a) no reference, (b) the
perplexity gate's reference (`curate.model_quality.reference`) set to a JSONL the script builds from
design collections only, by the frozen selection rule. From each run's `_funnel.json` and
`_rejected` it reports pages read and kept, the keep rate, pages the extractor found empty, and the
five rules that removed most pages with three file names each; then the frozen rule's checks.

    .venv/bin/python benchmarks/record.py /tmp/docs_kept.json --result /tmp/dk.json -- \\
        benchmarks/bench_docs_kept.py --corpora ../real_corpora --work /tmp/dk-work --json /tmp/dk.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

FROZEN = Path(__file__).resolve().parent / "frozen" / "docs_kept.json"
BUCKET = "docs"
TOP_RULES = 5
EXAMPLES = 3


@dataclass(frozen=True)
class Row:
    """One language folder of one evaluation collection: the unit a keep rate is measured on."""

    name: str  # "collection/lang"
    collection: str
    lang: str
    english: bool
    paths: tuple[str, ...]  # relative to the corpora root


def rows(frozen: dict[str, Any]) -> list[Row]:
    """Every evaluation row of the frozen file, in its order (collections, then languages)."""
    out = []
    for coll, spec in frozen["evaluation"].items():
        for lang, subs in spec["rows"].items():
            paths = tuple(f"{spec['path']}/{s}" for s in subs)
            out.append(Row(f"{coll}/{lang}", coll, lang, lang == spec["english"], paths))
    return out


def sample_paths(corpora: Path, row: Row, sample: dict[str, Any] | None) -> list[str]:
    """The row's source paths: its folders as they are, or (a frozen `sample`) at most `per_row`
    pages chosen by ascending sha256 of their path relative to the corpora root."""
    if not sample:
        return [str(corpora / p) for p in row.paths]
    pages = [f for p in row.paths for f in ([corpora / p] if (corpora / p).is_file() else (corpora / p).rglob("*.html"))]
    rel = sorted((hashlib.sha256(str(f.relative_to(corpora)).encode()).hexdigest(), str(f)) for f in pages)
    return sorted(path for _, path in rel[: sample["per_row"]])


def run_config(sources: list[str], guards: dict[str, Any], reference: Path | None) -> dict[str, Any]:
    """The run config of one row: html sources in one bucket, no kind, defaults but the guards."""
    curate: dict[str, Any] = {
        "sources": [{"kind": "files", "path": p, "format": "html", "bucket": BUCKET} for p in sources],
        **guards,
    }
    if reference is not None:
        curate["model_quality"] = {"reference": str(reference)}
    return {"name": "docs_kept", "curate": curate}


def build_reference(corpora: Path, spec: dict[str, Any], dest: Path) -> dict[str, Any]:
    """The variant (b) reference: per design collection, the first `per_collection` pages by
    ascending sha256 of their relative path whose extracted text has at least `min_chars`."""
    from tokenmill.data.steps.extract import extract

    dest.parent.mkdir(parents=True, exist_ok=True)
    chosen: list[str] = []
    with dest.open("w", encoding="utf-8") as fh:
        for coll in spec["collections"]:
            base = corpora / coll["path"]
            pages = [
                p
                for p in base.glob(coll["glob"])
                if p.is_file() and not any(p.name.startswith(x) for x in coll["exclude_name_prefix"])
            ]
            ordered = sorted(pages, key=lambda p: hashlib.sha256(str(p.relative_to(corpora)).encode()).hexdigest())
            taken = 0
            for page in ordered:
                if taken >= spec["per_collection"]:
                    break
                text, _ = extract(page.read_text(encoding="utf-8", errors="replace"))
                if text and len(text.strip()) >= spec["min_chars"]:
                    fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                    chosen.append(str(page.relative_to(corpora)))
                    taken += 1
    digest = hashlib.sha256(dest.read_bytes()).hexdigest()
    return {"path": str(dest), "pages": len(chosen), "sha256": digest, "files": chosen}


def curate_row(config: dict[str, Any], folder: Path) -> Path:
    """Write the row's config and curate it in-process, as `tokenmill curate -o` does."""
    from tokenmill.config import load_config
    from tokenmill.data.curate import curate

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    cfg = load_config(path)
    out = folder / "curated"
    curate(cfg.curate, out, base_dir=folder, progress=False, seed=cfg.seed, overwrite=True)
    return out


def rejections(curated: Path, corpora: Path) -> list[dict[str, Any]]:
    """The rules that removed most pages, each with its count and the first file names."""
    import pyarrow.parquet as pq

    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    for part in sorted((curated / "_rejected").glob("*.parquet")):
        for r in pq.read_table(part, columns=["url", "step", "rule"]).to_pylist():
            key = f"{r['step']}/{r['rule']}"
            counts[key] += 1
            names = examples.setdefault(key, [])
            if len(names) < EXAMPLES and r["url"]:
                url = Path(r["url"])
                names.append(str(url.relative_to(corpora)) if url.is_relative_to(corpora) else str(url))
    return [{"rule": k, "pages": n, "examples": examples[k]} for k, n in counts.most_common(TOP_RULES)]


def measure(curated: Path, corpora: Path) -> dict[str, Any]:
    """Pages read, kept and found empty by the extractor, from the run's _funnel.json."""
    funnel = json.loads((curated / "_funnel.json").read_text())
    read = sum(s["docs_in"] for s in funnel["sources"].values())
    kept = sum(s["docs_out"] for s in funnel["sources"].values())
    empty = funnel["total"].get("extract", {}).get("docs_rejected", 0)
    return {
        "read": read,
        "kept": kept,
        "keep_rate": round(kept / read, 4) if read else None,
        "empty": empty,
        "languages": {k: v["docs"] for k, v in funnel.get("languages", {}).items()},
        "top_rejections": rejections(curated, corpora),
    }


def verdict(rule: dict[str, Any], all_rows: list[Row], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each check of the frozen decision rule in each variant scored, with its value and whether it holds.
    `results` maps variant -> row name -> measure(); a row missing from a variant is not checked."""
    checks = []
    for variant, per_row in results.items():
        for row in all_rows:
            rate = per_row.get(row.name, {}).get("keep_rate")
            if row.name in per_row:
                checks.append(
                    {
                        "variant": variant,
                        "check": f"{row.name}: keep rate >= {rule['keep_at_least']}",
                        "value": rate,
                        "holds": rate is not None and rate >= rule["keep_at_least"],
                    }
                )
        for coll in rule["parity_collections"]:
            english = next((r for r in all_rows if r.collection == coll and r.english), None)
            if english is None or english.name not in per_row:
                continue  # a run without the English row (--only) has no rate to compare with
            base = per_row[english.name]["keep_rate"]
            for row in (r for r in all_rows if r.collection == coll and not r.english and r.name in per_row):
                rate = per_row[row.name]["keep_rate"]
                gap = None if rate is None or base is None else round(abs(rate - base), 4)
                checks.append(
                    {
                        "variant": variant,
                        "check": f"{row.name}: |keep - English keep| <= {rule['parity_within']}",
                        "value": gap,
                        "holds": gap is not None and gap <= rule["parity_within"],
                    }
                )
    return {"checks": checks, "all_hold": bool(checks) and all(c["holds"] for c in checks)}


def pooled(chosen: list[Row], per_row: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pages read and kept per collection, all its language rows together (shown, not judged)."""
    out: dict[str, dict[str, Any]] = {}
    for row in chosen:
        c = out.setdefault(row.collection, {"read": 0, "kept": 0})
        c["read"] += per_row[row.name]["read"]
        c["kept"] += per_row[row.name]["kept"]
    for c in out.values():
        c["keep_rate"] = round(c["kept"] / c["read"], 4) if c["read"] else None
    return out


def score_variant(
    args: argparse.Namespace, frozen: dict[str, Any], chosen: list[Row], reference: Path | None, variant: str
) -> dict[str, dict[str, Any]]:
    """Curate every chosen row in one variant; its results by row name (timing included)."""
    guards = frozen["configuration"]["run_guards"]
    out: dict[str, dict[str, Any]] = {}
    for row in chosen:
        started = time.perf_counter()
        config = run_config(sample_paths(args.corpora, row, frozen.get("sample")), guards, reference)
        curated = curate_row(config, args.work / variant / row.name.replace("/", "__"))
        out[row.name] = {**measure(curated, args.corpora), "seconds": round(time.perf_counter() - started, 1), "config": config}
        r = out[row.name]
        top = "; ".join(f"{x['rule']} {x['pages']}" for x in r["top_rejections"][:3])
        print(
            f"{variant:14s} {row.name:34s} {r['kept']:4d}/{r['read']:4d} kept ({r['keep_rate']}) empty {r['empty']:3d} "
            f"{r['seconds']:6.1f}s  {top}",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True, help="the real corpora root (holds web_html/ and reference/)")
    ap.add_argument("--work", type=Path, required=True, help="one folder per variant and row is written here")
    ap.add_argument("--only", action="append", default=[], help="score only this row (collection/lang); repeatable")
    ap.add_argument("--variant", choices=["a_no_reference", "b_reference"], action="append", help="default: both")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args()
    args.corpora, args.work = args.corpora.resolve(), args.work.resolve()
    frozen = json.loads(FROZEN.read_text())
    all_rows = rows(frozen)
    unknown = set(args.only) - {r.name for r in all_rows}
    if unknown:
        ap.error(f"unknown row(s) {sorted(unknown)}; rows are {', '.join(r.name for r in all_rows)}")
    chosen = [r for r in all_rows if not args.only or r.name in args.only]
    started = time.perf_counter()
    result: dict[str, Any] = {
        "frozen": str(FROZEN.relative_to(FROZEN.parents[2])),
        "rows": [r.name for r in chosen],
        "sample": frozen.get("sample"),
        "variants": {},
    }
    for variant in args.variant or ["a_no_reference", "b_reference"]:
        reference = None
        if variant == "b_reference":
            ref = build_reference(args.corpora, frozen["reference"], args.work / "reference" / "reference.jsonl")
            result["reference"] = ref
            reference = Path(ref["path"])
        result["variants"][variant] = score_variant(args, frozen, chosen, reference, variant)
    result["collections"] = {v: pooled(chosen, per_row) for v, per_row in result["variants"].items()}
    result["verdict"] = verdict(frozen["decision_rule"], all_rows, result["variants"])
    result["seconds"] = round(time.perf_counter() - started, 1)
    for c in result["verdict"]["checks"]:
        print(f"{'holds' if c['holds'] else 'FAILS':6s} {c['variant']:14s} {c['check']}: {c['value']}")
    print(f"all hold: {result['verdict']['all_hold']}  ({result['seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
