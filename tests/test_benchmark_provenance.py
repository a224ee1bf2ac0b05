"""benchmarks/provenance.py: the load other processes put on the machine is measured, and our own
process tree is not counted as load."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from provenance import SIMD_FLAGS, LoadSampler, provenance  # noqa: E402

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 1.6: pass"


def test_a_busy_process_outside_the_tree_is_load_and_our_own_child_is_not():
    """Two samplers over the same seconds, one rooted at an idle process (our busy child is then
    "another process") and one rooted here (the child is the benchmark itself): whatever else
    loads the machine meanwhile (other tests, other users) counts in both, so their difference
    is the busy child alone."""
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with LoadSampler(interval=0.4, root=idle.pid) as as_other, LoadSampler(interval=0.4) as as_ours:
            busy = subprocess.Popen([sys.executable, "-c", BUSY])
            busy.wait()
            time.sleep(0.1)
    finally:
        idle.kill()
        idle.wait()
    other, ours = as_other.summary(), as_ours.summary()
    cores = as_other.cores
    assert other["samples"] >= 3 and other["others_cpu_share"]["max"] >= 0.6 / cores
    assert other["others_cpu_share"]["mean"] > ours["others_cpu_share"]["mean"] + 0.25 / cores


def test_provenance_names_the_commit_command_and_versions():
    p = provenance(["python", "bench.py", "--x", "a b"])
    assert p["command"] == "python bench.py --x 'a b'"
    assert len(p["commit"]) == 40 and isinstance(p["dirty"], bool)
    assert {"python", "torch", "numpy"} <= set(p["versions"]) and p["machine"]["cores"] >= 1


def test_the_machine_names_its_vector_extensions():
    """Two machines sold under one CPU name (here: "AMD EPYC" with and without avx512_bf16) ran
    the same benchmark at different speeds; the recorded flags tell them apart."""
    flags = provenance(["x"])["machine"]["cpu_features"]
    line = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith(("flags", "Features"))), "")
    assert flags == [f for f in SIMD_FLAGS if f in line.split(":", 1)[-1].split()]
