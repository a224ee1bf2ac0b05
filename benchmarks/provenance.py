"""What every results JSON records about how it was made: the commit (and whether the tree had
uncommitted changes), the exact command, the versions, the machine, and the load that other
processes put on it while the benchmark ran.

The load is sampled, not assumed: `LoadSampler` reads every process's CPU time once per
interval and charges the increase of every process outside the benchmark's own process tree
to "others" (a process that starts and ends between two samples is missed). Its summary is the
others' share of the machine's cores — 0.0 on quiet cores, 0.5 when another job keeps one of
two cores busy — beside the load averages before and after.

    prov = provenance()                 # at the start
    with LoadSampler() as load:         # around the measured work
        ...
    result = {**prov, "load": load.summary(), ...}
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("torch", "numpy", "pyarrow", "tokenizers", "tiktoken", "transformers", "datatrove", "ray", "xxhash")


def git_state(where: Path = REPO) -> dict[str, Any]:
    """{"commit", "dirty"}: HEAD of the checkout that holds `where`, and whether tracked files
    differ from it (a figure from uncommitted code is marked so)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=where).stdout.strip()
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of the packages a benchmark may use (those not installed left out)."""
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve")


def cpu_features() -> list[str]:
    """The vector extensions that decide a CPU benchmark (bf16 autocast needs avx512_bf16 or amx):
    "AMD EPYC" alone does not tell two machines of one name apart."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    present = set(line.split(":", 1)[-1].split())
    return [f for f in SIMD_FLAGS if f in present]


def provenance(argv: list[str] | None = None, where: Path = REPO) -> dict[str, Any]:
    """The fields every results file starts with."""
    import psutil  # here, not at the top: cpu_model() is imported where psutil may be missing (a GPU box)

    return {"command": shlex.join(argv if argv is not None else [Path(sys.executable).name, *sys.argv]),
            **git_state(where), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "versions": versions(), "machine": {"cpu": cpu_model(), "cpu_features": cpu_features(), "cores": os.cpu_count(),
                                                "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
                                                "platform": platform.platform()}}


def _tree(root: int) -> set[int]:
    import psutil

    try:
        proc = psutil.Process(root)
        return {root, *(c.pid for c in proc.children(recursive=True))}
    except psutil.Error:
        return {root}


def _cpu_seconds() -> dict[int, float]:
    import psutil

    out = {}
    for p in psutil.process_iter(["cpu_times"]):
        t = p.info["cpu_times"]
        if t is not None:
            out[p.pid] = t.user + t.system
    return out


class LoadSampler(threading.Thread):
    """The CPU share of every process outside `root`'s tree (default: this process), sampled
    every `interval` seconds until stopped."""

    def __init__(self, interval: float = 1.0, root: int | None = None):
        super().__init__(daemon=True)
        self.interval, self.root = interval, root if root is not None else os.getpid()
        self.cores = os.cpu_count() or 1
        self.shares: list[float] = []
        self.load_before = os.getloadavg()
        self.load_after: tuple[float, float, float] | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        before, t0 = _cpu_seconds(), time.monotonic()
        while not self._stop_event.wait(self.interval):
            ours = _tree(self.root)
            now, t1 = _cpu_seconds(), time.monotonic()
            busy = sum(max(0.0, s - before.get(pid, s)) for pid, s in now.items() if pid not in ours)
            self.shares.append(busy / ((t1 - t0) * self.cores))
            before, t0 = now, t1

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join()
        self.load_after = os.getloadavg()

    def __enter__(self) -> "LoadSampler":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """Others' share of the cores (mean, 95th percentile, max over the samples) and the load
        averages before and after."""
        s = sorted(self.shares)
        share = {"mean": round(sum(s) / len(s), 3), "p95": round(s[min(len(s) - 1, int(0.95 * len(s)))], 3),
                 "max": round(s[-1], 3)} if s else None
        return {"others_cpu_share": share, "samples": len(s), "interval_s": self.interval,
                "load_avg_before": [round(x, 2) for x in self.load_before],
                "load_avg_after": [round(x, 2) for x in self.load_after or os.getloadavg()]}
