"""The first code a sandboxed program's interpreter runs (passed with `python -I -B -c`): it sets the
resource limits, installs the audit hook that refuses process creation, sockets, native code and
writes outside the program's directory, then executes `program.py` from its cwd as `__main__`.

Kept free of tokenmill imports: it runs in a bare interpreter whose sys.path has no tokenmill.
argv[1] is a JSON object of limits (see sandbox.py `_limits`). A refusal writes one line
`tokenmill-sandbox: refused <rule>: <detail>` to stderr and ends the process with REFUSED_EXIT at
once (os._exit: the program cannot catch it).
"""

import json
import os
import resource
import sys

REFUSED_EXIT = 86
PROCESS_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.exec",
        "os.system",
        "os.startfile",
        "subprocess.Popen",
        "pty.spawn",
    }
)
# Events that change the file system: their first argument is the path (rename/link: both paths).
WRITE_EVENTS = frozenset(
    {
        "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
        "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr", "shutil.rmtree",
    }
)  # fmt: skip
# Reaching the hook's closure (gc) or native code (ctypes, raw fork_exec) would undo the rules.
REFUSED_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "ctypes.dlopen", "ctypes.dlsym"})
REFUSED_IMPORTS = frozenset({"_posixsubprocess", "_ctypes"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def set_limits(limits: dict) -> None:
    """RLIMIT_* soft and hard (the program cannot raise them back). NPROC counts every task of the
    real user, so the program's allowance is added to what the user already runs."""
    mb = 1024 * 1024
    for name, value in (
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_AS", limits["memory_mb"] * mb),
        ("RLIMIT_FSIZE", limits["file_size_mb"] * mb),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    running = user_tasks(os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (running + limits["max_processes"],) * 2)


def user_tasks(uid: int) -> int:
    """Threads of every process of `uid` (what RLIMIT_NPROC counts)."""
    total = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            continue
        if int(fields.get("Uid", "-1 0").split()[0]) == uid:
            total += int(fields.get("Threads", "1"))
    return total


def install_hook(root: str) -> None:
    """The audit hook; `root` lives only in this closure (gc access to it is refused)."""
    realpath, fsdecode, write, exit_now = os.path.realpath, os.fsdecode, os.write, os._exit
    prefix, own_pid = root.rstrip("/") + "/", os.getpid()

    def refuse(rule: str, detail: object) -> None:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        write(2, f"\ntokenmill-sandbox: refused {rule}: {detail!r}"[:400].encode() + b"\n")
        exit_now(REFUSED_EXIT)

    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor: creating it was checked
        p = realpath(fsdecode(path))  # type: ignore[arg-type]  # str, bytes or PathLike: audit args
        return p == root or p.startswith(prefix) or p == "/dev/null"

    def hook(event: str, args: tuple) -> None:
        if event in PROCESS_EVENTS:
            refuse("process", event)
        elif event.startswith("socket."):
            refuse("network", event)
        elif event in REFUSED_EVENTS or (event == "import" and args[0] in REFUSED_IMPORTS):
            refuse("native", args[0] if event == "import" else event)
        elif event in ("os.kill", "os.killpg") and args[0] not in (own_pid, 0):
            refuse("process", f"{event} {args[0]}")
        elif event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE_FLAGS)
            if writes and path is not None and not inside(path):
                refuse("write", path)
        elif event in WRITE_EVENTS:
            paths = args[:2] if event in ("os.rename", "os.link", "os.symlink") else args[:1]
            if any(p is not None and not inside(p) for p in paths):
                refuse("write", f"{event} {paths}")

    sys.addaudithook(hook)


def main() -> None:
    limits = json.loads(sys.argv[1])
    root = os.path.realpath(os.getcwd())
    with open("program.py", encoding="utf-8") as f:
        code = compile(f.read(), os.path.join(root, "program.py"), "exec")
    set_limits(limits)
    install_hook(root)
    sys.argv = ["program.py"]
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})


if __name__ == "__main__":
    main()
