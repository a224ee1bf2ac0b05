"""Every case of the hostile-input corpus, run as a user would (a real `tokenmill` process on real
files): the good documents around the hostile one are all kept and counted, the hostile one is
quarantined with its reason, a refusal is one or two lines without a traceback, nothing outside
what tokenmill created is deleted or changed, and no case takes long. The same corpus is timed
and its memory measured by benchmarks/bench_hostile_inputs.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest

from tests.adversarial.conftest import CliResult, assert_clean_error, assert_untouched, run_cli, tree_snapshot
from tests.adversarial.hostile_inputs import CASES, Case

# Every case finishes in seconds once bounded; before, the slowest ran for minutes or exhausted memory.
SECONDS = 60


def _run(case: Case) -> CliResult:
    if not case.python:
        return run_cli(*case.args, cwd=case.root, timeout=SECONDS, env=case.env)
    proc = subprocess.run([sys.executable, "-c", *case.args], cwd=case.root, capture_output=True, text=True,
                          timeout=SECONDS, env={**os.environ, **case.env}, stdin=subprocess.DEVNULL)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def _curated(out: Path) -> tuple[int, list[str]]:
    """(documents kept, the rule of every quarantined row)."""
    kept = sum(pq.ParquetFile(p).metadata.num_rows for p in out.glob("*/part-*.parquet")
               if p.parent.name != "_rejected")
    rules = [str(r) for p in out.glob("_rejected/*.parquet")
             for r in pq.read_table(p, columns=["rule"]).column("rule").to_pylist()]
    return kept, rules


@pytest.mark.parametrize("build", CASES, ids=[b.__name__ for b in CASES])
def test_hostile_case(build: Callable[[Path], Case], workdir: Path) -> None:
    case = build(workdir)
    before = tree_snapshot(workdir)
    t0 = time.perf_counter()
    result = _run(case)
    seconds = time.perf_counter() - t0
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    if case.refused:
        assert_clean_error(result)
        assert_untouched(before, tree_snapshot(workdir), case.created)
    else:
        assert result.returncode == 0, result.stderr[-2000:]
        assert_untouched(before, tree_snapshot(workdir), case.created)
        assert case.out is not None and case.good is not None
        kept, rules = _curated(case.out)
        assert kept == case.good, f"kept {kept} of {case.good} good documents; quarantined {rules}"
        assert len([r for r in rules if r]) >= case.bad, f"the hostile record was not quarantined: {rules}"
    assert seconds < SECONDS
