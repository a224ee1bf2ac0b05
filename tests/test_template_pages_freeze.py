"""benchmarks/bench_template_pages.py without the fetched sites: the frozen templates fill every
slot, the same seed writes the same pages, only slots differ between two pages of one template, and
the verdict bounds templates from above and sites from below."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_template_pages as btp  # noqa: E402

FROZEN = json.loads(btp.FROZEN.read_text())
MATERIAL = (["The build tree holds every generated file.", "A target names one library or program."],
            ["Hartley", "Quince", "Ashford"], ["compiler", "module", "library"])


def test_templates_fill_every_slot_and_repeat_for_a_seed(tmp_path):
    spec = {**FROZEN["templates"], "instances": 3}
    first = btp.write_templates(spec, MATERIAL, 7, tmp_path / "a")
    again = btp.write_templates(spec, MATERIAL, 7, tmp_path / "b")
    for kind, folder in first.items():
        pages = sorted(folder.glob("*.html"))
        assert len(pages) == 3
        for page in pages:
            text = page.read_text(encoding="utf-8")
            assert not re.search(r"\{([a-zA-Z]|site:[a-z]+)\}", text), (kind, page.name)
            assert text == (again[kind] / page.name).read_text(encoding="utf-8")
        # one site per template: its fixed text and name are on every page, the slots differ
        a, b = (p.read_text(encoding="utf-8") for p in pages[:2])
        assert a != b and a.splitlines()[-2] == b.splitlines()[-2]  # the footer line names the same site


def test_verdict_bounds_templates_from_above_and_sites_from_below():
    rows = {"cmake-doc/en": {"keep_rate": 0.98}, "template/shop_product": {"keep_rate": 0.05}}
    checks = btp.verdict(FROZEN["decision_rule"], {"a": rows})["checks"]
    assert [c["holds"] for c in checks] == [True, True]
    rows = {"cmake-doc/en": {"keep_rate": 0.96}, "template/shop_product": {"keep_rate": 0.11}}
    assert [c["holds"] for c in btp.verdict(FROZEN["decision_rule"], {"a": rows})["checks"]] == [False, False]
