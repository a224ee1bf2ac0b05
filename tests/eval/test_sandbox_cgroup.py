"""The candidate's own cgroup, with real processes and the audit hook switched off: a fork bomb is
capped (counted from outside, in /proc, while it runs) as root and as an unprivileged evaluator, a
memory hog spread over many processes stays under the group's total, nothing is left afterwards,
and a root evaluator without a pids cgroup is refused with one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.eval.test_sandbox import AS_NOBODY, DEFEAT_HOOK, HEADER, namespaces_only, run, unprivileged_python
from tokenmill.eval.config import SandboxConfig
from tokenmill.eval.sandbox import run_program
from tokenmill.eval.sandbox_cgroup import PARENT, cgroup_problem, hierarchies

SRC = Path(__file__).parents[2] / "src"
# Unbounded it makes 64 children and 64 grandchildren (harmless if the caps ever failed); each lives
# about 1.5 s so the processes are all alive at once. The program reports how many forks it got.
BOMB = """import os, sys, time
forks = 0
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        try:
            os.fork()
        except OSError:
            pass
        time.sleep(1.5)
        os._exit(0)
    forks += 1
print('FORKS', forks, file=sys.stderr, flush=True)
time.sleep(1.0)
"""
# 8 children x 100 MiB, each page written; the parent fails unless all 8 held their memory.
HOG = """import os, sys, time
kids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        block = b'x' * (100 * 1024 * 1024)
        time.sleep(1.5)
        os._exit(0 if len(block) else 1)
    kids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids]
print('CODES', codes, file=sys.stderr)
assert codes == [0] * 8, codes
"""
cgroups_only = pytest.mark.skipif(cgroup_problem() is not None, reason=f"no cgroup: {cgroup_problem()}")


class TreeSampler(threading.Thread):
    """Peak count and peak summed RSS of this process's live descendants, sampled from /proc."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.peak_rss, self.done, self.ready = 0, 0, threading.Event(), threading.Event()
        self.seen: set[int] = set()

    def run(self) -> None:
        me, page = os.getpid(), os.sysconf("SC_PAGE_SIZE")
        earlier: set[int] | None = None  # descendants from before the program (a test worker's resource tracker)
        while not self.done.is_set():
            parents, rss = {}, {}
            for entry in os.listdir("/proc"):
                try:
                    if entry.isdigit():
                        stat = Path(f"/proc/{entry}/stat").read_text()
                        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
                        rss[int(entry)] = int(Path(f"/proc/{entry}/statm").read_text().split()[1]) * page
                except (OSError, ValueError, IndexError):
                    continue
            tree = [p for p in parents if self._descends(p, me, parents)]
            earlier = set(tree) if earlier is None else earlier
            # neither those processes nor anything they start later (a leftover of an earlier test)
            tree = [p for p in tree if p not in earlier and not any(self._descends(p, e, parents) for e in earlier)]
            self.ready.set()
            self.seen.update(tree)
            self.peak = max(self.peak, len(tree))
            self.peak_rss = max(self.peak_rss, sum(rss.get(p, 0) for p in tree))
            self.done.wait(0.005)

    @staticmethod
    def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid == ancestor:
                return True
            if pid <= 1:
                return False
        return False

    def left(self, wait_s: float = 3.0) -> list[int]:
        """Processes it saw that still exist after `wait_s` (killed ones are reaped by their new parent)."""
        deadline = time.monotonic() + wait_s
        while (alive := [p for p in self.seen if os.path.exists(f"/proc/{p}")]) and time.monotonic() < deadline:
            time.sleep(0.02)
        return alive

    def __enter__(self) -> TreeSampler:
        self.start()
        self.ready.wait()  # the first pass took the processes that were there before the program
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.join()


def our_groups() -> list[Path]:
    """Candidate groups of this evaluator still present in any hierarchy."""
    return [g for h in hierarchies() for g in (h.base / PARENT).glob(f"{PARENT}-{os.getpid()}-*")]


