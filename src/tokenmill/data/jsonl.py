"""JSON Lines records for the small files users hand in (labelled sets, evaluation sets).

Unlike the curation readers, which quarantine a bad record and go on, these files are tiny and
hand-made: a bad line stops with an error naming the file and the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from tokenmill import json_limits


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
