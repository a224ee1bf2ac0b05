"""The command a candidate program runs under, for each `eval.sandbox.isolation`.

`namespaces` (the default): util-linux `unshare` makes fresh user, mount, PID, network, IPC, UTS and
cgroup namespaces and runs eval/sandbox_jail.py as their PID 1, which builds a read-only root with
the candidate's size-capped tmpfs and forks the candidate, which drops every capability, sets
no_new_privs and a seccomp filter, and execs the bootstrap. util-linux rather than bubblewrap:
`unshare` ships with every Debian/Ubuntu base system (no package to install in CI or on a user's machine), and what bwrap
would add (the mounts, the capability drop, seccomp) is ~150 lines of Python here, tested. The
namespace's root is the evaluator's own user, and the kernel never enforces RLIMIT_NPROC for root:
what bounds a root evaluator's candidate's processes is its own cgroup's pids.max
(eval/sandbox_cgroup.py, which wraps this command so it starts inside the group); a root
evaluator that cannot make one is refused, an unprivileged one keeps RLIMIT_NPROC.

`process`: today's separate process with rlimits and the audit hook (and `unshare -rn` for the
network when `isolate_network`), for machines that refuse namespaces; see sandbox.py's docstring.

Where namespaces do not work, `require_namespaces` raises one line naming the cause; there is no
silent fallback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from tokenmill.errors import UserError
from tokenmill.eval.config import SandboxConfig
from tokenmill.eval.sandbox_seccomp import filter_program, supported

HERE = Path(__file__).parent
BOOTSTRAP = (HERE / "sandbox_bootstrap.py").read_text(encoding="utf-8")
JAIL = (HERE / "sandbox_jail.py").read_text(encoding="utf-8")
SETUP_MARK = "tokenmill-sandbox: setup failed: "  # sandbox_jail.fail
KILLED_MARK = "tokenmill-sandbox: killed by signal "  # sandbox_jail.KILLED_MARK
# What the interpreter needs, bound read-only at the same path (a symlink is recreated as one).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")


def limits_json(cfg: SandboxConfig) -> str:
    keys = ("cpu_s", "memory_mb", "file_size_mb", "open_files", "max_processes")
    return json.dumps({k: getattr(cfg, k) for k in keys})


def _binds() -> tuple[list[str], dict[str, str]]:
    """Paths to bind (no path inside another one) and symlinks to recreate, for this interpreter."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    links = {p: os.readlink(p) for p in SYSTEM_PATHS if os.path.islink(p)}
    paths = sorted(p for p in {*SYSTEM_PATHS, *prefixes} if os.path.exists(p) and p not in links)
    binds = [p for p in paths if not any(p.startswith(q.rstrip("/") + "/") for q in paths if q != p)]
    return binds, links


def jail_spec(cfg: SandboxConfig) -> str:
    binds, links = _binds()
    machine = os.uname().machine
    spec = {
        "binds": binds,
        "links": links,
        "devices": list(DEVICES),
        "disk_mb": cfg.disk_mb,
        "max_files": cfg.max_files,
        "python": sys.executable,
        "bootstrap": BOOTSTRAP,
        "limits": limits_json(cfg),
        "seccomp": filter_program(machine).hex() if supported(machine) else "",
    }
    return json.dumps(spec)


def namespaces_command(cfg: SandboxConfig) -> list[str]:
    unshare = shutil.which("unshare") or "unshare"
    flags = ["--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts"]
    return [unshare, *flags, "--cgroup", "--", sys.executable, "-I", "-B", "-c", JAIL, jail_spec(cfg)]


@lru_cache(maxsize=1)
def network_namespace_available() -> bool:
    """Whether `unshare -rn` works for this user here (a new user + network namespace)."""
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def process_command(cfg: SandboxConfig) -> list[str]:
    cmd = [sys.executable, "-I", "-B", "-c", BOOTSTRAP, limits_json(cfg)]
    if cfg.isolate_network and network_namespace_available():
        cmd = [shutil.which("unshare") or "unshare", "-rn", *cmd]
    return cmd


@lru_cache(maxsize=1)
def namespaces_problem() -> str | None:
    """Why a trivial program cannot run under namespaces isolation here, or None when it can
    (the probe is the real launch: the same command, a one-line program)."""
    if shutil.which("unshare") is None:
        return "util-linux `unshare` is not on PATH"
    try:
        cfg = SandboxConfig()
        done = subprocess.run(namespaces_command(cfg), input=b"pass\n", capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare could not run: {e}"
    if done.returncode == 0:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit code {done.returncode}"]
    return lines[-1].replace(SETUP_MARK, "")[:300]


def require_namespaces() -> None:
    problem = namespaces_problem()
    if problem is not None:
        raise UserError(
            f"eval.sandbox.isolation: namespaces is not available here ({problem}); code tasks are refused. "
            "Set eval.sandbox.isolation: process to run them with rlimits and an audit hook only "
            "(weaker, see docs/evaluation.md)"
        )