@cgroups_only
@pytest.mark.parametrize("isolation", [pytest.param("namespaces", marks=namespaces_only), "process"])
def test_a_fork_bomb_is_capped_by_the_groups_pids_max(isolation: str):
    cfg = SandboxConfig(timeout_s=5, max_processes=4, isolation=isolation, stderr_lines=300)  # type: ignore[arg-type]
    with TreeSampler() as sampler:
        v = run_program(DEFEAT_HOOK + BOMB, cfg)
    forks = int(re.search(r"FORKS (\d+)", v.stderr_tail).group(1))  # type: ignore[union-attr]
    launcher = 3 if isolation == "namespaces" else 1  # unshare, the jail's PID 1, the candidate
    assert v.passed and v.seconds < cfg.timeout_s, v
    assert 1 <= forks <= cfg.max_processes, forks
    assert sampler.peak <= cfg.max_processes + launcher, sampler.peak
    assert len(sampler.seen) > launcher and sampler.left() == [] and our_groups() == []


@pytest.mark.slow
@cgroups_only
@namespaces_only
def test_memory_spread_over_processes_is_capped_by_the_group_total():
    small = SandboxConfig(
        timeout_s=8, memory_mb=256, disk_mb=16, max_processes=16, stderr_lines=300
    )  # group total 256 + 16 + 64 MiB
    with TreeSampler() as sampler:
        v = run(DEFEAT_HOOK + HOG, small)
    assert v.status in ("failed", "killed") and "-9" in v.stderr_tail + str(v.exit_code), v
    # 8 x 100 MiB would be 800 MiB; RSS sums count the shared interpreter pages once per process
    assert sampler.peak_rss < 600 * 1024 * 1024, sampler.peak_rss
    assert our_groups() == []
    assert run(DEFEAT_HOOK + HOG, SandboxConfig(timeout_s=8, memory_mb=1024, max_processes=16)).passed  # room for all 8


EVALUATE = """import json, sys
from tokenmill.eval.config import SandboxConfig
from tokenmill.eval.sandbox import run_program
from tokenmill.eval.sandbox import run_program
v = run_program(open(sys.argv[1]).read(), SandboxConfig(timeout_s=5, max_processes=4))
print(json.dumps([v.status, v.seconds, v.stderr_tail]))
"""


@namespaces_only
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_a_fork_bomb_is_capped_for_an_unprivileged_evaluator_by_rlimit_nproc():
    found = unprivileged_python(SRC)
    if found is None:
        pytest.skip("no interpreter that nobody can run imports tokenmill here")
    exe, env = found
    shared = Path(tempfile.mkdtemp())
    try:
        (shared / "bomb.py").write_text(HEADER + DEFEAT_HOOK + BOMB)
        (shared / "evaluate.py").write_text(EVALUATE)
        for f in (shared, *shared.iterdir()):
            f.chmod(0o755)
        with TreeSampler() as sampler:
            done = subprocess.run(
                [*AS_NOBODY, exe, str(shared / "evaluate.py"), str(shared / "bomb.py")],
                env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        status, seconds, tail = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(shared)
    forks = int(re.search(r"FORKS (\d+)", tail).group(1))  # type: ignore[union-attr]
    assert status == "passed" and seconds < 5 and 1 <= forks <= 4, (status, tail)
    # setpriv's interpreter, unshare, the jail's PID 1, the candidate, its 4 and one: the kernel lets
    # RLIMIT_NPROC's count reach one past what the bootstrap counts in the namespace (measured: 9)
    assert sampler.peak <= 4 + 4 + 1, sampler.peak


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root to hide the pids hierarchy")
def test_root_without_a_pids_cgroup_is_refused_with_one_line():
    # The real evaluator in a mount namespace where no hierarchy has the pids controller
    hide = " ".join(f"umount -l {h.base}" for h in hierarchies() if "pids" in h.controllers and h.version == 1)
    if not hide:
        pytest.skip("the pids controller is not a v1 hierarchy here")
    probe = (
        "from tokenmill.errors import UserError\nfrom tokenmill.eval.config import SandboxConfig\n"
        "from tokenmill.eval.sandbox import run_program\ntry:\n    run_program('pass', SandboxConfig())\n"
        "except UserError as e:\n    print(e)\nelse:\n    print('RAN')\n"
        "print(run_program('pass', SandboxConfig(isolation='process')).status)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{SRC}:{os.environ.get('PYTHONPATH', '')}"}
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{hide} && exec "$0" -c "$1"', sys.executable, probe]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line, status = done.stdout.strip().splitlines()
    assert line.startswith("eval.sandbox: the evaluator runs as root and no pids cgroup can be made here (no cgroup"), line
    assert "code tasks are refused" in line and status == "passed"  # isolation: process is the user's explicit choice
