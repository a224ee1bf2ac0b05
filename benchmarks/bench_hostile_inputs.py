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
from tests.adversarial.conftest import measured, read_peak_kb, tree_snapshot  # noqa: E402
from tests.adversarial.hostile_inputs import BUILD_SRC_VAR, CASES, Case  # noqa: E402


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


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == c or path.startswith(c + "/") for c in prefixes)


def _changed(before: dict[str, str], after: dict[str, str], case: Case) -> tuple[int, int]:
    """(paths that were there before and are now deleted or changed, paths made outside what the
    case allows tokenmill to create); a run's own bookkeeping (case.may_change) is neither."""
    created = case.created + case.may_change
    lost = sum(1 for p in before if before[p] != after.get(p) and not _under(p, case.may_change))
    stray = sum(1 for p in after if p not in before and not _under(p, created))
    return lost, stray


def _run_limited(
    argv: list[str], root: Path, env: dict[str, str], timeout: float, memory_gb: float
) -> tuple[bytes, bytes, bool, int, int]:
    """(stdout, stderr, killed at the timeout, peak RSS in KB, exit code) of one process tree. The peak is
    the command's own (conftest.measured): neither the builder's earlier work (the tiny run it trains)
    nor this process's size counts."""
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        with open(Path(tmp) / "out", "w+b") as out, open(Path(tmp) / "err", "w+b") as err:
            proc = subprocess.Popen(
                measured(argv, peak), cwd=root, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                preexec_fn=_limits(int(memory_gb * 2**30)),
            )  # fmt: skip
            killed = False
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                killed = True
            out.seek(0)
            err.seek(0)
            return out.read(), err.read(), killed, read_peak_kb(peak), proc.returncode


