"""Record selection: curate only the records a list names (an outside curation decision).

Some curation decisions are made outside tokenmill: labels from a human pass, a peer pipeline's
filter output, the kept ids of an earlier run. `curate.select.ids` names a file of record ids;
every record whose id is not on it is removed by the rule `not_selected`, before any other step
works on it. This is how `tokenmill ablate` compares tokenmill's filters with an oracle's labels
or datatrove's decisions on the *same* sources (an arm may change curation only).

The id of a record is its own `id` field (JSONL / Parquet; kept in `metadata.id`) or else its
document id (the hash of source and locator, as in the curated rows). The file holds one id per
line, or JSONL objects with an "id" field (a `.jsonl` suffix); blank lines are skipped.

Memory: each worker holds the list as a sorted array of 64-bit hashes, 8 bytes an id (a list of
10 M ids is 80 MB per worker); a hash collision could keep a record that is not listed, with
probability about n_records x n_ids / 2^64.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xxhash

from tokenmill import json_limits
from tokenmill.data.document import Doc, Rejection
from tokenmill.data.step import DocStep
from tokenmill.errors import UserError

VERSION = "1"


class SelectError(UserError, ValueError):
    """An id list that cannot be read; the message names the file and line."""


def read_id_list(path: Path) -> list[str]:
    """The ids a list file names: one per line, or the "id" of each JSONL object."""
    if not path.is_file():
        raise SelectError(f"{path}: id list not found (curate.select.ids)")
    ids: list[str] = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if path.suffix != ".jsonl":
                ids.append(line)
                continue
            try:
                obj = json_limits.loads(line)
            except json_limits.TooDeep as exc:
                raise SelectError(f"{path}:{n}: {exc}") from None
            except json.JSONDecodeError as exc:
                raise SelectError(f"{path}:{n}: not JSON ({exc.msg})") from exc
            rid = obj.get("id") if isinstance(obj, dict) else None
            if not isinstance(rid, (str, int)) or isinstance(rid, bool):
                raise SelectError(f'{path}:{n}: needs an "id" (a string or an integer)')
            ids.append(str(rid))
    return ids


def id_hash(rid: str) -> int:
    """64-bit hash of an id (lone surrogates, which JSON can carry, hash too)."""
    return xxhash.xxh64_intdigest(rid.encode("utf-8", "surrogatepass"))


def id_hashes(ids: list[str]) -> np.ndarray:
    """Sorted unique 64-bit hashes of the ids, for a binary-search lookup."""
    return np.unique(np.fromiter((id_hash(i) for i in ids), dtype=np.uint64, count=len(ids)))


def record_id(doc: Doc) -> str:
    """The record's own id (metadata.id) when it has one, else the document id."""
    if doc.metadata:
        try:
            meta = json_limits.loads(doc.metadata)
        except ValueError:  # not JSON, or too deep: the document id stands
            meta = None
        if isinstance(meta, dict) and isinstance(meta.get("id"), (str, int)) and not isinstance(meta["id"], bool):
            return str(meta["id"])
    return doc.id


class Select(DocStep):
    """Removes every record whose id is not on `curate.select.ids` (off when no list is given)."""

    name = "select"
    version = VERSION

    def enabled(self) -> bool:
        return self.cfg.select.ids is not None

    def prepare(self, work_dir: Path) -> None:
        self.setup(work_dir)  # an unreadable list fails in the driver, before any work

    def setup(self, work_dir: Path) -> None:
        assert self.cfg.select.ids is not None
        self._path = self.resolve(self.cfg.select.ids)
        self._hashes = id_hashes(read_id_list(self._path))

    def process(self, doc: Doc) -> Rejection | None:
        rid = record_id(doc)
        h = np.uint64(id_hash(rid))
        i = int(np.searchsorted(self._hashes, h))
        if i < len(self._hashes) and self._hashes[i] == h:
            return None
        return Rejection(self.name, "not_selected", rid, f"id {rid} is not on the list {self._path.name}")
