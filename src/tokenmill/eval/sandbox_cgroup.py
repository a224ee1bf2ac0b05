"""One fresh cgroup per candidate program, so its whole process tree is bounded, not each process:
`pids.max` (every process and thread it makes counts, whoever it runs as) and, where the memory
controller is there, a total memory cap.

Why: the kernel never enforces RLIMIT_NPROC when the real uid is root, and under namespaces
isolation the candidate's root is the evaluator's own user, so for a root evaluator (CI) a program
that switches the audit hook off could otherwise fork until the wall timeout. An unprivileged
evaluator that cannot make a cgroup keeps RLIMIT_NPROC, which the kernel does enforce for it.

Where: cgroup v1 (a hierarchy mounted with the `pids` / `memory` option, e.g. /sys/fs/cgroup/pids)
puts the groups under the evaluator's own group of that hierarchy, so they stay inside any limit
already set on the evaluator; cgroup v2 (a `cgroup2` mount whose cgroup.controllers lists `pids`)
puts them under the mount's root, the one group that may hold processes and enable controllers for
its children at once. Each candidate gets `tokenmill-sandbox/tokenmill-sandbox-<evaluator pid>-<n>`
(recognisable if one is ever left); the shared parent is removed as soon as it is empty.

Entering: the launch command is wrapped in `sh -c 'echo $$ > <group>/cgroup.procs ... exec "$@"'`
(`enter_command`), so the shell moves itself into the group and then becomes the launcher: nothing
of the candidate exists before it is inside. Not `preexec_fn`: candidates start from a thread pool
and CPython documents preexec_fn as unsafe with threads (it can deadlock); Python has no
CLONE_INTO_CGROUP. The shell costs one exec.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tokenmill.errors import UserError
from tokenmill.eval.config import SandboxConfig

PARENT = "tokenmill-sandbox"
HEADROOM_MB = 64  # the jail's own interpreter and the launcher, besides the program's memory and tmpfs
SETUP_EXIT = 87  # sandbox_jail.SETUP_EXIT: the wrapper's failure reads like a failed jail step
ENTER = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || '
    f'{{ echo "tokenmill-sandbox: setup failed: cgroup: cannot enter $1" >&2; exit {SETUP_EXIT}; }}; shift; done; shift; exec "$@"'
)
# The launcher's own tasks in the group besides the program's allowance: under namespaces `unshare`,
# the jail's PID 1 and the candidate; under process isolation the candidate alone (`unshare -rn` execs it).
JAIL_TASKS = {"namespaces": 3, "process": 1}
_serial = itertools.count()
_parent_lock = threading.Lock()  # one evaluator's workers: making and removing the shared parent


@dataclass(frozen=True)
class Hierarchy:
    """Where this machine lets a candidate's group go: `base` holds the parent group."""

    version: int  # 1 or 2
    base: Path
    controllers: frozenset[str]  # of the two used here: pids, memory


