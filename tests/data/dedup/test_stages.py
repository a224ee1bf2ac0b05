"""Global dedup as shuffle stages: the same output for any partitions, shards and workers, and the
decisions of an independent all-pairs computation on planted duplicates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tokenmill.config import CurateConfig, SourceConfig
from tokenmill.data.curate import curate
from tokenmill.data.dedup.minhash import MinHasher, UnionFind, jaccard
from tokenmill.data.document import read_parts

FOOTER = "Copyright 2001-2024 Python Software Foundation. All rights reserved by the foundation."
SHARED_SPAN = ("The quick survey of these interfaces is repeated here verbatim so that the substring step has "
               "a long run of identical words to find in several documents of different shards at once, "
               "and it must keep the first copy and cut every later one out of the text it appears in.")


def topics() -> list[str]:
    import pydoc_data.topics as t

    return [t.topics[k] for k in sorted(t.topics) if len(t.topics[k]) > 1500]


def near_copy(text: str, every: int, mark: str) -> str:
    words = text.split(" ")
    return " ".join(w + mark if i % every == 7 else w for i, w in enumerate(words))


def write_sources(root: Path) -> list[Path]:
    """Four JSONL files (four shards) of real reference text with planted duplicates across them:
    exact copies, near copies, a chain of near copies, a copy of a copy, a footer in 12 documents
    and a long sentence repeated in three."""
    docs = topics()[:40]
    files: list[list[dict]] = [[], [], [], []]
    for i, d in enumerate(docs):
        text = d + ("\n\n" + FOOTER if i % 4 == 0 else "") + ("\n\n" + SHARED_SPAN if i in (2, 21, 36) else "")
        files[i % 4].append({"id": f"t{i}", "text": text})
    files[3].append({"id": "exact-of-t1", "text": docs[1]})  # a later shard copies an earlier one
    files[0].append({"id": "exact-of-t6", "text": docs[6]})  # an earlier file copies a later one
    files[2].append({"id": "near-of-t5", "text": near_copy(docs[5], 60, "x")})
    files[3].append({"id": "near-of-t10", "text": near_copy(docs[10], 100, "y")})
    files[3].append({"id": "near2-of-t10", "text": near_copy(near_copy(docs[10], 100, "y"), 90, "z")})  # a chain
    files[1].append({"id": "exact-of-near", "text": near_copy(docs[5], 60, "x")})  # exact copy of a near copy
    paths = []
    for k, rows in enumerate(files):
        path = root / f"part{k}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(path)
    return paths


def config(paths: list[Path], steps: list[str], **over) -> CurateConfig:
    base = {"sources": [SourceConfig(path=str(p), bucket="reference") for p in paths], "steps": steps,
            "quality": {"c4": False, "fineweb": False, "gopher_repetition": False},
            "line_dedup": {"min_docs": 10}, "substring_dedup": {"enabled": True, "k": 30},
            "chunk_docs": 5, "workers": 1, "max_removal_share": 0.95}
    base.update(over)
    return CurateConfig.model_validate(base)


ALL = ["normalize", "exact_dedup", "minhash_dedup", "line_dedup", "substring_dedup"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> list[Path]:
    return write_sources(tmp_path_factory.mktemp("sources"))


@pytest.fixture(scope="module")
def one_partition(sources, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("p1") / "out"
    curate(config(sources, ALL, dedup_partitions=1), out, progress=False)
    return out


def everything(out: Path) -> dict:
    """Every kept row, every rejected row and the funnel, in a comparable form."""
    result = {d.name: sorted(read_parts(d).to_pylist(), key=lambda r: (r["id"], r.get("reason") or ""))
              for d in sorted(out.iterdir()) if d.is_dir()}
    result["_funnel"] = json.loads((out / "_funnel.json").read_text())
    return result


@pytest.mark.parametrize("partitions, workers, chunk_docs", [(3, 1, 5), (7, 2, 3)])
def test_output_is_identical_for_any_partitions_workers_and_chunks(sources, one_partition, tmp_path,
                                                                   partitions, workers, chunk_docs):
    out = tmp_path / "out"
    curate(config(sources, ALL, dedup_partitions=partitions, workers=workers, chunk_docs=chunk_docs), out, progress=False)
    assert everything(out) == everything(one_partition)


def test_components_in_partitioned_rounds_give_the_same_output(sources, one_partition, tmp_path, monkeypatch):
    """More edges than one components task may hold: the star rounds over hash partitions give
    the same clusters, chains and reasons as the single union-find."""
    from tokenmill.data.dedup import partitioned_components

    rounds: list[int] = []
    real = partitioned_components._rounds
    monkeypatch.setattr(partitioned_components, "_rounds", lambda *a: (rounds.append(a[2]), real(*a))[1])
    out = tmp_path / "out"
    curate(config(sources, ALL, dedup_partitions=2, component_edges_per_task=1), out, progress=False)
    assert rounds and rounds[0] >= 2  # partitions: at least one per edge
    assert everything(out) == everything(one_partition)


def test_every_planted_duplicate_is_found(one_partition):
    rejected = {r["id"]: r for r in read_parts(one_partition / "_rejected").to_pylist()}
    assert rejected["exact-of-t1"]["rule"] == "duplicate_of" and rejected["exact-of-t1"]["value"] == "t1"
    assert rejected["t6"]["rule"] == "duplicate_of" and rejected["t6"]["value"] == "exact-of-t6"  # canonical order
    # the exact copy of the near copy sits in an earlier shard: it is the first copy, and the near one
    assert rejected["near-of-t5"]["rule"] == "duplicate_of" and rejected["near-of-t5"]["value"] == "exact-of-near"
    assert rejected["exact-of-near"]["rule"] == "near_duplicate_of" and rejected["exact-of-near"]["value"] == "t5"
    assert "verified Jaccard" in rejected["exact-of-near"]["reason"]
    assert {rejected[i]["value"] for i in ("near-of-t10", "near2-of-t10")} == {"t10"}  # a chain (J(t10, near2) = 0.77) joins its root
    kept = {r["id"]: r for r in read_parts(one_partition / "reference").to_pylist()}
    assert kept["t10"]["dup_cluster"] == "t10" and kept["t10"]["dup_cluster_size"] == 3
    spans = [r for r in read_parts(one_partition / "_rejected").to_pylist() if r["rule"] == "repeated_span"]
    assert {r["id"] for r in spans if SHARED_SPAN[:60] in r["text"]} == {"t2", "t21"}  # t36 (shard 0) keeps the first copy
    assert sum(FOOTER not in r["text"] for r in kept.values() if r["id"] in ("t0", "t4")) == 2  # the footer is gone


def test_decisions_match_an_independent_all_pairs_computation(sources, tmp_path):
    """Exact: equal normalized text; near: every pair of survivors with exact shingle Jaccard at
    or above the threshold (no LSH), clustered with the smallest index as root."""
    normalized = tmp_path / "normalized"
    curate(config(sources, ["normalize"]), normalized, progress=False)
    docs = _canonical(normalized)
    deduped = tmp_path / "deduped"
    curate(config(sources, ["normalize", "exact_dedup", "minhash_dedup"], dedup_partitions=4), deduped, progress=False)
    got = {r["id"]: (r["rule"], r["value"]) for r in read_parts(deduped / "_rejected").to_pylist()}

    expected: dict[str, tuple[str, str]] = {}
    first: dict[str, int] = {}
    for i, (doc_id, text) in enumerate(docs):
        j = first.setdefault(text, i)
        if j != i:
            expected[doc_id] = ("duplicate_of", docs[j][0])
    alive = [i for i, (doc_id, _) in enumerate(docs) if doc_id not in expected]
    cfg = config(sources, []).minhash_dedup
    sets = MinHasher(cfg, seed=0).shingle_sets([docs[i][1] for i in alive])
    uf = UnionFind(len(alive))
    for x in range(len(alive)):
        for y in range(x + 1, len(alive)):
            if jaccard(sets[x], sets[y]) >= cfg.threshold:
                uf.union(x, y)
    for x, root in enumerate(uf.roots()):
        if root != x:
            expected[docs[alive[x]][0]] = ("near_duplicate_of", docs[alive[root]][0])
    assert len(expected) >= 6
    assert got == expected


def _canonical(out: Path) -> list[tuple[str, str]]:
    """(id, text) of the kept rows in canonical (shard, chunk, row) order."""
    parts = sorted((out / "reference").glob("part-*.parquet"))
    rows = []
    for p in parts:
        t = pq.read_table(p, columns=["id", "text"])
        rows += list(zip(t.column("id").to_pylist(), t.column("text").to_pylist()))
    return rows


def test_the_coordinator_passes_only_per_shard_integers(sources, tmp_path, monkeypatch):
    """Every task argument of the global stages is O(shards + partitions): no list of rows."""
    from tokenmill.data import executor as executor_mod

    seen: list[tuple] = []
    original = executor_mod.LocalExecutor.map

    def spy(self, fn, tasks, on_done=None):
        seen.extend(tasks)
        return original(self, fn, tasks, on_done)

    monkeypatch.setattr(executor_mod.LocalExecutor, "map", spy)
    curate(config(sources, ALL, dedup_partitions=2), tmp_path / "out", progress=False)
    from tokenmill.data.dedup.workspace import DedupJob

    jobs = [a for args in seen for a in args if isinstance(a, DedupJob)]
    assert jobs and all(len(j.shard_bases) == 5 for j in jobs)  # four shards + the total
    for args in seen:
        for a in args:
            assert not isinstance(a, (list, dict, np.ndarray)) or len(a) <= 8, f"a task argument holds {len(a)} items"


KILL_AT = r"""
import os, signal, sys
from pathlib import Path
from tokenmill.config import CurateConfig
from tokenmill.data import curate as curate_mod
from tokenmill.data.dedup import partitioned_components, stages

