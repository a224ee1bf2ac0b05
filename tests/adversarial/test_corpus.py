"""Every case of the hostile-input corpus, run as a user would (a real `tokenmill` process on real
files): the good documents around the hostile one are all kept and counted, the hostile one is
quarantined with its reason, a refusal is one or two lines without a traceback (naming the file
it refuses), nothing outside what tokenmill created is deleted or changed (in a run tokenmill made
earlier, nothing but its own event log and stage records: never a checkpoint), no case takes long,
and the cases that must stay bounded stay under their peak RSS. The same corpus is timed
and its memory measured by benchmarks/bench_hostile_inputs.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest

from tests.adversarial.conftest import CliResult, assert_clean_error, assert_untouched, measured, read_peak_kb, tree_snapshot
from tests.adversarial.hostile_inputs import CASES, Case

# Every case finishes in seconds once bounded; before, the slowest ran for minutes or exhausted memory.
SECONDS = 60


def _run(case: Case) -> tuple[CliResult, float]:
    """The case as a real process: its result and its own peak RSS in MB (see conftest.measured)."""
    argv = [sys.executable, "-c", *case.args] if case.python else [sys.executable, "-m", "tokenmill", *case.args]
    env = {**os.environ, "COLUMNS": "200", **case.env}
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        with open(Path(tmp) / "out", "w+b") as out, open(Path(tmp) / "err", "w+b") as err:
            proc = subprocess.Popen(
                measured(argv, peak), cwd=case.root, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip
            try:
                proc.wait(timeout=SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher and the command
                proc.wait()
            out.seek(0)
            err.seek(0)
            text = (out.read().decode(errors="replace"), err.read().decode(errors="replace"))
        return CliResult(proc.returncode, *text), read_peak_kb(peak) / 1024


def _curated(out: Path) -> tuple[int, list[str]]:
    """(documents kept, the rule of every quarantined row)."""
    kept = sum(pq.ParquetFile(p).metadata.num_rows for p in out.glob("*/part-*.parquet") if p.parent.name != "_rejected")
    rules = [
        str(r) for p in out.glob("_rejected/*.parquet") for r in pq.read_table(p, columns=["rule"]).column("rule").to_pylist()
    ]
    return kept, rules


def _without(snap: dict[str, str], owned: tuple[str, ...]) -> dict[str, str]:
    """The snapshot less tokenmill's own bookkeeping, which a later command may update."""
    return {p: h for p, h in snap.items() if not any(p == o or p.startswith(o + "/") for o in owned)}


def _check_outcome(case: Case, result: CliResult) -> None:
    refused = case.refused if case.refused is not None else result.returncode != 0  # None: refusing is one way
    if refused:
        assert_clean_error(result, max_lines=case.max_lines)
        return
    assert result.returncode == 0, result.stderr[-2000:]
    if case.out is None:
        return
    assert case.good is not None
    kept, rules = _curated(case.out)
    assert kept == case.good, f"kept {kept} of {case.good} good documents; quarantined {rules}"
    assert len([r for r in rules if r]) >= case.bad, f"the hostile record was not quarantined: {rules}"
    assert case.rule is None or case.rule in rules, f"not quarantined as {case.rule}: {rules}"


# The slowest cases (3 s or more each: big labelled corpora, a huge task, a mixture run, training
# or a report first) run in `make test-slow` and CI; the hostile-inputs benchmark measures them all.
SLOW_CASES = {"mixture_weight_typo", "classify_labelled_big", "safety_labelled_big", "bigbench_huge_task",
              "report_odd_events", "token_ids_past_vocab_train", "pickled_optimizer", "watch_deep_event", "trace_long_line"}
assert SLOW_CASES <= {b.__name__ for b in CASES}, "a slow case that is not a case"


@pytest.mark.parametrize("build", [pytest.param(b, id=b.__name__, marks=[pytest.mark.slow] if b.__name__ in SLOW_CASES else [])
                                   for b in CASES])
def test_hostile_case(build: Callable[[Path], Case], workdir: Path) -> None:
    case = build(workdir)
    before = tree_snapshot(workdir)
    t0 = time.perf_counter()
    result, peak_mb = _run(case)
    seconds = time.perf_counter() - t0
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    _check_outcome(case, result)
    assert_untouched(_without(before, case.may_change), _without(tree_snapshot(workdir), case.may_change), case.created)
    for text in case.must_say:
        assert text in result.stderr + result.stdout, f"{text!r} not said: {result.stderr[-1000:]}"
    assert seconds < (case.within_s or SECONDS), f"took {seconds:.1f} s"
    assert case.max_rss_mb is None or peak_mb < case.max_rss_mb, f"peak RSS {peak_mb:.0f} MB"
