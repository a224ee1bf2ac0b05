"""Shard planning and reading: shards partition every source exactly, deterministically."""

from __future__ import annotations

import gzip
import json
from itertools import islice
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import SourceConfig
from tokenmill.data.shards import ShardSpec, plan_shards, read_shard
from tokenmill.data.sources import SourceError, list_source_files, read_source

MAX_DOC = 100_000


def _corpus(root: Path, order: list[int] | None = None) -> None:
    """A mixed tree: text files of varied sizes, JSONL (plain and gzip), Parquet, a nested dir."""
    files: list[tuple[str, bytes]] = []
    for i in range(12):
        files.append((f"t/{i:02d}.txt", (f"document {i} " * (20 + 37 * i)).encode()))
    for i in range(3):
        rows = b"".join(json.dumps({"text": f"row {i}-{j} " * 5}).encode() + b"\n" for j in range(40))
        files.append((f"j/{i}.jsonl", rows))
        files.append((f"j/{i}.jsonl.gz", gzip.compress(rows, mtime=0)))
    files.append(("big/huge.txt", b"big document " * 3000))
    files.append(("nested/deeper/x.md", b"# title\n\nbody text\n"))
    for k in order or range(len(files)):  # creation order must not matter
        rel, data = files[k]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    pq.write_table(pa.table({"text": [f"pq {i}" for i in range(30)]}), root / "p.parquet")


def _sources(root: Path) -> list[SourceConfig]:
    return [SourceConfig(kind="files", path=str(root), bucket="web"),
            SourceConfig(kind="files", path=str(root / "t"), bucket="b", max_docs=5),
            SourceConfig(kind="files", path=str(root / "j" / "*.jsonl"), bucket="c"),
            SourceConfig(kind="python_stdlib", part="reference", bucket="ref", max_bytes=200_000)]


def _ids_texts(records) -> list[tuple[str, str | None, str | None]]:
    return [(r.id, r.text, r.problem.rule if r.problem else None) for r in records]


@pytest.mark.parametrize("target", [1, 700, 5_000, 40_000, 64 << 20])
def test_shards_partition_each_source_exactly(tmp_path, target):
    _corpus(tmp_path)
    sources = _sources(tmp_path)
    plan = plan_shards(sources, target)
    for i, src in enumerate(sources):
        whole = _ids_texts(read_source(src, MAX_DOC))
        sharded = _ids_texts(r for s in plan if s.source == i for r in read_shard(s, sources, MAX_DOC))
        assert sharded == whole and whole
    assert [s.index for s in plan] == list(range(len(plan)))
    assert len({s.label for s in plan}) == len(plan)


def test_grouping_respects_target_and_big_files_stand_alone(tmp_path):
    _corpus(tmp_path)
    sources = _sources(tmp_path)[:1]
    target = 5_000
    plan = plan_shards(sources, target)
    listed = [f for s in plan for f in s.files]
    assert listed == [str(f) for f in list_source_files(str(tmp_path))[1]]  # each file once, in reading order
    for s in plan:
        sizes = [Path(f).stat().st_size for f in s.files]
        assert len(sizes) == 1 or sum(sizes) <= target
        if any(size >= target for size in sizes):
            assert len(sizes) == 1
    assert any(s.files == (str(tmp_path / "big" / "huge.txt"),) for s in plan)
    assert len(plan_shards(sources, 1)) == len(listed)  # every file alone
    assert len(plan_shards(sources, 1 << 40)) == 1


def test_limited_and_stdlib_sources_are_one_shard(tmp_path):
    _corpus(tmp_path)
    plan = plan_shards(_sources(tmp_path), 1)
    assert sum(1 for s in plan if s.source == 1) == 1 and sum(1 for s in plan if s.source == 3) == 1
    assert [s.files for s in plan if s.source == 3] == [()]
    limited = [r for s in plan if s.source == 1 for r in read_shard(s, _sources(tmp_path), MAX_DOC)]
    assert len(limited) == 5


def test_plan_does_not_depend_on_creation_or_call_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    _corpus(a)
    _corpus(b, order=list(range(20))[::-1])

    def shape(root: Path, plan: list[ShardSpec]) -> list[tuple]:
        return [(s.index, s.source, s.label, tuple(Path(f).relative_to(root).as_posix() for f in s.files))
                for s in plan]

    pa_, pb = plan_shards(_sources(a)[:3], 3_000), plan_shards(_sources(b)[:3], 3_000)
    assert shape(a, pa_) == shape(b, pb)
    assert plan_shards(_sources(a)[:3], 3_000) == pa_
    # sources in another order: each source's groups of files stay the same
    rev = plan_shards(_sources(a)[:3][::-1], 3_000)
    assert [s.files for s in rev if s.source == 0] == [s.files for s in pa_ if s.source == 2]


def test_resume_by_skipping_records_is_exact(tmp_path):
    _corpus(tmp_path)
    sources = _sources(tmp_path)
    shard = max(plan_shards(sources, 40_000), key=lambda s: len(s.files))
    full = _ids_texts(read_shard(shard, sources, MAX_DOC))
    n = len(full) // 3
    assert _ids_texts(islice(read_shard(shard, sources, MAX_DOC), n, None)) == full[n:]


def test_bad_plans(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        plan_shards([SourceConfig(kind="files", path=str(tmp_path / "missing"), bucket="web")])
    with pytest.raises(ValueError):
        plan_shards([], 0)
    (tmp_path / "empty").mkdir()
    assert plan_shards([SourceConfig(kind="files", path=str(tmp_path / "empty"), bucket="web")]) == []
