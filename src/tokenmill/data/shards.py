"""Shards: the units of work of a curation run, planned from the sources alone.

A shard is a run of consecutive files of one source (in the order `read_source` reads them), or
a whole source. Planning looks only at the sorted file list and file sizes, so the plan is the
same on every call and for any number of workers, and an executor can run shards in any order
and on any machine:

- files are taken in reading order and grouped until the next file would push the shard past
  `target_bytes` (on-disk bytes, compressed where the file is); a file of target_bytes or more
  is a shard of its own (a resumed shard skips its first N records, so even a very large single
  file loses or repeats nothing);
- a source with `max_docs` / `max_bytes` is ONE shard: the limit takes a prefix of the whole
  source, which no shard could cut alone;
- a python_stdlib source is one shard (its records do not come from files).

`read_shard` yields exactly the records, ids and order that `read_source` yields for those
files; reading every shard of a source in plan order gives `read_source` of the source.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tokenmill.data.config import SourceConfig
from tokenmill.data import sources as source_step
from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import ReadLimits, file_size

DEFAULT_TARGET_BYTES = 64 << 20


@dataclass(frozen=True)
class ShardSpec:
    """One unit of work: `files` of `sources[source]` (empty: the whole source)."""

    index: int  # position in the plan, 0..n-1
    source: int  # index into the sources list
    files: tuple[str, ...]
    label: str  # "s<source>-<k>", k counting the shards of that source; safe as a file name


def _is_whole_source(src: SourceConfig) -> bool:
    return src.kind != "files" or src.max_docs is not None or src.max_bytes is not None


def _group(sizes: list[tuple[str, int]], target_bytes: int) -> list[tuple[str, ...]]:
    """Consecutive files in runs of at most target_bytes; a file that alone reaches it stands alone."""
    groups: list[tuple[str, ...]] = []
    current: list[str] = []
    total = 0
    for name, size in sizes:
        if current and (size >= target_bytes or total + size > target_bytes):
            groups.append(tuple(current))
            current, total = [], 0
        current.append(name)
        total += size
        if size >= target_bytes:
            groups.append(tuple(current))
            current, total = [], 0
    if current:
        groups.append(tuple(current))
    return groups


def plan_shards(sources: list[SourceConfig], target_bytes: int = DEFAULT_TARGET_BYTES) -> list[ShardSpec]:
    """The shards of a run, sources in the given order, each source's files in reading order."""
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    shards: list[ShardSpec] = []
    for i, src in enumerate(sources):
        if src.kind == "files":
            source_step.check_source(src)
            _root, files = source_step.list_source_files(src.path or "")
            names = [str(f) for f in files]
            if not names:
                continue  # an empty directory holds no record
            groups = (
                [tuple(names)]
                if _is_whole_source(src)
                else _group([(n, file_size(f)) for n, f in zip(names, files)], target_bytes)
            )
        else:
            source_step.check_source(src)
            groups = [()]
        for k, group in enumerate(groups):
            shards.append(ShardSpec(len(shards), i, group, f"s{i:03d}-{k:05d}"))
    return shards


def read_shard(
    spec: ShardSpec, sources: list[SourceConfig], max_doc_bytes: int, limits: ReadLimits | None = None
) -> Iterator[RawRecord]:
    """The records of one shard, exactly as `read_source` yields them for those files."""
    src = sources[spec.source]
    if src.kind != "files":
        return source_step.read_source(src, max_doc_bytes, limits)
    records = source_step.read_files(src, max_doc_bytes, [Path(f) for f in spec.files], limits)
    if _is_whole_source(src):  # the plan kept the source whole, so its limit applies here exactly
        return source_step.limit(records, src.max_docs, src.max_bytes)
    return records
