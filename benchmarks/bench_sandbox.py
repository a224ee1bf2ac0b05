"""Cost per candidate program of the code-task sandbox: `eval.sandbox.isolation: process` (a separate
interpreter with rlimits and the audit hook) against `namespaces` (the default: user, mount, PID,
network, IPC, UTS and cgroup namespaces, read-only root, seccomp, and, where one can be made, the
candidate's own cgroup with pids.max and a memory cap; eval/sandbox_cgroup.py).

Two programs: a trivial one (`pass`: the launch cost alone) and one real code-task item, the first
of the shipped python_code task (src/tokenmill/tasks/python_code.jsonl) with its reference solution
and tests. Interleaved A/B: every repetition runs both programs under both isolations, the order of
the two isolations alternating, so drift on a loaded machine hits both alike. Wall time per
candidate from the caller's side (`run_program`, start to verdict); every verdict must be `passed`.
Prints one JSON object last (benchmarks/record.py adds commit, command and load):

    .venv/bin/python benchmarks/record.py benchmarks/results/sandbox.json -- benchmarks/bench_sandbox.py --n 30
    .venv/bin/python benchmarks/bench_sandbox.py --n 5     # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
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


def measure(n: int, warmup: int) -> dict[str, Any]:
    progs = programs()
    cfgs = {iso: SandboxConfig(isolation=iso) for iso in ISOLATIONS}  # type: ignore[arg-type]
    times: dict[tuple[str, str], list[float]] = {(p, iso): [] for p in progs for iso in ISOLATIONS}
    statuses: dict[tuple[str, str], set[str]] = {key: set() for key in times}
    for rep in range(-warmup, n):
        order = ISOLATIONS if rep % 2 == 0 else ISOLATIONS[::-1]
        for name, source in progs.items():
            for iso in order:
                start = time.perf_counter()
                verdict = run_program(source, cfgs[iso])
                elapsed = (time.perf_counter() - start) * 1000
                if rep >= 0:  # warm-up runs fill the page cache and the cached probes
                    times[(name, iso)].append(elapsed)
                    statuses[(name, iso)].add(verdict.status)
    rows = [
        {"program": p, "isolation": iso, "n": len(ms), "statuses": sorted(statuses[(p, iso)]), **summary(ms)}
        for (p, iso), ms in times.items()
    ]
    extra = {p: round(statistics.median(times[(p, "namespaces")]) - statistics.median(times[(p, "process")]), 2) for p in progs}
    return {"rows": rows, "namespaces_extra_median_ms": extra}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=30, help="measured repetitions per program and isolation")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured repetitions first")
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
        **measure(args.n, args.warmup),
    }
    bad = [r for r in result["rows"] if r["statuses"] != ["passed"]]
    if bad:
        raise SystemExit(f"a verdict was not passed: {bad}")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
