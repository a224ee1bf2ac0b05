"""Every example the README and the guides under docs/ mark as runnable runs, for real, as written.

A marked example is a fenced ```bash block right after a marker line:

    <!-- example: NAME creates: PATH PATH ... -->

The block runs under `bash -e -o pipefail` in a fresh temporary folder with `tokenmill` on PATH: a
two-line shim there runs `python -m tokenmill` with the interpreter running the tests and this
checkout's `src/` first on PYTHONPATH, so the examples exercise the code under test, not an
installed copy. It must exit 0, and every path after `creates:` (relative to that folder) must
exist afterwards. Keep examples to tiny inputs: the whole file runs in well under a minute.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKED = re.compile(r"<!-- example: (?P<name>[\w-]+)(?: creates: (?P<creates>[^>]*?))? -->\n```(?:bash|sh)\n(?P<body>.*?)\n```",
                    re.S)
MARKER = re.compile(r"<!-- example:")


@dataclass(frozen=True)
class Example:
    """One marked block: where it is, what it runs and the files it says it makes."""

    doc: Path
    name: str
    body: str
    creates: tuple[str, ...]


def examples(doc: Path) -> list[Example]:
    text = doc.read_text()
    found = [Example(doc, m["name"], m["body"], tuple((m["creates"] or "").split())) for m in MARKED.finditer(text)]
    # A marker whose block does not parse (wrong fence, a blank line between) must not vanish silently.
    assert len(found) == len(MARKER.findall(text)), f"{doc.name}: a `<!-- example:` marker is not followed by a ```bash block"
    return found


ALL = [ex for doc in DOCUMENTS for ex in examples(doc)]


def test_every_guide_has_an_example() -> None:
    guides = {p.name for p in (ROOT / "docs").glob("*.md")} - {"architecture.md"}
    assert guides <= {ex.doc.name for ex in ALL}, "each docs/ guide shows at least one runnable example"
    names = [ex.name for ex in ALL]
    assert len(names) == len(set(names)), f"example names repeat: {names}"


def shim(bin_dir: Path) -> dict[str, str]:
    """A `tokenmill` command on PATH running this checkout's source; the environment to run under."""
    bin_dir.mkdir()
    exe = bin_dir / "tokenmill"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tokenmill "$@"\n')
    exe.chmod(0o755)
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": path, "COLUMNS": "200"}


# Examples that train or evaluate for several seconds run in `make test-slow` and CI.
SLOW_EXAMPLES = {"evaluation.md:eval-run", "training.md:train-stages", "operations.md:owned-output"}
assert SLOW_EXAMPLES <= {f"{ex.doc.name}:{ex.name}" for ex in ALL}, "a slow example that is not an example"


def _param(ex: Example):
    name = f"{ex.doc.name}:{ex.name}"
    return pytest.param(ex, id=name, marks=[pytest.mark.slow] if name in SLOW_EXAMPLES else [])


@pytest.mark.parametrize("ex", [_param(ex) for ex in ALL])
def test_example_runs(ex: Example, tmp_path: Path) -> None:
    env = shim(tmp_path / "bin")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", ex.body], cwd=work, env=env, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{ex.doc.name} example {ex.name} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    missing = [p for p in ex.creates if not (work / p).exists()]
    assert missing == [], f"{ex.doc.name} example {ex.name} did not create {missing}"
