"""Running a candidate program (prompt + completion + tests, one file) in a separate, limited
process, and pass@k over the results (code tasks).

What `run_program` does depends on `eval.sandbox.isolation` (eval/sandbox_launch.py builds the
command):

* `namespaces` (default), a kernel boundary: the program runs in its own user, mount, PID,
  network, IPC, UTS and cgroup namespaces (util-linux `unshare`), on a read-only root that holds
  only what Python needs, with its own tmpfs (capped at `disk_mb` and `max_files`) as the only
  writable place, a fresh /proc, no capabilities, no_new_privs and a seccomp filter
  (eval/sandbox_jail.py, eval/sandbox_seccomp.py). When it exits or times out, the kernel kills
  every process of its PID namespace; nothing of it is on the host disk. Where namespaces do not
  work, code tasks are refused with one line (no silent fallback). The kernel it shares stays the
  attack surface.
* `process`: a fresh `sys.executable -I -B` in a fresh temporary directory (cwd, HOME, TMPDIR;
  removed afterwards, permissions given back first), and `unshare -rn` for the network where it
  works. Not a security boundary.

In both, where the evaluator can make one, the program's whole process tree runs in its own cgroup
(eval/sandbox_cgroup.py): pids.max and a total memory cap, removed after the run. Without one a
root evaluator is refused under namespaces isolation (the kernel never enforces RLIMIT_NPROC for
root, and the namespace's root is the evaluator's user); an unprivileged one keeps RLIMIT_NPROC.

In both: a minimal environment, its own session and process group, stdin closed, stdout
discarded, stderr's last lines kept in the Verdict; a wall-clock timeout, RLIMIT_CPU, RLIMIT_AS,
RLIMIT_FSIZE, RLIMIT_NOFILE, no core files, RLIMIT_NPROC; and a Python audit hook
(eval/sandbox_bootstrap.py) that ends the program (exit 86, `refused` with the rule) on process
creation, sockets, writes outside its folder, signals to other processes, ctypes and gc walks. The
hook is a second layer only: CPython documents audit hooks as not a sandbox, and a program can
switch it off by replacing a helper it calls and walking frames into its closure (tested).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Literal

from tokenmill.errors import UserError
from tokenmill.eval.config import SandboxConfig, TaskConfig
from tokenmill.eval.items import GenItem
from tokenmill.eval.sandbox_cgroup import Cgroup, enter_command, for_candidate
from tokenmill.eval.sandbox_launch import (
    KILLED_MARK,
    SETUP_MARK,
    namespaces_command,
    network_namespace_available,
    process_command,
    require_namespaces,
)

__all__ = ["Verdict", "network_namespace_available", "pass_at_k", "program_source", "run_program", "score_code_items"]

REFUSED_EXIT = 86  # the bootstrap's exit code for a refusal (sandbox_bootstrap.REFUSED_EXIT)
REFUSAL_MARK = "tokenmill-sandbox: refused "
JAIL_WORK = "/sandbox"  # the program's folder inside its mount namespace (sandbox_jail.WORK)

Status = Literal["passed", "failed", "timeout", "killed", "refused"]


@dataclass
class Verdict:
    """How one program ended: `passed` (exit 0), `failed` (another exit code), `timeout` (wall clock),
    `killed` (a signal: CPU or file-size limit, out of memory), `refused` (an audit-hook rule, named
    in `rule`: process, network, write, native)."""

    status: Status
    exit_code: int | None
    stderr_tail: str
    seconds: float
    rule: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _kill_group(pgid: int) -> None:
    """SIGKILL every process left in the program's group (children it may have made)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_namespace_init(unshare_pid: int) -> bool:
    """SIGKILL unshare's child, PID 1 of the program's PID namespace (it may have left the process
    group with setsid): unshare then returns only once the kernel has killed every process in the
    namespace, so none is left when the verdict is made. Whether there was one to kill."""
    try:
        with open(f"/proc/{unshare_pid}/task/{unshare_pid}/children") as f:
            children = [int(p) for p in f.read().split()]
    except OSError:
        return False  # unshare is gone or not yet forked: the group kill and --kill-child cover it
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return bool(children)


def _remove_tree(path: str) -> None:
    """rmtree that first gives back permissions the program may have taken from its own files."""

    def retry(func, p, _exc) -> None:  # noqa: ANN001 - shutil's onerror signature
        os.chmod(os.path.dirname(p), stat.S_IRWXU)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, stat.S_IRWXU)
        func(p)

    shutil.rmtree(path, onerror=retry)


def _tail(f, lines: int) -> str:  # noqa: ANN001 - a binary temporary file
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - 16384))
    return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])


def _verdict(rc: int | None, timed_out: bool, stderr: str, seconds: float) -> Verdict:
    if timed_out:
        return Verdict("timeout", rc, stderr, seconds)
    if rc == REFUSED_EXIT and REFUSAL_MARK in stderr:
        rule = stderr.rsplit(REFUSAL_MARK, 1)[1].split(":", 1)[0]
        return Verdict("refused", rc, stderr, seconds, rule=rule)
    if rc is not None and rc < 0:
        return Verdict("killed", rc, stderr, seconds)
    return Verdict("passed" if rc == 0 else "failed", rc, stderr, seconds)