def _mountinfo() -> list[tuple[Path, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount of this process."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fstype, _source, options = (tail.split() + ["", ""])[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((Path(head.split()[4]), fstype, set(options.split(","))))
    return found


def _own_groups() -> dict[str, str]:
    """This process's group per v1 controller ("" keys the v2 one), from /proc/self/cgroup."""
    groups = {}
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            for name in names.split(",") if names else [""]:
                groups[name] = path
    return groups


def hierarchies() -> list[Hierarchy]:
    """The hierarchies holding `pids` and `memory` here (a controller lives in one hierarchy only)."""
    own, found, taken = _own_groups(), [], set()
    for mount, fstype, options in _mountinfo():
        if fstype == "cgroup" and (wanted := {"pids", "memory"} & options):
            mine = mount / own.get(sorted(wanted)[0], "/").lstrip("/")
            found.append(Hierarchy(1, mine if mine.is_dir() else mount, frozenset(wanted)))
            taken |= wanted
    for mount, fstype, _ in _mountinfo():
        if fstype == "cgroup2":
            try:
                listed = set((mount / "cgroup.controllers").read_text().split())
            except OSError:
                continue
            if wanted := ({"pids", "memory"} & listed) - taken:
                found.append(Hierarchy(2, mount, frozenset(wanted)))
                taken |= wanted
    return found


def _limits(h: Hierarchy, cfg: SandboxConfig, jail_tasks: int) -> list[tuple[str, str, bool]]:
    """(file, value, required) to write into a new group of `h`."""
    writes = []
    if "pids" in h.controllers:
        writes.append(("pids.max", str(cfg.max_processes + jail_tasks), True))
    if "memory" in h.controllers:
        total = (cfg.memory_mb + cfg.disk_mb + HEADROOM_MB) * 1024 * 1024  # tmpfs pages count as memory
        if h.version == 1:
            writes += [("memory.limit_in_bytes", str(total), True), ("memory.memsw.limit_in_bytes", str(total), False)]
        else:
            writes += [("memory.max", str(total), True), ("memory.swap.max", "0", False)]
    return writes


def _make_parent(h: Hierarchy) -> Path:
    parent = h.base / PARENT
    parent.mkdir(exist_ok=True)
    if h.version == 2:  # a v2 group's children get only the controllers it enables for them
        (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(h.controllers)))
    return parent


@dataclass
class Cgroup:
    """A candidate's group, one directory per hierarchy."""

    dirs: list[Path]

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def remove(self, wait_s: float = 2.0) -> None:
        """SIGKILL what is left in the group, then remove it (rmdir retried while its last tasks
        exit) and the shared parent once it is empty. A group that stays busy is left, named."""
        for d in self.dirs:
            deadline = time.monotonic() + wait_s
            while True:
                _kill_members(d)
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        break
                    time.sleep(0.005)
            with _parent_lock:
                try:
                    d.parent.rmdir()
                except OSError:
                    pass  # another candidate's group is in it, or it is gone


def _kill_members(group: Path) -> None:
    """SIGKILL each process still in `group`, through a pidfd opened while it is still a member
    (a pid that exited and was reused by another process is never signalled)."""
    try:
        pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if f"/{group.name}\n" in Path(f"/proc/{pid}/cgroup").read_text() + "\n":
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def create(cfg: SandboxConfig, jail_tasks: int) -> Cgroup:
    """A fresh group for one candidate with its limits written (OSError when it cannot be made;
    what was made is removed again). `jail_tasks`: the launcher's own processes counted in it."""
    found = hierarchies()
    if not any("pids" in h.controllers for h in found):
        raise OSError(errno.ENOENT, "no cgroup hierarchy with the pids controller is mounted")
    name = f"{PARENT}-{os.getpid()}-{next(_serial)}"
    group = Cgroup([])
    try:
        for h in found:
            for attempt in range(3):  # another evaluator may remove the empty parent between the two steps
                with _parent_lock:
                    parent = _make_parent(h)
                try:
                    (parent / name).mkdir()
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise
            group.dirs.append(parent / name)
            for file, value, required in _limits(h, cfg, jail_tasks):
                try:
                    (parent / name / file).write_text(value)
                except OSError:
                    if required:
                        raise
    except OSError:
        group.remove(wait_s=0)
        raise
    return group


@lru_cache(maxsize=1)
def cgroup_problem() -> str | None:
    """Why no candidate group can be made here (one line), or None when it can."""
    try:
        create(SandboxConfig(), jail_tasks=1).remove()
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        return f"{e.strerror or e}{where}"
    return None


def enter_command(group: Cgroup, command: list[str]) -> list[str]:
    """`command`, started already inside `group` (module docstring)."""
    return ["/bin/sh", "-c", ENTER, "sh", *group.procs_files(), "--", *command]


def for_candidate(cfg: SandboxConfig) -> Cgroup | None:
    """The group one candidate runs in, or None where none can be made and something else bounds its
    processes: RLIMIT_NPROC for an unprivileged evaluator, or the user's explicit `isolation: process`.
    A root evaluator under namespaces isolation without one is refused: nothing would bound forks."""
    problem = cgroup_problem()
    if problem is None:
        try:
            return create(cfg, JAIL_TASKS[cfg.isolation])
        except OSError as e:
            raise UserError(f"eval.sandbox: could not make a cgroup for a candidate program: {e}") from None
    if cfg.isolation == "namespaces" and 0 in (os.getuid(), os.geteuid()):
        raise UserError(
            f"eval.sandbox: the evaluator runs as root and no pids cgroup can be made here ({problem}); the kernel does "
            "not apply RLIMIT_NPROC to root, so nothing would bound how many processes a program makes and code tasks "
            "are refused. Run tokenmill eval as an unprivileged user, or where cgroups are writable (docs/evaluation.md)"
        )
    return None
