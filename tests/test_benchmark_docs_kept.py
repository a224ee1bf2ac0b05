"""benchmarks/bench_docs_kept.py: the frozen file lists one row per language folder with one English
row per collection, linux-doc's English row reads nothing under translations/, and the verdict
applies the keep floor and the parity gap as the frozen rule states them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_docs_kept as bdk  # noqa: E402

FROZEN = json.loads(bdk.FROZEN.read_text())


def test_rows_one_english_per_collection_and_linux_doc_english_outside_translations():
    rows = bdk.rows(FROZEN)
    assert len({r.name for r in rows}) == len(rows) == 44
    for coll in FROZEN["evaluation"]:
        assert [r.lang for r in rows if r.collection == coll and r.english] == ["en"]
    english = next(r for r in rows if r.name == "linux-doc/en")
    assert english.paths and not any("translations" in p for p in english.paths)
    assert next(r for r in rows if r.name == "linux-doc/zh_CN").paths == ("web_html/linux-doc/translations/zh_CN",)
    design = set(FROZEN["design_collections"])
    assert not any(r.paths[0].startswith(d) for r in rows for d in design)


def test_run_config_declares_no_kind_and_sets_the_reference_only_in_variant_b(tmp_path):
    a = bdk.run_config(["/x/en"], {"workers": 1}, None)
    b = bdk.run_config(["/x/en"], {"workers": 1}, tmp_path / "ref.jsonl")
    assert a["curate"]["sources"] == [{"kind": "files", "path": "/x/en", "format": "html", "bucket": "docs"}]
    assert "quality" not in a["curate"] and "model_quality" not in a["curate"]
    assert b["curate"]["model_quality"] == {"reference": str(tmp_path / "ref.jsonl")}


def _measured(rates: dict[str, float]) -> dict[str, dict[str, float]]:
    return {name: {"keep_rate": rate} for name, rate in rates.items()}


def test_verdict_keep_floor_and_parity_gap():
    rows = [r for r in bdk.rows(FROZEN) if r.collection in ("maint-guide", "debian-reference")]
    rates = {r.name: 1.0 for r in rows}
    ok = bdk.verdict(FROZEN["decision_rule"], rows, {"a_no_reference": _measured(rates)})
    assert ok["all_hold"] and len(ok["checks"]) == len(rows) + 10  # 10 translations of debian-reference
    low = bdk.verdict(FROZEN["decision_rule"], rows, {"a_no_reference": _measured({**rates, "maint-guide/ja": 0.96})})
    assert [c["check"] for c in low["checks"] if not c["holds"]] == ["maint-guide/ja: keep rate >= 0.97"]  # no parity there
    gap = bdk.verdict(
        FROZEN["decision_rule"],
        rows,
        {"a_no_reference": _measured({**rates, "debian-reference/en": 0.98, "debian-reference/ja": 0.875})},
    )
    failed = [c for c in gap["checks"] if not c["holds"]]
    assert [(c["check"].split(":")[0], c["value"]) for c in failed] == [
        ("debian-reference/ja", 0.875),
        ("debian-reference/ja", 0.105),
    ]


def test_sample_paths_whole_folders_without_a_sample(tmp_path):
    (tmp_path / "c" / "en").mkdir(parents=True)
    for i in range(5):
        (tmp_path / "c" / "en" / f"p{i}.html").write_text("x")
    row = bdk.Row("c/en", "c", "en", True, ("c/en",))
    assert bdk.sample_paths(tmp_path, row, None) == [str(tmp_path / "c" / "en")]
    picked = bdk.sample_paths(tmp_path, row, {"per_row": 2})
    assert len(picked) == 2 and picked == bdk.sample_paths(tmp_path, row, {"per_row": 2})
