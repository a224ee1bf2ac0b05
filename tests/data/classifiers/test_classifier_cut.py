"""The corpus-wide classifier cut inside curation: the kept documents are exactly the top p% of
every scored document by (score, id hash), the same for one worker and two, the cut documents
are quarantined with their score and the threshold, and the funnel adds up with the new step."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from tokenmill.config import CurateConfig
from tokenmill.data.classifiers.classifier_cut import RULE, STEP, funnel_steps
from tokenmill.data.curate import curate
from tokenmill.data.curated import curated_buckets
from tokenmill.data.classifiers import top_percent as tp

PCT = 25.0


def _cfg(ref: Path, workers: int, pct: float | None) -> CurateConfig:
    return CurateConfig.model_validate({
        "sources": [{"path": str(ref.parent / "web.jsonl"), "bucket": "web"},
                    {"kind": "python_stdlib", "part": "code", "bucket": "code", "max_docs": 8}],
        "workers": workers, "shard_docs": 40, "chunk_docs": 15,
        # kinds declared as before issue 41 (these pydoc topics would be detected as reference or,
        # hard-wrapped, as books and unwrapped): this tests the cut, not the kinds
        "quality": {"gopher_repetition": False, "c4": False, "fineweb": False,
                    "kinds": {"web": "prose", "code": "code"}},
        "model_quality": {"reference": str(ref), "keep_top_percent": pct}})


def _rows(out: Path, cols: list[str]) -> list[dict]:
    return [r for b in curated_buckets(out) for p in sorted((out / b).glob("part-*.parquet"))
            for r in pq.read_table(p, columns=cols).to_pylist()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import pydoc_data.topics as topics

    root = tmp_path_factory.mktemp("cut")
    ref = root / "ref"
    ref.mkdir()
    names = sorted(topics.topics)
    for name in names[:30]:  # the classifier's "good" examples
        (ref / f"{name}.txt").write_text(topics.topics[name])
    with open(root / "web.jsonl", "w") as fh:  # the documents it scores: the other topics
        for name in names[30:]:
            fh.write(json.dumps({"id": name, "text": topics.topics[name]}) + "\n")
    out = {"ref": ref}
    for name, workers, pct in (("all", 1, None), ("w1", 1, PCT), ("w2", 2, PCT)):
        out[name] = root / name
        curate(_cfg(ref, workers, pct), out[name], progress=False)
    return out


@pytest.mark.slow
def test_the_cut_keeps_exactly_the_top_percent_of_scored_documents(runs):
    everything = _rows(runs["all"], ["id", "bucket", "model_quality"])
    # The cut ranks every document the step scored, including one a later step removes (an
    # exact duplicate): those are in the run's _rejected with their score.
    later = [r for p in sorted((runs["all"] / "_rejected").glob("*.parquet"))
             for r in pq.read_table(p, columns=["id", "bucket", "model_quality"]).to_pylist()]
    scored = [(r["model_quality"]["classifier_score"], r["id"]) for r in everything + later
              if r["model_quality"] and r["model_quality"]["classifier_score"] is not None]
    assert all(r["bucket"] == "web" for r in everything if r["id"] in {i for _, i in scored})
    k = tp.keep_count(len(scored), PCT)
    top = sorted(scored, key=lambda e: (e[0], int(tp.id_keys([e[1]])[0])), reverse=True)[:k]
    unscored = {r["id"] for r in everything} - {i for _, i in scored}
    kept = {r["id"] for r in _rows(runs["w1"], ["id"])}
    removed_later = {r["id"] for r in later if r["model_quality"]}
    assert kept == ({i for _, i in top} | unscored) - removed_later and 0 < k < len(scored)
    assert kept == {r["id"] for r in _rows(runs["w2"], ["id"])}  # any worker count, the same set


def test_cut_documents_are_quarantined_and_counted(runs):
    rejected = pq.read_table(runs["w1"] / "_rejected").to_pylist()
    cut = [r for r in rejected if r["rule"] == RULE]
    funnel = json.loads((runs["w1"] / "_funnel.json").read_text())
    assert funnel["steps"].index(STEP) == funnel["steps"].index("pii") + 1
    assert funnel["total"][STEP]["docs_rejected"] == len(cut) > 0
    assert all(r["step"] == STEP and "below the top 25%" in r["reason"] for r in cut)
    assert all(float(r["value"]) <= min(m["classifier_score"] for m in
               (x["model_quality"] for x in _rows(runs["w1"], ["model_quality"])) if m and m["classifier_score"] is not None)
               for r in cut)
    assert STEP not in json.loads((runs["all"] / "_funnel.json").read_text())["steps"]


def test_config_and_funnel_placement():
    with pytest.raises(ValidationError, match="needs classifier: true"):
        CurateConfig.model_validate({"model_quality": {"keep_top_percent": 10, "classifier": False}})
    with pytest.raises(ValidationError):
        CurateConfig.model_validate({"model_quality": {"keep_top_percent": 0}})
    steps = ("extract", "model_quality", "exact_dedup", "bucket")
    assert funnel_steps(steps, True) == ("read", "extract", "model_quality", STEP, "exact_dedup", "bucket")
    assert funnel_steps(steps, False) == ("read", *steps)


def test_a_run_stopped_between_deciding_and_swapping_a_chunk_resumes_to_the_same_output(runs, tmp_path, monkeypatch):
    """A crash after a chunk's decision is recorded but before its map chunk is rewritten: the
    next call applies the saved threshold, finishes the swap, and neither loses nor cuts twice."""
    import tokenmill.data.classifiers.classifier_cut as cc

    real = cc._swap
    calls = {"n": 0}

    def crash_on_second(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:
            assert src.exists() and (src.parent.parent.parent / cc.CUT_DIR / "threshold.json").exists()
            raise RuntimeError("killed")
        return real(src, dst)

    monkeypatch.setattr(cc, "_swap", crash_on_second)
    out = tmp_path / "resumed"
    with pytest.raises(RuntimeError, match="killed"):
        curate(_cfg(runs["ref"], 1, PCT), out, progress=False)
    monkeypatch.setattr(cc, "_swap", real)
    curate(_cfg(runs["ref"], 1, PCT), out, progress=False)
    assert {r["id"] for r in _rows(out, ["id"])} == {r["id"] for r in _rows(runs["w1"], ["id"])}
    cut = [r for r in pq.read_table(out / "_rejected").to_pylist() if r["rule"] == RULE]
    assert len(cut) == json.loads((runs["w1"] / "_funnel.json").read_text())["total"][STEP]["docs_rejected"]
