"""The hostile-user suite's shared tools: a whole-tree snapshot (nothing deleted or changed outside
what tokenmill created), the CLI run as a real process, and the checks every case makes of its
output (one or two lines, no traceback)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


# Linux carries a process's peak RSS across fork and exec: a child forked from a parent that holds
# torch (the builder trained a tiny run) reports the parent's size as its own ru_maxrss. So a case
# runs under this small launcher, which forks the command from a fresh interpreter and writes the
# command's own peak (wait4, KB) to the file named first; it exits with the command's status.
PEAK_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(128 - code if code < 0 else code)
"""


def measured(argv: list[str], peak_file: Path) -> list[str]:
    """`argv` run under PEAK_LAUNCHER: its own peak RSS (KB) lands in `peak_file` when it ends."""
    return [sys.executable, "-c", PEAK_LAUNCHER, str(peak_file), *argv]


def read_peak_kb(peak_file: Path) -> int:
    """The peak the launcher wrote (0 when the launcher itself was killed before it could)."""
    try:
        return int(peak_file.read_text() or 0)
    except (OSError, ValueError):
        return 0


def tree_snapshot(root: Path) -> dict[str, str]:
    """Every file, folder and link under root, by relative path: a file's SHA-256, a link's target,
    "dir" for a folder. Comparing two snapshots shows anything deleted, changed or added."""
    snap: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if os.path.islink(full):
                snap[rel] = "link:" + os.readlink(full)
            elif os.path.isdir(full):
                snap[rel] = "dir"
            else:
                with open(full, "rb") as fh:
                    snap[rel] = hashlib.sha256(fh.read()).hexdigest()
    return snap


def assert_untouched(before: dict[str, str], after: dict[str, str], created_under: tuple[str, ...] = ()) -> None:
    """Nothing in `before` was deleted or changed; anything new lies under one of `created_under`
    (relative paths of what tokenmill was asked to create)."""
    lost = sorted(p for p in before if p not in after)
    changed = sorted(p for p in before if p in after and before[p] != after[p])
    added = sorted(p for p in after if p not in before
                   and not any(p == c or p.startswith(c.rstrip("/") + "/") for c in created_under))
    assert not lost, f"deleted: {lost[:10]}"
    assert not changed, f"changed: {changed[:10]}"
    assert not added, f"created outside {created_under}: {added[:10]}"


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, cwd: Path | None = None, timeout: float = 300,
            env: dict[str, str] | None = None) -> CliResult:
    """`tokenmill ARGS` as a real process (the interpreter running the tests, so the checkout's source)."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "tokenmill", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def assert_clean_error(result: CliResult, *must_contain: str, max_lines: int = 2) -> None:
    """A refusal: non-zero exit, no traceback, at most `max_lines` lines on stderr naming what it must."""
    assert result.returncode != 0, f"exited 0: {result.stdout[-500:]} {result.stderr[-500:]}"
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-2000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert 1 <= len(lines) <= max_lines, result.stderr
    for text in must_contain:
        assert text in result.stderr, f"{text!r} not in {result.stderr!r}"


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    """A folder for one hostile case (its own, so a snapshot sees only what the case made)."""
    d = tmp_path / "case"
    d.mkdir()
    return d