def killing(fn):
    def wrapper(*args):
        fn(*args)
        os.kill(os.getpid(), signal.SIGKILL)  # a real kill, right after the first task of the stage
    return wrapper

module = partitioned_components if hasattr(partitioned_components, sys.argv[3]) else stages
setattr(module, sys.argv[3], killing(getattr(module, sys.argv[3])))
cfg = CurateConfig.model_validate_json(Path(sys.argv[1]).read_text())
curate_mod.curate(cfg, Path(sys.argv[2]), progress=False)
"""


@pytest.mark.parametrize("stage", ["near_verify", "lines_map", "small_step"])
def test_a_run_killed_inside_a_dedup_stage_resumes_to_the_same_output(sources, one_partition, tmp_path, stage, monkeypatch):
    """SIGKILL the whole job (workers=1: the tasks run in it) right after one task of a stage;
    the rerun writes none of the finished tasks' files again and ends with the undisturbed output.
    small_step: a round of the partitioned connected components (one edge per task)."""
    import subprocess
    import sys

    from tokenmill.data.dedup import join, partitioned_components, stages

    cfg = config(sources, ALL, dedup_partitions=3, component_edges_per_task=1 if stage == "small_step" else None)
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(cfg.model_dump_json())
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", KILL_AT, str(cfg_file), str(out), stage], timeout=300)
    assert proc.returncode == -9 and not out.exists()
    work = tmp_path / ".out.work"
    finished = {p for p in work.rglob("*") if p.is_file() and ({"dedup", "lines"} & set(p.relative_to(work).parts))}
    assert finished, "the kill came before any dedup task finished"
    written: list[Path] = []
    for module, name in ((stages, "write_partitioned"), (join, "write_partitioned"), (stages, "_save"),
                         (stages, "_write_parquet"), (partitioned_components, "write_partitioned")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda path, *a, _real=real: (written.append(Path(path)), _real(path, *a))[1])
    curate(cfg, out, progress=False)
    assert written and not finished & set(written)
    assert everything(out) == everything(one_partition)
    assert not work.exists()
