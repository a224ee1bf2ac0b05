"""The hostile-input corpus (tests/adversarial/hostile_inputs.py), each case run as a user would
run it, as a real process: its wall time, its peak memory (the process tree's max RSS from
wait4), its exit, whether it printed a traceback, how many good documents it kept, and whether
anything outside what tokenmill created was deleted or changed.

With --baseline-src, every case also runs on an earlier checkout's source (the same interpreter
and packages), interleaved with this one, so the table shows what the bounds changed. A run is
stopped at --timeout seconds and capped at --memory-gb of address space (an unbounded case on the
baseline is reported as killed at the bound, not left to exhaust the machine).

    .venv/bin/python benchmarks/record.py benchmarks/results/hostile_inputs.json -- \\
        benchmarks/bench_hostile_inputs.py --baseline-src /tmp/tm-hostile-base/src
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.adversarial.conftest import tree_snapshot  # noqa: E402
from tests.adversarial.hostile_inputs import CASES, Case  # noqa: E402


def _limits(memory_bytes: int) -> Any:
    def apply() -> None:
        os.setsid()  # its own process group: a timeout kills the whole tree
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return apply


def _kept(case: Case) -> int | None:
    """Documents in the curated parts of the case's output (None: not a curation case)."""
    if case.out is None:
        return None
    rows = 0
    for part in case.out.glob("*/part-*.parquet"):
        if part.parent.name != "_rejected":
            rows += pq.ParquetFile(part).metadata.num_rows
    return rows


def _rejected_rules(case: Case) -> dict[str, int] | None:
    """Quarantined rows of the case's output by rule (None: not a curation case)."""
    if case.out is None:
        return None
    rules: dict[str, int] = {}
    for part in case.out.glob("_rejected/*.parquet"):
        for rule in pq.read_table(part, columns=["rule"]).column("rule").to_pylist():
            rules[str(rule)] = rules.get(str(rule), 0) + 1
    return rules


def _changed(before: dict[str, str], after: dict[str, str], created: tuple[str, ...]) -> int:
    """Paths deleted or changed, plus paths made outside what the case allows tokenmill to create."""
    lost = sum(1 for p in before if before[p] != after.get(p))
    stray = sum(1 for p in after if p not in before and not any(p == c or p.startswith(c + "/") for c in created))
    return lost + stray


def run_case(build: Any, src: Path, timeout: float, memory_gb: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        root = Path(tmp) / "case"
        root.mkdir()
        case: Case = build(root)
        before = tree_snapshot(root)
        argv = [sys.executable, "-c", *case.args] if case.python else [sys.executable, "-m", "tokenmill", *case.args]
        env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200", **case.env}
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, preexec_fn=_limits(int(memory_gb * 2**30)))
        try:
            out, err = proc.communicate(timeout=timeout)
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            killed = True
        seconds = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # max over every child waited for so far
        text = (out + err).decode(errors="replace")
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        return {"case": case.name, "group": case.group, "what": case.what, "seconds": round(seconds, 3),
                "peak_rss_mb_max_so_far": round(usage.ru_maxrss / 1024, 1), "killed_at_timeout": killed,
                "exit": proc.returncode, "traceback": "Traceback" in text, "stderr_lines": len(lines),
                "last_line": lines[-1][:300] if lines else "", "good": case.good, "kept": _kept(case),
                "rejected": _rejected_rules(case),
                "refused_expected": case.refused, "tree_changes": _changed(before, tree_snapshot(root), case.created)}


def peak_rss(build: Any, src: Path, timeout: float, memory_gb: float) -> dict[str, Any]:
    """run_case in a fresh child of its own, so RUSAGE_CHILDREN's maximum is this case's alone."""
    code = ("import json,sys; sys.path.insert(0, sys.argv[1]); import bench_hostile_inputs as b; "
            "from tests.adversarial import hostile_inputs as h; "
            "print(json.dumps(b.run_case(getattr(h, sys.argv[2]), __import__('pathlib').Path(sys.argv[3]), "
            "float(sys.argv[4]), float(sys.argv[5]))))")
    res = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), build.__name__, str(src),
                          str(timeout), str(memory_gb)], capture_output=True, text=True, cwd=REPO, check=True)
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    rec["peak_rss_mb"] = rec.pop("peak_rss_mb_max_so_far")
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-src", type=Path, help="an earlier checkout's src/ to run beside this one")
    ap.add_argument("--repeats", type=int, default=3, help="runs per case and source (the median is reported)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is killed")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap per run")
    ap.add_argument("--only", nargs="*", help="case names")
    args = ap.parse_args()
    sources = {"tokenmill": REPO / "src", **({"baseline": args.baseline_src} if args.baseline_src else {})}
    records = []
    for build in CASES:
        if args.only and build.__name__ not in args.only:
            continue
        for label, src in sources.items():
            runs = []
            for _ in range(args.repeats if label == "tokenmill" else 1):  # the baseline's unbounded cases take minutes
                runs.append(peak_rss(build, src, args.timeout, args.memory_gb))
            rec = {**runs[-1], "source": label, "repeats": len(runs),
                   "seconds": statistics.median(r["seconds"] for r in runs),
                   "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)}
            print(f"{rec['case']:28s} {label:9s} {rec['seconds']:8.2f} s {rec['peak_rss_mb']:8.0f} MB exit {rec['exit']} "
                  f"kept {rec['kept']}/{rec['good']} changes {rec['tree_changes']} tb {rec['traceback']}", file=sys.stderr)
            records.append(rec)
    print(json.dumps({"timeout_s": args.timeout, "memory_gb": args.memory_gb, "cores": os.cpu_count(),
                      "baseline_src": str(args.baseline_src) if args.baseline_src else None, "records": records}))


if __name__ == "__main__":
    main()
