"""JSON Lines records for the small files users hand in (labelled sets, evaluation sets).

Unlike the curation readers, which quarantine a bad record and go on, these files are tiny and
hand-made: a bad line stops with an error naming the file and the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from tokenmill import json_limits

CHUNK = 1 << 20  # bytes read at once while skipping the rest of an over-long line


def json_objects(lines: Iterable[str], path: Path, error: type[Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line; raise `error` naming path:line otherwise."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json_limits.loads(line)
        except json_limits.TooDeep as exc:
            raise error(f"{path}:{lineno}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(record, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


def bounded_lines(fh: IO[bytes], path: Path, max_bytes: int, error: type[Exception], setting: str) -> Iterator[str]:
    """The lines of a binary file, decoded, each read with at most `max_bytes` + 1 bytes held: a
    longer line raises `error` naming path:line, the limit and the `setting` that raises it,
    before the rest of it is read. So memory is bounded by the setting, not by the file."""
    for lineno, line in enumerate(iter(lambda: fh.readline(max_bytes + 1), b""), start=1):
        if len(line.rstrip(b"\r\n")) > max_bytes:
            raise error(f"{path}:{lineno}: line longer than {max_bytes:,} bytes ({setting})")
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)") from None


def capped_lines(fh: IO[bytes], max_bytes: int) -> Iterator[tuple[str, bool]]:
    """(line, whether it was cut) of a binary file: a line longer than `max_bytes` is cut to its
    first `max_bytes` (less a character the cut splits) and the rest is read in CHUNK blocks and
    dropped, so at most max_bytes + CHUNK bytes are held whatever the line's length. Not UTF-8:
    UnicodeDecodeError, as from a text file."""
    while line := fh.readline(max_bytes + 1):
        if len(line.rstrip(b"\r\n")) <= max_bytes:
            yield line.decode("utf-8"), False
            continue
        end = line
        while not end.endswith(b"\n") and (end := fh.readline(CHUNK)):
            pass
        head = line[:max_bytes]
        try:
            yield head.decode("utf-8"), True
        except UnicodeDecodeError as exc:
            if exc.reason != "unexpected end of data":
                raise
            yield head[: exc.start].decode("utf-8"), True  # the cut fell inside a character
