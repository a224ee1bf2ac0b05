"""The license policy through a real curation: removal before extraction, routing by permission, and
the per-license table of the funnel and the report checked against counts made independently."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tokenmill.data.config import CurateConfig, LicensePolicy, SourceConfig
from tokenmill.data.curate import curate
from tokenmill.report.license_section import license_table
from tests.adversarial.conftest import assert_clean_error, run_cli

REAL = Path("/work/real_corpora")
PUBLIC_DOMAIN = REAL / "books/us-founding-documents"  # MANIFEST.tsv: public domain
DEDICATIONS = REAL / "short_text/debian-dedications"  # MANIFEST.tsv: GPL-2.0+


def _write_docs(root: Path, name: str, texts: list[str]) -> Path:
    d = root / name
    d.mkdir(parents=True)
    for i, text in enumerate(texts):
        (d / f"{i:03d}.txt").write_text(text, encoding="utf-8")
    return d


def _prose(tag: str, i: int) -> str:
    return f"Document {i} of the {tag} collection. " + " ".join(f"The {tag} text number {i} says word {k}." for k in range(40))


def _sources(tmp: Path) -> list[SourceConfig]:
    mit = _write_docs(tmp, "mit", [_prose("mit", i) for i in range(5)] + [_prose("mit", 0)])  # one exact duplicate
    nc = _write_docs(tmp, "nc", [_prose("nc", i) for i in range(4)])
    unk = _write_docs(tmp, "unk", [_prose("unk", i) for i in range(3)])
    return [
        SourceConfig(path=str(mit), format="text", bucket="web", license="MIT"),
        SourceConfig(path=str(nc), format="text", bucket="web", license="CC-BY-NC-4.0"),
        SourceConfig(path=str(unk), format="text", bucket="web", license="unknown"),
    ]


def _output(out: Path) -> tuple[dict[str, Counter], Counter, dict[str, int]]:
    """Independent counts from the files curation wrote: kept docs per (bucket, license), kept
    bytes per license, and the policy's removals per license from _rejected."""
    kept: dict[str, Counter] = {}
    kept_bytes: Counter = Counter()
    for part in sorted(out.glob("[!_]*/part-*.parquet")):
        for row in pq.read_table(part, columns=["license", "text"]).to_pylist():
            kept.setdefault(part.parent.name, Counter())[row["license"]] += 1
            kept_bytes[row["license"]] += len(row["text"].encode("utf-8"))
    removed: Counter = Counter()
    for part in sorted((out / "_rejected").glob("*.parquet")):
        for row in pq.read_table(part, columns=["license", "step", "rule", "value"]).to_pylist():
            if row["step"] == "license":
                assert row["value"] == row["license"]
                removed[row["license"]] += 1
    return kept, kept_bytes, dict(removed)


def test_policy_removes_routes_and_counts_exactly_for_any_worker_count(tmp_path):
    sources = _sources(tmp_path / "in")
    policy = LicensePolicy(require=["training"], bucket_by_permission={"commercial_use": "nc"})
    # a bucket rule that would move everything to `web2`: the license route wins for the NC source
    funnels = []
    for workers in (1, 2):
        cfg = CurateConfig(
            sources=sources,
            license_policy=policy,
            bucket_rules=[{"bucket": "web2", "source": "*"}],
            workers=workers,
            min_chars=10,
        )
        out = tmp_path / f"out{workers}"
        curate(cfg, out, steps=["license", "normalize", "exact_dedup", "bucket"], progress=False)
        funnels.append(json.loads((out / "_funnel.json").read_text()))
        kept, kept_bytes, removed = _output(out)
        assert kept == {"web2": Counter({"MIT": 5}), "nc": Counter({"CC-BY-NC-4.0": 4})}
        assert removed == {"unknown": 3}
    assert funnels[0]["licenses"] == funnels[1]["licenses"]
    table = funnels[0]["licenses"]
    raw = {name: sum(p.stat().st_size for p in (tmp_path / "in" / name).iterdir()) for name in ("mit", "nc", "unk")}
    assert table["MIT"] | {"permissions": None} == {
        "docs": 6, "kept": 5, "keep_rate": 5 / 6, "rejected": {"exact_dedup/duplicate_of": 1},
        "bytes_in": raw["mit"], "bytes_kept": kept_bytes["MIT"], "removed_by_policy": 0, "removed_by_other_steps": 1,
        "permissions": None,
    }
    assert table["unknown"]["removed_by_policy"] == 3 and table["unknown"]["rejected"] == {"license/missing_training": 3}
    assert table["CC-BY-NC-4.0"]["bytes_in"] == raw["nc"] and table["CC-BY-NC-4.0"]["kept"] == 4
    assert table["CC-BY-NC-4.0"]["permissions"]["commercial_use"] is False
    # the policy is the first step: the removed documents never reached normalize
    assert funnels[0]["total"]["normalize"]["docs_in"] == 13 - 3


