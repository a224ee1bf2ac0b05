"""benchmarks/bench_check.py: which ratios it flags, and how it reads a script's result."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_check import CHECKS, compare  # noqa: E402
from record import last_json  # noqa: E402


def test_a_ratio_more_than_15_percent_below_its_record_is_flagged_and_others_are_not():
    rows = {r["ratio"]: r for r in compare({"a": 2.5, "b": 2.6, "c": 9.0, "new": 1.0}, {"a": 3.0, "b": 3.0, "c": 4.0})}
    assert rows["a"]["flag"] and abs(rows["a"]["measured_over_recorded"] - 2.5 / 3) < 1e-12  # −16.7%
    assert not rows["b"]["flag"]  # −13.3%: within the machine's noise band
    assert not rows["c"]["flag"]  # faster is never a regression
    assert rows["new"]["recorded"] is None and not rows["new"]["flag"]  # nothing to compare with yet


def test_the_result_is_the_last_json_object_after_progress_lines():
    out = 'repeat 0: x 1.0 s\n{"not": "this"}\nmore progress\n{\n "by_cores": {"1": {"speedup": 4.0}}\n}\n'
    assert last_json(out) == {"by_cores": {"1": {"speedup": 4.0}}}
    tokenize = next(c for c in CHECKS if c.name == "tokenize")
    assert tokenize.ratios(last_json(out)) == {"tokenize 1 core(s) × HF encode_batch": 4.0}


def test_every_check_names_a_script_that_exists():
    here = Path(__file__).resolve().parents[1] / "benchmarks"
    assert all((here / c.args[0]).exists() for c in CHECKS)


def test_record_writes_the_result_with_its_provenance(tmp_path):
    import json
    import subprocess

    script = tmp_path / "bench_fake.py"
    script.write_text('print("progress 1")\nimport json\nprint(json.dumps({"ratio": 3.5}, indent=1))\n')
    out = tmp_path / "out.json"
    here = Path(__file__).resolve().parents[1] / "benchmarks"
    subprocess.run([sys.executable, str(here / "record.py"), str(out), "--", str(script), "--x", "1"], check=True,
                   capture_output=True)
    rec = json.loads(out.read_text())
    assert rec["result"] == {"ratio": 3.5}
    assert rec["command"] == f"python {script} --x 1" and len(rec["commit"]) == 40
    assert rec["load"]["samples"] >= 0 and "python" in rec["versions"]