def run_case(build: Any, src: Path, timeout: float, memory_gb: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        root = Path(tmp) / "case"
        root.mkdir()
        os.environ[BUILD_SRC_VAR] = str(src)  # a run the case starts from is built by the source measured
        case: Case = build(root)
        before = tree_snapshot(root)
        argv = [sys.executable, "-c", *case.args] if case.python else [sys.executable, "-m", "tokenmill", *case.args]
        env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200", **case.env}
        t0 = time.perf_counter()
        out, err, killed, maxrss_kb, exit_code = _run_limited(argv, root, env, timeout, memory_gb)
        seconds = time.perf_counter() - t0
        text = (out + err).decode(errors="replace")
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        rec = {
            "case": case.name,
            "group": case.group,
            "what": case.what,
            "seconds": round(seconds, 3),
            "peak_rss_mb_max_so_far": round(maxrss_kb / 1024, 1),
            "killed_at_timeout": killed,
            "exit": exit_code,
            "traceback": "Traceback" in text,
            "stderr_lines": len(lines),
            "last_line": lines[-1][:300] if lines else "",
            "good": case.good,
            "kept": _kept(case),
            "rejected": _rejected_rules(case),
            "refused_expected": case.refused,
            "within_s": case.within_s,
            "size_mb": case.size_mb,
            "overran": case.within_s is not None and seconds > case.within_s,
            "named": all(t in text for t in case.must_say),
        }
        rec["paths_lost"], rec["paths_stray"] = _changed(before, tree_snapshot(root), case)
        return rec


def run_in_child(
    build: Any, src: Path, timeout: float, memory_gb: float, normal: Path | None, size_mb: float | None = None
) -> dict[str, Any]:
    """run_case in a fresh child of its own, so nothing of an earlier case is in its numbers;
    a growth case (hostile_inputs.GROWTH) is built at size_mb."""
    code = (
        "import json,sys,functools; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "import bench_hostile_inputs as b; from tests.adversarial import hostile_inputs as h; "
        "build = b.normal_case(Path(sys.argv[6]), int(sys.argv[7])) if sys.argv[2] == 'normal_html' "
        "else getattr(h, sys.argv[2]); "
        "build = functools.partial(build, size_mb=float(sys.argv[8])) if sys.argv[8] else build; "
        "print(json.dumps(b.run_case(build, Path(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))))"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(Path(__file__).parent),
            build.__name__,
            str(src),
            str(timeout),
            str(memory_gb),
            str(normal or ""),
            str(NORMAL_FILES[0]),
            "" if size_mb is None else str(size_mb),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    rec["peak_rss_mb"] = rec.pop("peak_rss_mb_max_so_far")
    return rec


NORMAL_FILES = [300]  # --normal-files, for the child that rebuilds the normal case


def normal_case(corpus: Path, files: int) -> Any:
    """Not hostile: the first `files` pages of a real HTML corpus through every default step, so the
    table also shows what the bounds cost on ordinary data."""
    pages = sorted(corpus.rglob("*.html"))[:files]

    def normal_html(root: Path) -> Case:
        src = root / "in"
        src.mkdir()
        for i, page in enumerate(pages):
            (src / f"{i:05d}.html").symlink_to(page)
        return Case(
            "normal_html",
            "normal",
            f"{len(pages)} real HTML pages ({corpus.name}), every default step",
            root,
            ["curate", "in", "-o", "out"],
            good=None,
            out=root / "out",
            created=("out", ".out.events.jsonl"),
        )

    return normal_html


# The growth cases at two sizes of their hostile input (MB): the same peak RSS at both shows memory
# bounded by settings, not by the input (the tests run each at its builder's small default).
SIZES: dict[str, tuple[float, float]] = {
    "trace_long_line": (4, 16),
    # both sizes over the default cap of 20,000 examples a label (records of at most 400 bytes: about
    # 50,000 and 200,000 a label): below it the sample, and so memory, grows with the file up to the cap
    "classify_labelled_big": (25, 100),
    "safety_labelled_big": (25, 100),
    "bigbench_huge_task": (500, 2000),
}


def _measure_sizes(build: Any, label: str, src: Path, runs: int, args: argparse.Namespace) -> dict[str, Any]:
    """A growth case at its two sizes: the larger one's record, with the peak RSS at each size."""
    small, large = (_measure(build, label, src, runs, args, size) for size in SIZES[build.__name__])
    large["rss_by_size_mb"] = {f"{small['size_mb']:g}": small["peak_rss_mb"], f"{large['size_mb']:g}": large["peak_rss_mb"]}
    large["seconds_by_size_mb"] = {f"{small['size_mb']:g}": small["seconds"], f"{large['size_mb']:g}": large["seconds"]}
    return large


def _measure(
    build: Any, label: str, src: Path, runs: int, args: argparse.Namespace, size_mb: float | None = None
) -> dict[str, Any]:
    recs = [run_in_child(build, src, args.timeout, args.memory_gb, args.normal, size_mb) for _ in range(runs)]
    rec = {
        **recs[-1],
        "source": label,
        "repeats": len(recs),
        "seconds_all": [r["seconds"] for r in recs],
        "seconds": statistics.median(r["seconds"] for r in recs),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in recs),
    }
    size = f"@{size_mb:g}MB" if size_mb is not None else ""
    print(
        f"{rec['case'] + size:28s} {label:9s} {rec['seconds']:8.2f} s {rec['peak_rss_mb']:8.0f} MB exit {rec['exit']} "
        f"kept {rec['kept']}/{rec['good']} lost {rec['paths_lost']} stray {rec['paths_stray']} tb {rec['traceback']} "
        f"overran {rec['overran']} named {rec['named']} | {rec['last_line'][:160]}",
        file=sys.stderr,
    )
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-src", type=Path, help="an earlier checkout's src/ to run beside this one")
    ap.add_argument("--repeats", type=int, default=3, help="runs per case and source (the median is reported)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is killed")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap per run")
    ap.add_argument("--normal", type=Path, help="a real HTML corpus: time ordinary pages too (normal_html)")
    ap.add_argument("--normal-files", type=int, default=300, help="pages of --normal to curate")
    ap.add_argument("--only", nargs="*", help="case names")
    args = ap.parse_args()
    NORMAL_FILES[0] = args.normal_files
    sources = {"tokenmill": REPO / "src", **({"baseline": args.baseline_src} if args.baseline_src else {})}
    builds = list(CASES) + ([normal_case(args.normal, args.normal_files)] if args.normal else [])
    records = []
    for build in builds:
        if args.only and build.__name__ not in args.only:
            continue
        if build.__name__ == "normal_html":  # the cost on ordinary data: A/B interleaved, medians
            runs: dict[str, list[dict[str, Any]]] = {label: [] for label in sources}
            for _ in range(args.repeats):
                for label, src in sources.items():
                    runs[label].append(_measure(build, label, src, 1, args))
            for label, recs in runs.items():
                secs = [r["seconds"] for r in recs]
                records.append(
                    {
                        **recs[-1],
                        "repeats": len(recs),
                        "seconds_all": secs,
                        "seconds": statistics.median(secs),
                        "peak_rss_mb": max(r["peak_rss_mb"] for r in recs),
                    }
                )
            continue
        measure = _measure_sizes if build.__name__ in SIZES else _measure
        for label, src in sources.items():  # the baseline's unbounded cases run to the limit: once
            records.append(measure(build, label, src, args.repeats if label == "tokenmill" else 1, args))
    print(
        json.dumps(
            {
                "timeout_s": args.timeout,
                "memory_gb": args.memory_gb,
                "cores": os.cpu_count(),
                "baseline_src": str(args.baseline_src) if args.baseline_src else None,
                "normal_corpus": str(args.normal) if args.normal else None,
                "records": records,
            }
        )
    )


if __name__ == "__main__":
    main()