def _html_rows(html: str) -> dict[str, list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in rows[1:]]
    return {c[0]: c[1:] for c in cells}


@pytest.mark.skipif(not (PUBLIC_DOMAIN.is_dir() and DEDICATIONS.is_dir()), reason="real corpora not installed")
def test_real_collections_one_license_removed_table_equals_independent_count(tmp_path):
    cfg = CurateConfig(
        sources=[
            SourceConfig(path=str(PUBLIC_DOMAIN), format="text", bucket="books", license="public-domain"),
            SourceConfig(path=str(DEDICATIONS), format="text", bucket="short", license="GPL-2.0+"),
        ],
        license_policy=LicensePolicy(exclude_if=["share_alike"]),
        allow_empty_bucket=True,
        workers=1,
    )
    out = tmp_path / "out"
    curate(cfg, out, steps=["license", "normalize", "bucket"], progress=False)
    table = json.loads((out / "_funnel.json").read_text())["licenses"]
    files = {lic: [p for p in d.rglob("*") if p.is_file()] for lic, d in (("public-domain", PUBLIC_DOMAIN), ("GPL-2.0+", DEDICATIONS))}
    kept, kept_bytes, removed = _output(out)
    for lic, paths in files.items():
        assert table[lic]["docs"] == len(paths)
        assert table[lic]["bytes_in"] == sum(p.stat().st_size for p in paths)
        assert table[lic]["kept"] == sum(c[lic] for c in kept.values())
        assert table[lic]["bytes_kept"] == kept_bytes[lic]
        assert table[lic]["removed_by_policy"] == removed.get(lic, 0)
    assert table["GPL-2.0+"]["kept"] == 0 and table["GPL-2.0+"]["removed_by_policy"] == len(files["GPL-2.0+"]) > 0
    assert table["public-domain"]["kept"] == len(files["public-domain"]) == 2
    rows = _html_rows(license_table(table))  # the report's table shows the same numbers and permissions
    assert rows["GPL-2.0+"][:3] == ["45", "0", "45"] and rows["GPL-2.0+"][-1] == "yes"
    assert rows["public-domain"][:3] == ["2", "2", "0"] and rows["public-domain"][-1] == "no"


def test_cli_refuses_unknown_license_and_bad_policy_in_one_line(tmp_path):
    src = _write_docs(tmp_path, "docs", [_prose("x", 0)])
    base = {"name": "lic", "root": str(tmp_path / "runs"), "curate": {"sources": [{"path": str(src), "bucket": "web", "license": "Foo-1.0"}]}}
    cfg = tmp_path / "unknown.yaml"
    cfg.write_text(yaml.safe_dump({**base, "curate": {**base["curate"], "license_policy": {"require": ["training"]}}}))
    assert_clean_error(run_cli("curate", "--config", cfg, cwd=tmp_path), "sources[0]", "Foo-1.0", "curate.licenses")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**base, "curate": {**base["curate"], "license_policy": {"require": ["share_alike"]}}}))
    assert_clean_error(run_cli("curate", "--config", bad, cwd=tmp_path), "license_policy", "require")
