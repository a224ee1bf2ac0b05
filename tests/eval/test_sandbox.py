"""The code sandbox with real processes: hostile programs are stopped and counted as failures,
the process group and the temporary directory are gone afterwards; pass@k against brute force;
the shipped code task set (every reference solution passes, every empty completion fails)."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tokenmill.errors import UserError
from tokenmill.eval.config import EvalConfig, SandboxConfig, TaskConfig
from tokenmill.eval.sandbox import network_namespace_available, pass_at_k, run_program, score_code_items
from tokenmill.eval.sandbox_launch import namespaces_problem, require_namespaces
from tokenmill.eval.tasks import GenItem, load_task

# Every hostile program first says where it runs (folder, pid, PID namespace), so the test can
# check what is left afterwards.
HEADER = (
    "import os, sys\nprint('WHERE', os.getcwd(), os.getpid(), os.readlink('/proc/self/ns/pid'), file=sys.stderr, flush=True)\n"
)
FAST = SandboxConfig(timeout_s=5, cpu_s=5)


def processes_in(pid_ns: str) -> list[int]:
    """Host pids of the processes in PID namespace `pid_ns` (e.g. 'pid:[4026532...]')."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/ns/pid") == pid_ns:
                found.append(int(entry))
        except OSError:
            continue
    return found


def run(body: str, cfg: SandboxConfig = FAST):
    """Run HEADER + body; assert nothing of it is left: under namespaces no process in its PID
    namespace; under process isolation its directory is removed and its process group is gone."""
    verdict = run_program(HEADER + body, cfg)
    m = re.search(r"WHERE (\S+) (\d+) (\S+)", verdict.stderr_tail)
    assert m, verdict
    if cfg.isolation == "namespaces":
        assert m.group(3) != os.readlink("/proc/self/ns/pid") and processes_in(m.group(3)) == []
        return verdict
    assert not Path(m.group(1)).exists(), "the sandbox directory must be removed"
    with pytest.raises(ProcessLookupError):
        os.killpg(int(m.group(2)), 0)
    return verdict


def test_exit_codes_give_passed_and_failed():
    assert run("print('hi')").status == "passed"
    v = run("assert 1 + 1 == 3")
    assert v.status == "failed" and v.exit_code == 1 and "AssertionError" in v.stderr_tail
    assert run("open('scratch.txt', 'w').write('inside is fine')").passed


def test_infinite_loop_times_out_and_its_group_is_killed():
    v = run("while True:\n    pass\n", SandboxConfig(timeout_s=1.0, cpu_s=30))
    assert v.status == "timeout" and 1.0 <= v.seconds < 4


def test_cpu_limit_kills_a_busy_program():
    v = run("while True:\n    pass\n", SandboxConfig(timeout_s=10, cpu_s=1))
    assert v.status == "killed" and v.exit_code is not None and v.exit_code < 0 and v.seconds < 5


@pytest.mark.parametrize(
    "body",
    [
        # Bounded even if the rules failed: at most 30 children, each exits at once.
        "for _ in range(30):\n    if os.fork() == 0:\n        os._exit(0)\n",
        "os.system('true')",
        "import subprocess\nsubprocess.run(['true'])",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
    ],
)
def test_process_creation_is_refused(body: str):
    v = run(body)
    assert v.status == "refused" and v.rule in ("process", "native"), v
    assert not v.passed


def test_refusal_cannot_be_caught():
    v = run("try:\n    os.fork()\nexcept BaseException:\n    pass\nprint('escaped')\n")
    assert v.status == "refused" and "escaped" not in v.stderr_tail


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel does not enforce RLIMIT_NPROC for root (the audit hook stops forks)")
def test_nproc_limits_threads_for_an_unprivileged_user():
    body = (
        "import threading, time\nmade = 0\nfor _ in range(40):\n    try:\n"
        "        threading.Thread(target=time.sleep, args=(0.5,), daemon=True).start()\n        made += 1\n"
        "    except RuntimeError:\n        break\nassert made < 40, made\n"
    )
    assert run(body, SandboxConfig(timeout_s=5, max_processes=4)).passed


