"""JSON parsed with a nesting-depth limit, for every file tokenmill reads that a user or a tool wrote.

Python's `json` recurses once per nesting level: a 4 KB line of 2,000 `[` raises RecursionError
(from the parser, or from any later walk over the object), and a deep enough one can exhaust the C
stack. So a document is checked for its depth *before* it is parsed, and one nested deeper than
`MAX_DEPTH` is refused with `TooDeep`, a `ValueError` the caller turns into one line naming the file
and line (or, in curation, a quarantined record with the reason `too_deep`).

The check costs almost nothing on ordinary records: nesting can only be as deep as the number of
`[` and `{` in the text, which `str.count` finds at C speed; only a text with more brackets than the
limit is scanned exactly (outside its strings, where brackets do not nest).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from tokenmill.errors import UserError

MAX_DEPTH = 200  # deeper than any real record (lm-eval, BIG-bench, HF configs nest < 20), far below recursion limits

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class TooDeep(ValueError):
    """A JSON text nested deeper than its limit; `depth` is how deep it got before the scan stopped."""

    def __init__(self, depth: int, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.depth = depth
        self.limit = limit


def nesting_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in `text` (brackets inside strings do not count).
    Malformed text gets a number too: the parser judges it, and stops at the first bracket that
    closes nothing, before any nesting that follows."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    brackets = _NOT_BRACKET.sub("", _STRING.sub('""', text)).encode("ascii")
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return max(0, int(np.cumsum(steps, dtype=np.int64).max()))


def check_depth(text: str | bytes, limit: int = MAX_DEPTH) -> None:
    """Raise `TooDeep` when `text` nests deeper than `limit`; free for texts with few brackets."""
    if isinstance(text, (bytes, bytearray)):
        opens = text.count(b"[") + text.count(b"{")
    else:
        opens = text.count("[") + text.count("{")
    if opens <= limit:
        return
    depth = nesting_depth(text)
    if depth > limit:
        raise TooDeep(depth, limit)


def loads(text: str | bytes, limit: int = MAX_DEPTH) -> Any:
    """`json.loads` after the depth check: raises `TooDeep` or `json.JSONDecodeError` (both ValueError)."""
    check_depth(text, limit)
    return json.loads(text)


class BadJSONFile(UserError, ValueError):
    """A JSON file that is not UTF-8, not JSON, or nested too deep: one line naming it. A ValueError
    too, so a caller that treats an unreadable file as absent still catches it."""


def load_file(path: Path | str, error: type[Exception] = BadJSONFile, limit: int = MAX_DEPTH) -> Any:
    """The JSON document in the file at `path`, depth-checked; anything but valid UTF-8 JSON within
    `limit` levels raises `error` with one line naming the file (and, for bad JSON, where)."""
    try:
        return loads(Path(path).read_text(encoding="utf-8"), limit)
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except TooDeep as e:
        raise error(f"{path}: {e}") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
