"""benchmarks/bench_check.py: which ratios it flags, and how it reads a script's result."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_check import CHECKS, _last_json, compare  # noqa: E402


def test_a_ratio_more_than_15_percent_below_its_record_is_flagged_and_others_are_not():
    rows = {r["ratio"]: r for r in compare({"a": 2.5, "b": 2.6, "c": 9.0, "new": 1.0}, {"a": 3.0, "b": 3.0, "c": 4.0})}
    assert rows["a"]["flag"] and abs(rows["a"]["measured_over_recorded"] - 2.5 / 3) < 1e-12  # −16.7%
    assert not rows["b"]["flag"]  # −13.3%: within the machine's noise band
    assert not rows["c"]["flag"]  # faster is never a regression
    assert rows["new"]["recorded"] is None and not rows["new"]["flag"]  # nothing to compare with yet


def test_the_result_is_the_last_json_object_after_progress_lines():
    out = 'repeat 0: x 1.0 s\n{"not": "this"}\nmore progress\n{\n "by_cores": {"1": {"speedup": 4.0}}\n}\n'
    assert _last_json(out, "t") == {"by_cores": {"1": {"speedup": 4.0}}}
    tokenize = next(c for c in CHECKS if c.name == "tokenize")
    assert tokenize.ratios(_last_json(out, "t")) == {"tokenize 1 core(s) × HF encode_batch": 4.0}


def test_every_check_names_a_script_that_exists():
    here = Path(__file__).resolve().parents[1] / "benchmarks"
    assert all((here / c.args[0]).exists() for c in CHECKS)
