"""Every function in src/ fits one screen (issue 42): a newcomer reads it whole, without scrolling.

Lengths are counted as `ruff format` leaves the code (line length 130), from the `def` line to the
last line of the body, nested functions counted inside their parent and on their own.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 80

# "path/relative/to/src.py:function" -> (its length when listed, why it stays longer). Empty: every
# function fits. An entry must still be over the limit, so the list never outlives its reason.
ALLOWED: dict[str, tuple[int, str]] = {}


@lru_cache(maxsize=None)  # both src/ checks share one parse
def function_lengths(root: Path = SRC) -> dict[str, int]:
    """Lines of every function and method under `root`, keyed "path:name" (the longest of equal keys)."""
    lengths: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{path.relative_to(root).as_posix()}:{node.name}"
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                lengths[key] = max(n, lengths.get(key, 0))
    return lengths


def test_no_function_longer_than_a_screen() -> None:
    lengths = function_lengths()
    assert len(lengths) > 500, f"only {len(lengths)} functions found under {SRC}: wrong directory?"
    too_long = {k: n for k, n in lengths.items() if n > MAX_LINES and k not in ALLOWED}
    assert not too_long, (
        f"functions over {MAX_LINES} lines (split them into named helpers, or list them in ALLOWED "
        "with their length and a reason): " + ", ".join(f"{k} {n}" for k, n in sorted(too_long.items(), key=lambda kv: -kv[1]))
    )


def test_allowlist_is_current() -> None:
    lengths = function_lengths()
    stale = {k: lengths.get(k) for k in ALLOWED if lengths.get(k, 0) <= MAX_LINES}
    assert not stale, f"ALLOWED entries now within {MAX_LINES} lines or gone (remove them): {stale}"


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    # the measure itself: a real file with one function of 81 lines and one of 80
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n    return x0\n\n\ndef fits():\n{body}\n")
    assert function_lengths(tmp_path) == {"m.py:long": 81, "m.py:fits": 80}
