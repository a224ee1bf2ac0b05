"""Lineage: a synthetic source's records keep (or get) their lineage, and curation carries it to
every curated row; a malformed lineage is quarantined with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from tokenmill.config import CurateConfig, SourceConfig
from tokenmill.data.sources import read_source
from tokenmill.data.synthetic_lineage import EXTERNAL, lineage_of

LINEAGE = {"version": 1, "generation": 2, "run": "/runs/g1", "checkpoint": "/runs/g1/checkpoints/step_80",
           "step": 80, "model_sha256": "ab" * 32, "seed": 3, "index": 0}


def _prose(i: int) -> str:
    import pydoc_data.topics as t

    return [t.topics[k] for k in sorted(t.topics) if len(t.topics[k]) > 1500][i]


def write_samples(path: Path) -> None:
    records = [
        {"id": "s0", "text": _prose(0), "source": "synthetic", "metadata": {"synthetic": LINEAGE}},
        {"id": "s1", "text": _prose(1), "metadata": {"teacher_prompt": "write a page"}},  # an outside teacher's
        {"id": "s2", "text": _prose(2), "metadata": {"synthetic": {"generation": "two"}}},  # malformed
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_synthetic_source_keeps_lineage_marks_outside_text_and_quarantines_a_bad_one(tmp_path):
    write_samples(tmp_path / "samples.jsonl")
    src = SourceConfig(path=str(tmp_path / "samples.jsonl"), bucket="synthetic", synthetic=True)
    kept, outside, bad = list(read_source(src, 10_000_000))
    assert lineage_of(kept.metadata) == LINEAGE and kept.problem is None
    meta = json.loads(outside.metadata)
    assert meta["metadata"] == {"teacher_prompt": "write a page", "synthetic": EXTERNAL}
    assert lineage_of(outside.metadata)["generation"] == 1
    assert bad.text is None and bad.problem.rule == "bad_lineage" and "integer generation" in bad.problem.reason
    # without the flag the reader leaves records as they are
    plain = list(read_source(src.model_copy(update={"synthetic": False}), 10_000_000))
    assert lineage_of(plain[0].metadata) == LINEAGE and lineage_of(plain[1].metadata) is None and plain[2].problem is None


def test_lineage_of_reads_only_a_real_lineage():
    assert lineage_of(None) is None
    assert lineage_of(json.dumps({"id": "x", "metadata": {"note": "synthetic data"}})) is None
    assert lineage_of(json.dumps({"metadata": {"synthetic": {"generation": 0}}})) is None
    assert lineage_of(json.dumps({"metadata": {"synthetic": {"generation": 3}}})) == {"generation": 3}


def test_curated_rows_carry_the_lineage_and_the_rejected_log_the_bad_one(tmp_path):
    from tokenmill.data.curate import curate

    write_samples(tmp_path / "samples.jsonl")
    cfg = CurateConfig(sources=[SourceConfig(path=str(tmp_path / "samples.jsonl"), bucket="synthetic", synthetic=True)],
                       steps=["normalize", "exact_dedup"], workers=1, max_removal_share=1.0)
    curate(cfg, tmp_path / "curated", progress=False)
    rows = pq.read_table(tmp_path / "curated" / "synthetic").to_pylist()
    by_record = {json.loads(r["metadata"])["id"]: r for r in rows}
    assert set(by_record) == {"s0", "s1"}
    assert lineage_of(by_record["s0"]["metadata"]) == LINEAGE
    assert json.loads(by_record["s0"]["metadata"])["source"] == "synthetic"
    assert lineage_of(by_record["s1"]["metadata"]) == EXTERNAL
    rejected = pq.read_table(tmp_path / "curated" / "_rejected").to_pylist()
    assert [(r["step"], r["rule"]) for r in rejected] == [("read", "bad_lineage")]
