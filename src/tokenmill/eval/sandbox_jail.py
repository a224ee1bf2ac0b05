"""The in-namespace setup of a sandboxed candidate (namespaces isolation), run with `python -I -B -c`
as PID 1 of fresh user, mount, PID, network, IPC, UTS and cgroup namespaces made by util-linux
`unshare` (eval/sandbox_launch.py builds the command). It is root there (the user namespace maps
that root to the evaluator's own user, with no power outside) and:

1. mounts a small tmpfs as the new root and bind-mounts into it, read-only, only what Python
   needs (/usr and the interpreter's and venv's prefixes, /etc/ld.so.cache; /bin, /lib... as
   the same symlinks), /dev/null, /dev/zero and /dev/urandom, and a fresh /proc of the new PID
   namespace (the evaluator's processes are not in it);
2. mounts the candidate's own tmpfs at /sandbox, capped in bytes (`size`) and files
   (`nr_inodes`), and writes program.py there from stdin; it is the only writable place and
   disappears with the mount namespace, so nothing of the candidate's stays on the host disk;
3. remounts the new root read-only, pivots into it and detaches the old root;
4. forks the candidate, which locks root out of capabilities (securebits NOROOT, empty bounding
   and ambient sets), sets no_new_privs and installs the seccomp filter of eval/sandbox_seccomp.py,
5. and execs the interpreter on sandbox_bootstrap.py (rlimits, the audit hook) to run program.py.

This process stays PID 1 and exits when the candidate does: the kernel then kills every process
left in the PID namespace (setsid or not); `unshare --kill-child` kills it when unshare is killed.
Kept free of tokenmill imports (a bare interpreter runs it). argv[1] is the JSON spec of
sandbox_launch.jail_spec. A failed step writes `tokenmill-sandbox: setup failed: <step>: <error>`
and exits SETUP_EXIT.
"""

import ctypes
import json
import os
import signal
import sys

SETUP_EXIT = 87
KILLED_MARK = "tokenmill-sandbox: killed by signal "
NEW_ROOT, WORK = "/tmp", "/sandbox"  # /tmp is only the mount point of the new root in this namespace
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, ST_RELATIME = 1024, 2048, 1 << 21, 4096
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 24, 28, 47, 38, 22
SECUREBITS_LOCKED_NOROOT = 0xFF  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS, NO_CAP_AMBIENT_RAISE, each locked
libc = ctypes.CDLL(None, use_errno=True)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731 - ctypes wants bytes or NULL
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def locked_flags(fd: int) -> int:
    """The source mount's flags a bind remount in a user namespace must keep (the kernel refuses to
    clear nosuid, nodev, noexec or the atime mode of a mount it inherited)."""
    f = os.statvfs(fd).f_flag
    return (f & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)) | (MS_RELATIME if f & ST_RELATIME else 0)


def bind(fd: int, host_path: str, read_only: bool) -> None:
    """Bind the path `fd` holds (opened before the new root hid it) at the same place in the new root."""
    target = NEW_ROOT + host_path
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
    if read_only:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked_flags(fd))


def build_root(spec: dict, source: bytes) -> None:
    """Steps 1-3 of the module docstring."""
    fds = {p: os.open(p, os.O_PATH) for p in spec["binds"] + spec["devices"]}
    mount("tokenmill", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755")
    for path in spec["binds"]:
        bind(fds[path], path, read_only=True)
    for path in spec["devices"]:
        bind(fds[path], path, read_only=False)  # device nodes: a read-only mount does not stop writes to them
    for path, target in spec["links"].items():
        os.makedirs(os.path.dirname(NEW_ROOT + path), exist_ok=True)
        os.symlink(target, NEW_ROOT + path)
    os.mkdir(NEW_ROOT + "/proc")
    mount("proc", NEW_ROOT + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.mkdir(NEW_ROOT + WORK)
    size = f"size={spec['disk_mb']}m,nr_inodes={spec['max_files']},mode=0700"
    mount("sandbox", NEW_ROOT + WORK, "tmpfs", MS_NOSUID | MS_NODEV, size)
    with open(NEW_ROOT + WORK + "/program.py", "wb") as f:
        f.write(source)
    mount(None, NEW_ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for fd in fds.values():
        os.close(fd)
    os.chdir(NEW_ROOT)
    check(libc.syscall(PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    check(libc.umount2(b".", 2), "detach the old root")  # MNT_DETACH: the old root stacked under "."
    os.chdir(WORK)


def lock_down(seccomp: bytes) -> None:
    """Step 4: no capabilities after exec, no way to gain privileges, the seccomp filter."""
    prctl = libc.prctl
    check(prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_NOROOT, 0, 0, 0), "securebits")
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        check(prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    check(prctl(PR_CAP_AMBIENT, 4, 0, 0, 0), "clear ambient capabilities")
    check(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if seccomp:
        prog = SockFprog(len(seccomp) // 8, seccomp)
        check(prctl(PR_SET_SECCOMP, 2, ctypes.byref(prog), 0, 0), "seccomp filter")  # SECCOMP_MODE_FILTER


def fail(step: str, error: OSError) -> None:
    os.write(2, f"tokenmill-sandbox: setup failed: {step}: {error}\n".encode())
    os._exit(SETUP_EXIT)


def candidate(spec: dict) -> None:
    """The forked child: steps 4 and 5."""
    try:
        lock_down(bytes.fromhex(spec["seccomp"]))
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.execv(spec["python"], [spec["python"], "-I", "-B", "-c", spec["bootstrap"], spec["limits"]])
    except OSError as e:
        fail("lock down", e)


def init(child: int) -> None:
    """PID 1 reaps until the candidate ends, then exits with its status (a signal as 128 + n with a
    line: util-linux 2.38 `unshare` loses a child's signal), taking every other process with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the candidate may signal PID 1; nothing else is caught
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        os.write(2, f"\n{KILLED_MARK}{os.WTERMSIG(status)}\n".encode())
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        build_root(spec, sys.stdin.buffer.read())
    except OSError as e:
        fail("mounts", e)
    child = os.fork()
    if child == 0:
        candidate(spec)
    init(child)


if __name__ == "__main__":
    main()