def _start(
    source: str, limits: SandboxConfig, err: IO[bytes], group: Cgroup | None
) -> tuple[subprocess.Popen[bytes], str | None]:
    """Start the program under `limits.isolation`, inside `group` from its first instruction; the
    temporary host directory it runs in (process isolation only: under namespaces its folder is a
    tmpfs that dies with the run)."""
    popen = {"stdout": subprocess.DEVNULL, "stderr": err, "start_new_session": True, "close_fds": True}
    enter = (lambda cmd: cmd) if group is None else (lambda cmd: enter_command(group, cmd))
    if limits.isolation == "namespaces":
        env = {"PATH": "/usr/bin:/bin", "HOME": JAIL_WORK, "TMPDIR": JAIL_WORK, "LANG": "C.UTF-8"}
        proc = subprocess.Popen(enter(namespaces_command(limits)), stdin=subprocess.PIPE, cwd="/", env=env, **popen)  # type: ignore[call-overload]
        return proc, None
    root = tempfile.mkdtemp(prefix="tokenmill-sandbox-")
    Path(root, "program.py").write_text(source, encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "HOME": root, "TMPDIR": root, "LANG": "C.UTF-8"}
    return subprocess.Popen(enter(process_command(limits)), stdin=subprocess.DEVNULL, cwd=root, env=env, **popen), root  # type: ignore[call-overload]


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        with pipe:
            pipe.write(data)
    except (BrokenPipeError, ValueError):  # the program ended (or was killed) before reading it all
        pass


def _exited_within(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Whether the process exits within `seconds`, woken the moment it does: a pidfd polled once
    (Popen.wait(timeout) sleeps in steps of up to 50 ms, which was most of a short program's time)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (kernel < 5.3): Popen's own polling
        try:
            proc.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(0, int(seconds * 1000))))
    finally:
        os.close(fd)


def run_program(source: str, limits: SandboxConfig) -> Verdict:
    """Run `source` as a Python program in the sandbox described in the module docstring."""
    if limits.isolation == "namespaces":
        require_namespaces()
    group = for_candidate(limits)
    start = time.monotonic()
    root = None
    with tempfile.TemporaryFile() as err:
        try:
            proc, root = _start(source, limits, err, group)
            if root is None:  # the jail reads the program from stdin; a thread, so a jail that never reads cannot block us
                threading.Thread(target=_feed, args=(proc.stdin, source.encode("utf-8")), daemon=True).start()
            timed_out = not _exited_within(proc, limits.timeout_s)
            if timed_out:
                if _kill_namespace_init(proc.pid):
                    try:
                        proc.wait(timeout=5)  # unshare reaps its child after the kernel emptied the namespace
                    except subprocess.TimeoutExpired:
                        pass
                _kill_group(proc.pid)
            rc = proc.wait()
            _kill_group(proc.pid)  # leftovers of a program that exited
        finally:
            if group is not None:
                group.remove()  # kills what is left of the tree (process isolation: setsid children too)
            if root is not None:
                _remove_tree(root)
        tail = _tail(err, limits.stderr_lines)
    if limits.isolation == "namespaces" and KILLED_MARK in tail and rc is not None and rc > 128:
        rc = 128 - rc  # PID 1 reports the candidate's signal as 128 + n (sandbox_jail.init)
    if SETUP_MARK in tail:
        raise UserError(f"eval.sandbox: the namespace sandbox could not start a program: {tail.rsplit(SETUP_MARK, 1)[1]}")
    return _verdict(rc, timed_out, tail, round(time.monotonic() - start, 3))


def program_source(item: GenItem, completion: str) -> str:
    """The file a code item's candidate runs as: prompt + completion, then the tests."""
    return f"{item.prompt}{completion}\n\n\n{item.tests}\n"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), the chance that k of the n
    samples drawn without replacement hold at least one of the c correct ones; computed as the
    product prod_{i=n-c+1..n} (1 - k/i), which never forms the huge binomials."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def _check_k(cfg: TaskConfig, items: list[GenItem], completions: list[list[str]]) -> None:
    """Every k of pass@k needs at least k samples, per item too (k > n has no unbiased estimate)."""
    for k in cfg.generation.pass_k:
        if k > cfg.generation.samples:
            raise UserError(f"task {cfg.name!r}: pass@{k} needs generation.samples >= {k}, got {cfg.generation.samples}")
        for it, comps in zip(items, completions):
            if len(comps) < k:
                raise UserError(f"task {cfg.name!r}: pass@{k} needs {k} samples, the item at line {it.line} has {len(comps)}")


def score_code_items(
    items: list[GenItem], completions: list[list[str]], cfg: TaskConfig, sandbox: SandboxConfig | None = None
) -> dict:
    """pass@k for every k in cfg.generation.pass_k (mean over items) and every item's verdicts;
    candidates run in parallel, at most `sandbox.workers` processes at a time."""
    sandbox = sandbox or SandboxConfig()
    where = f"task {cfg.name!r}"
    if len(completions) != len(items):
        raise UserError(f"{where}: {len(completions)} completion lists for {len(items)} items")
    _check_k(cfg, items, completions)
    for it in items:
        if it.tests is None:
            raise UserError(f"{where}: item at line {it.line} has no 'tests', it is not a code item")
    jobs = [(i, program_source(it, comp)) for i, (it, comps) in enumerate(zip(items, completions)) for comp in comps]
    with ThreadPoolExecutor(max_workers=sandbox.workers) as pool:
        verdicts = list(pool.map(lambda job: run_program(job[1], sandbox), jobs))
    per_item: list[list[Verdict]] = [[] for _ in items]
    for (i, _), v in zip(jobs, verdicts):
        per_item[i].append(v)
    result: dict = {"n_items": len(items)}
    for k in cfg.generation.pass_k:
        scores = [pass_at_k(len(vs), sum(v.passed for v in vs), k) for vs in per_item]
        result[f"pass@{k}"] = sum(scores) / len(scores) if scores else 0.0
    result["items"] = [
        {"line": it.line, "n": len(vs), "passed": sum(v.passed for v in vs), "verdicts": [asdict(v) for v in vs]}
        for it, vs in zip(items, per_item)
    ]
    return result
