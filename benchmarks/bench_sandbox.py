"""Cost per candidate program of the code-task sandbox: `eval.sandbox.isolation: process` (a separate
interpreter with rlimits and the audit hook) against `namespaces` (the default: user, mount, PID,
network, IPC, UTS and cgroup namespaces, read-only root, seccomp, and, where one can be made, the
candidate's own cgroup with pids.max and a memory cap; eval/sandbox_cgroup.py).

Two programs: a trivial one (`pass`: the launch cost alone) and one real code-task item, the first
of the shipped python_code task (src/tokenmill/tasks/python_code.jsonl) with its reference solution
and tests. Interleaved A/B: every repetition runs both programs under both isolations, the order of
the two isolations alternating, so drift on a loaded machine hits both alike. Wall time per
candidate from the caller's side (`run_program`, start to verdict); every verdict must be `passed`.
With --baseline-src, a third arm `before` runs the same programs through an earlier checkout's
`run_program` at its default settings (the in-process audit hook sandbox), in a child interpreter
that stays up and times each call itself, interleaved with the two arms here.
Prints one JSON object last (benchmarks/record.py adds commit, command and load):

    .venv/bin/python benchmarks/record.py benchmarks/results/sandbox.json -- benchmarks/bench_sandbox.py --n 30 \
        --baseline-src /tmp/tm-hostile-base/src
    .venv/bin/python benchmarks/bench_sandbox.py --n 5     # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tokenmill.eval.config import SandboxConfig, TaskConfig
from tokenmill.eval.sandbox import program_source, run_program
from tokenmill.eval.sandbox_cgroup import cgroup_problem
from tokenmill.eval.sandbox_launch import namespaces_problem
from tokenmill.eval.tasks import GenItem, load_task

ISOLATIONS = ("process", "namespaces")


def programs() -> dict[str, str]:
    task = TaskConfig(name="python-code", path="package:tasks/python_code.jsonl", format="jsonl")
    item = load_task(task)[0]
    assert isinstance(item, GenItem) and item.solution is not None
    return {"trivial": "pass\n", f"python_code line {item.line}": program_source(item, item.solution)}


def summary(ms: list[float]) -> dict[str, float]:
    q1, q2, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    return {"median_ms": round(q2, 2), "q1_ms": round(q1, 2), "q3_ms": round(q3, 2), "iqr_ms": round(q3 - q1, 2)}


# The baseline's side: read one program (JSON) a line, run it, answer [milliseconds, status].
BASELINE_LOOP = """import json, sys, time
from tokenmill.eval.config import SandboxConfig
from tokenmill.eval.sandbox import run_program
cfg = SandboxConfig()
for line in sys.stdin:
    start = time.perf_counter()
    v = run_program(json.loads(line), cfg)
    print(json.dumps([(time.perf_counter() - start) * 1000, v.status]), flush=True)
"""


class Baseline:
    """An earlier checkout's run_program in a child interpreter that stays up (its import is paid once)."""

    def __init__(self, src: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BASELINE_LOOP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def run(self, source: str) -> tuple[float, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(source) + "\n")
        self.proc.stdin.flush()
        ms, status = json.loads(self.proc.stdout.readline())
        return float(ms), str(status)


def measure(n: int, warmup: int, baseline: Baseline | None) -> dict[str, Any]:
    progs = programs()
    cfgs = {iso: SandboxConfig(isolation=iso) for iso in ISOLATIONS}  # type: ignore[arg-type]
    arms = (*ISOLATIONS, "before") if baseline else ISOLATIONS
    times: dict[tuple[str, str], list[float]] = {(p, arm): [] for p in progs for arm in arms}
    statuses: dict[tuple[str, str], set[str]] = {key: set() for key in times}
    for rep in range(-warmup, n):
        order = arms[rep % len(arms) :] + arms[: rep % len(arms)]  # each arm goes first in turn
        for name, source in progs.items():
            for arm in order:
                if arm == "before" and baseline is not None:
                    elapsed, status = baseline.run(source)
                else:
                    start = time.perf_counter()
                    status = run_program(source, cfgs[arm]).status
                    elapsed = (time.perf_counter() - start) * 1000
                if rep >= 0:  # warm-up runs fill the page cache and the cached probes
                    times[(name, arm)].append(elapsed)
                    statuses[(name, arm)].add(status)
    rows = [
        {"program": p, "isolation": arm, "n": len(ms), "statuses": sorted(statuses[(p, arm)]), **summary(ms)}
        for (p, arm), ms in times.items()
    ]
    med = {key: statistics.median(ms) for key, ms in times.items()}
    extra = {p: round(med[(p, "namespaces")] - med[(p, "process")], 2) for p in progs}
    out: dict[str, Any] = {"rows": rows, "namespaces_extra_median_ms": extra}
    if baseline:
        out["namespaces_over_before"] = {p: round(med[(p, "namespaces")] / med[(p, "before")], 2) for p in progs}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=30, help="measured repetitions per program and isolation")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured repetitions first")
    ap.add_argument("--baseline-src", type=Path, help="an earlier checkout's src/: its sandbox as a third arm, `before`")
    args = ap.parse_args()
    if namespaces_problem() is not None:
        raise SystemExit(f"namespaces isolation does not work here: {namespaces_problem()}")
    result = {
        "n": args.n,
        "warmup": args.warmup,
        "uid": os.getuid(),
        "cgroup": cgroup_problem() is None,
        "cgroup_problem": cgroup_problem(),
        "kernel": os.uname().release,
        "baseline_src": str(args.baseline_src) if args.baseline_src else None,
        **measure(args.n, args.warmup, Baseline(args.baseline_src) if args.baseline_src else None),
    }
    bad = [r for r in result["rows"] if r["statuses"] != ["passed"]]
    if bad:
        raise SystemExit(f"a verdict was not passed: {bad}")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