def test_writes_outside_the_directory_are_refused(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for body in (
        f"open({str(tmp_path / 'new.txt')!r}, 'w')",
        f"open({str(victim)!r}, 'a').write('x')",
        f"os.open({str(tmp_path / 'new.txt')!r}, os.O_WRONLY | os.O_CREAT)",
        f"os.remove({str(victim)!r})",
        f"os.rename({str(victim)!r}, 'stolen.txt')",
        f"os.symlink({str(victim)!r}, 'link')\nopen('link', 'w')",
        "open('../escape.txt', 'w')",
    ):
        v = run(body)
        assert v.status == "refused" and v.rule == "write", (body, v)
    assert victim.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_network_is_refused():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        v = run(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\ns.sendall(b'hi')\n")
        assert v.status == "refused" and v.rule == "network"
        server.settimeout(0.2)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing ever connected


@pytest.mark.skipif(not network_namespace_available(), reason="unshare -rn is not allowed here")
def test_network_namespace_has_no_interface_up():
    # /proc/self/net/dev lists the process's namespace's interfaces: a fresh one has only loopback.
    body = (
        "names = [l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]]\nassert names == ['lo'], names\n"
    )
    assert run(body).passed


def test_memory_hog_is_stopped():
    v = run("x = bytearray(1024 * 1024 * 1024)", SandboxConfig(timeout_s=5, memory_mb=256))
    assert v.status in ("failed", "killed") and ("MemoryError" in v.stderr_tail or v.status == "killed")


def test_huge_file_inside_is_stopped_by_the_file_size_limit():
    body = "with open('big.bin', 'wb') as f:\n    for _ in range(64):\n        f.write(b'x' * 65536)\n"
    v = run(body, SandboxConfig(timeout_s=5, file_size_mb=1))
    assert v.status in ("failed", "killed") and ("File too large" in v.stderr_tail or v.status == "killed"), v
    assert run(body, SandboxConfig(timeout_s=5, file_size_mb=8)).passed  # the same program under a larger limit


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (the first c correct) that hold a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_brute_force():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
    assert pass_at_k(200, 1, 1) == pytest.approx(1 / 200)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


CODE_TASK = TaskConfig(name="python-code", path="package:tasks/python_code.jsonl", format="jsonl")


def test_shipped_code_tasks_solutions_pass_and_empty_completions_fail():
    items = load_task(CODE_TASK)
    assert len(items) >= 20 and all(isinstance(it, GenItem) and it.tests for it in items)
    res = score_code_items(
        items, [[it.solution, ""] for it in items], TaskConfig(**{**CODE_TASK.model_dump(), "generation": {"samples": 2}})
    )
    bad = [
        (r["line"], [v["status"] for v in r["verdicts"]])
        for r in res["items"]
        if [v["status"] for v in r["verdicts"]][0] != "passed"
    ]
    assert not bad, bad
    empty_passed = [r["line"] for r in res["items"] if r["verdicts"][1]["status"] == "passed"]
    assert not empty_passed, empty_passed
    assert res["pass@1"] == pytest.approx(0.5) and res["n_items"] == len(items)


def test_pass_at_k_over_items_and_clear_errors():
    items = load_task(CODE_TASK)[:2]
    cfg = TaskConfig(name="py", path="x", format="jsonl", generation={"samples": 3, "pass_k": [1, 2]})
    wrong = "    return None\n"
    res = score_code_items(items, [[items[0].solution, wrong, ""], [wrong, wrong, wrong]], cfg)
    assert res["pass@1"] == pytest.approx((1 / 3 + 0) / 2) and res["pass@2"] == pytest.approx((2 / 3 + 0) / 2)
    assert [r["passed"] for r in res["items"]] == [1, 0]
    with pytest.raises(UserError, match=r"pass@4 needs generation.samples >= 4"):
        score_code_items(items, [["a"], ["b"]], TaskConfig(**{**cfg.model_dump(), "generation": {"samples": 3, "pass_k": [4]}}))
    with pytest.raises(UserError, match=r"line 2 has 1"):
        score_code_items(items, [["a", "b", "c"], ["a"]], cfg)


def test_sandbox_config_lives_in_eval_config():
    cfg = EvalConfig.model_validate({"sandbox": {"timeout_s": 3, "workers": 4}})
    assert cfg.sandbox.timeout_s == 3 and cfg.sandbox.workers == 4 and cfg.sandbox.memory_mb == 512
    with pytest.raises(Exception, match="unknown_limit"):
        EvalConfig.model_validate({"sandbox": {"unknown_limit": 1}})


# --- The kernel boundary (namespaces isolation): each escape runs after switching the audit hook
# off the way a hostile tester did (a replaced helper walks frames into the hook and swaps the exit
# in its closure), so what stops it is the kernel, not the hook.
DEFEAT_HOOK = """import posixpath, sys
_orig = posixpath.abspath
def _abspath(p):
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == 'hook':
            for c in f.f_locals['refuse'].__closure__:
                if getattr(c.cell_contents, '__name__', '') == '_exit':
                    c.cell_contents = lambda code: None
        f = f.f_back
    return _orig(p)
posixpath.abspath = _abspath
try:
    open('/trigger-the-hook', 'r+')
except OSError:
    pass
posixpath.abspath = _orig
done = []
def attempt(name, fn):
    try:
        fn()
        done.append(name)
    except Exception:  # OSError, sqlite3.Error: the attempt failed
        pass
"""
ESCAPED = "print('ESCAPED', done, file=sys.stderr)\nassert not done, done\n"
namespaces_only = pytest.mark.skipif(namespaces_problem() is not None, reason=f"namespaces: {namespaces_problem()}")


def write_escapes(outside: Path) -> str:
    """Every write the tester made outside its folder, aimed at a host folder and at the read-only root."""
    lines = ["import sqlite3, stat"]
    for d in (str(outside), "/", "/usr"):
        lines += [
            f"attempt('fifo {d}', lambda: os.mkfifo({d + '/fifo'!r}))",
            f"attempt('mknod {d}', lambda: os.mknod({d + '/null'!r}, stat.S_IFCHR | 0o666, os.makedev(1, 3)))",
            f"attempt('open {d}', lambda: open({d + '/new.txt'!r}, 'w'))",
            f"attempt('sqlite {d}', lambda: sqlite3.connect({d + '/db.sqlite'!r}).execute('create table t (x)'))",
            f"if os.path.isdir({d!r}):",  # the host folder is not even visible; dir_fd on the others
            f"    fd, name = os.open({d!r}, os.O_RDONLY), sorted(os.listdir({d!r}))[0]",
            "    attempt('mkdir dir_fd', lambda: os.mkdir('made', dir_fd=fd))",
            "    attempt('create dir_fd', lambda: os.open('made.txt', os.O_WRONLY | os.O_CREAT, dir_fd=fd))",
            "    attempt('rename dir_fd', lambda: os.rename(name, 'moved', src_dir_fd=fd, dst_dir_fd=fd))",
            "    attempt('unlink dir_fd', lambda: os.unlink(name, dir_fd=fd))",
        ]
    # fchmod through a read-only descriptor, to the mode it already has (harmless if it worked)
    lines += [
        "ro = os.open('/etc/ld.so.cache' if os.path.exists('/etc/ld.so.cache') else '/usr/bin/env', os.O_RDONLY)",
        "attempt('fchmod', lambda: os.fchmod(ro, stat.S_IMODE(os.fstat(ro).st_mode)))",
        "def shell():",  # the shell runs (the hook is off); what it writes must fail
        "    if os.system('touch /usr/tokenmill-escape 2>/dev/null || mkdir /tokenmill-escape 2>/dev/null') != 0:",
        "        raise OSError('nothing written')",
        "attempt('system', shell)",
    ]
    return "\n".join(lines) + "\n"


def host_state(outside: Path) -> tuple:
    return sorted(os.listdir(outside)), (outside / "victim.txt").read_text(), os.stat(outside / "victim.txt").st_mode


@namespaces_only
def test_writes_outside_fail_even_with_the_hook_switched_off(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    (outside / "victim.txt").write_text("keep")
    before = host_state(outside)
    v = run(DEFEAT_HOOK + write_escapes(outside) + ESCAPED)
    assert "ESCAPED []" in v.stderr_tail and v.passed, v
    assert host_state(outside) == before
    assert not Path("/usr/tokenmill-escape").exists() and not Path("/tokenmill-escape").exists()


def signal_escapes(target: int) -> str:
    return (
        "import signal\n"
        f"attempt('kill', lambda: os.kill({target}, signal.SIGUSR1))\n"
        f"attempt('pidfd', lambda: signal.pidfd_send_signal(os.pidfd_open({target}), signal.SIGUSR1))\n"
        f"attempt('proc', lambda: open('/proc/{target}/cmdline').read())\n"
        "attempt('ptrace', lambda: open('/proc/1/mem', 'rb').read(1))\n"
    )


@namespaces_only
def test_the_evaluator_is_not_reachable_by_signal_pidfd_or_proc():
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    try:
        v = run(DEFEAT_HOOK + signal_escapes(os.getpid()) + ESCAPED)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert "ESCAPED []" in v.stderr_tail and v.passed and got == [], (v, got)


SECCOMP_PROBE = """import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in (('unshare', 272, (0x10000000,)), ('ptrace', 101, (0, 0, 0, 0)), ('mount', 165, (b'none', b'/sandbox', b'tmpfs', 0, None)),
                       ('setns', 308, (0, 0)), ('bpf', 321, (0, 0, 0))):
    rc = libc.syscall(nr, *args)
    assert rc == -1 and ctypes.get_errno() == errno.EPERM, (name, rc, ctypes.get_errno())
assert os.fork() == 0 or os.wait()  # an ordinary fork still works
"""


@namespaces_only
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe uses x86_64 syscall numbers")
def test_seccomp_refuses_namespace_and_tracing_calls():
    v = run(DEFEAT_HOOK + "import os\nif os.getpid() != 0:\n    pass\n" + SECCOMP_PROBE)
    assert v.passed, v


SETSID_CHILD = """pid = os.fork()
if pid == 0:
    os.setsid()
    import time
    time.sleep(30)
    os._exit(0)
print('CHILD', pid, file=sys.stderr)
"""


@namespaces_only
def test_a_setsid_child_does_not_outlive_the_program():
    # run() asserts that no process is left in the program's PID namespace afterwards
    v = run(DEFEAT_HOOK + SETSID_CHILD)
    assert v.passed and "CHILD" in v.stderr_tail, v


@namespaces_only
def test_a_setsid_program_that_times_out_leaves_nothing():
    v = run(DEFEAT_HOOK + "os.setsid()\n" + SETSID_CHILD + "while True:\n    pass\n", SandboxConfig(timeout_s=1, cpu_s=30))
    assert v.status == "timeout", v


@namespaces_only
def test_sockets_reach_nothing_with_the_hook_switched_off():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        body = f"import socket\nattempt('connect', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2))\n"
        v = run(DEFEAT_HOOK + body + ESCAPED)
        assert "ESCAPED []" in v.stderr_tail and v.passed, v
        server.settimeout(0.2)
        with pytest.raises(socket.timeout):
            server.accept()


@namespaces_only
def test_disk_use_is_capped_by_the_tmpfs_size():
    body = "for i in range(48):\n    with open(f'f{i}', 'wb') as f:\n        f.write(b'x' * 1024 * 1024)\n"
    v = run(body, SandboxConfig(timeout_s=10, disk_mb=16))
    assert v.status == "failed" and "No space left on device" in v.stderr_tail, v
    assert run(body, SandboxConfig(timeout_s=10, disk_mb=64)).passed  # the same program with room


@namespaces_only
def test_file_count_is_capped_by_the_tmpfs_inodes():
    body = "n = 0\ntry:\n    for n in range(20000):\n        open(f'f{n}', 'w').close()\nfinally:\n    print('MADE', n, file=sys.stderr)\n"
    v = run(body, SandboxConfig(timeout_s=10, max_files=256))
    made = int(re.search(r"MADE (\d+)", v.stderr_tail).group(1))  # type: ignore[union-attr]
    assert v.status == "failed" and "No space left on device" in v.stderr_tail and made < 256, v


@namespaces_only
def test_a_program_that_locks_its_folder_leaves_nothing_and_tmpdir_unchanged():
    tmp = tempfile.gettempdir()
    mode = os.stat(tmp).st_mode
    before = set(os.listdir(tmp))
    v = run("os.mkdir('sub')\nos.chmod('sub', 0)\nos.chmod('.', 0)\n")
    assert v.passed, v
    assert os.stat(tmp).st_mode == mode
    assert not [n for n in set(os.listdir(tmp)) - before if n.startswith("tokenmill-sandbox-")]


UNPRIVILEGED = """import json, os, signal, sys
from tokenmill.eval.config import SandboxConfig
from tokenmill.eval.sandbox import run_program
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
programs = json.load(open(sys.argv[1]))
verdicts = [run_program(p.replace('EVALUATOR_PID', str(os.getpid())), SandboxConfig(timeout_s=5)) for p in programs]
print(json.dumps({'uid': os.getuid(), 'signals': len(got), 'verdicts': [[v.status, v.stderr_tail] for v in verdicts]}))
"""


def unprivileged_python(src: Path) -> tuple[str, dict[str, str]] | None:
    """An interpreter `nobody` can run that imports tokenmill (the venv's own may sit in /root)."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": f"{src}:{site}"}
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for exe in (sys.executable, getattr(sys, "_base_executable", ""), f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        probe = "import subprocess, sys, tokenmill.eval.sandbox; subprocess.run(['unshare', '-r', sys.executable, '-c', ''], check=True)"
        cmd = [*AS_NOBODY, exe, "-c", probe]
        if exe and os.path.exists(exe) and subprocess.run(cmd, env=env, capture_output=True).returncode == 0:
            return exe, env
    return None


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@namespaces_only
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_no_escape_when_the_evaluator_runs_as_an_unprivileged_user(tmp_path: Path):
    found = unprivileged_python(Path(__file__).parents[2] / "src")
    if found is None:
        pytest.skip("no interpreter that nobody can run imports tokenmill here")
    exe, env = found
    shared = Path(tempfile.mkdtemp())
    shared.chmod(0o755)
    outside = shared / "outside"
    outside.mkdir(mode=0o777)
    (outside / "victim.txt").write_text("keep")
    before = host_state(outside)
    programs = [
        HEADER + DEFEAT_HOOK + write_escapes(outside) + ESCAPED,
        HEADER
        + DEFEAT_HOOK
        + signal_escapes(0).replace("(0,", "(EVALUATOR_PID,").replace("/proc/0/", "/proc/EVALUATOR_PID/")
        + ESCAPED,
        HEADER + DEFEAT_HOOK + SETSID_CHILD,
    ]
    (shared / "programs.json").write_text(json.dumps(programs))
    (shared / "evaluate.py").write_text(UNPRIVILEGED)
    for f in shared.iterdir():
        f.chmod(0o755 if f.is_dir() else 0o644)
    outside.chmod(0o777)
    try:
        done = subprocess.run(
            [*AS_NOBODY, exe, str(shared / "evaluate.py"), str(shared / "programs.json")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        res = json.loads(done.stdout.strip().splitlines()[-1])
        assert res["uid"] == 65534 and res["signals"] == 0, res
        for status, tail in res["verdicts"]:
            assert status == "passed" and "ESCAPED [" not in tail.replace("ESCAPED []", ""), tail
            pid_ns = re.search(r"WHERE \S+ \d+ (\S+)", tail).group(1)  # type: ignore[union-attr]
            assert processes_in(pid_ns) == []
        assert host_state(outside) == before
    finally:
        shutil.rmtree(shared)


def test_namespaces_unavailable_refuses_code_tasks_with_one_line(monkeypatch: pytest.MonkeyPatch):
    namespaces_problem.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        with pytest.raises(
            UserError,
            match=r"^eval.sandbox.isolation: namespaces is not available here \(util-linux `unshare` is not on PATH\).*isolation: process",
        ) as e:
            require_namespaces()
        assert "\n" not in str(e.value)
    finally:
        monkeypatch.undo()
        namespaces_problem.cache_clear()
    # process isolation is the user's explicit choice and still runs
    assert run("print('hi')", SandboxConfig(timeout_s=5, isolation="process")).passed
