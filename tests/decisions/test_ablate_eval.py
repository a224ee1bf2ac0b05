"""The ablation's evaluation set: picked by a salted hash of the id, the lowest scores per bucket,
exactly what sorting every document would give; written once and reused."""

from __future__ import annotations

import json

import pytest

from tests.conftest import write_curated
from tokenmill.data.heldout_split import split_score
from tokenmill.decisions.ablate_config import AblateError, AblateEvalConfig
from tokenmill.decisions.ablate_eval import SET_FILE, build_eval_set, pick_slice


def test_pick_equals_sorting_every_document():
    docs = [(f"doc-{i}", f"text {i}") for i in range(2000)]
    picked = pick_slice(iter(docs), 0.1, 25, seed=7)
    brute = sorted((split_score(i, 7), i, t) for i, t in docs)
    brute = [e for e in brute if e[0] < 0.1][:25]
    assert picked == brute and len(picked) == 25
    assert pick_slice(iter(docs), 0.1, 25, seed=8) != picked  # the salt changes the set
    few = pick_slice(iter(docs[:50]), 0.1, 25, seed=7)
    assert all(s < 0.1 for s, _, _ in few) and len(few) < 25  # the fraction caps it too


def test_build_writes_slices_and_the_whole_set(tmp_path):
    curated = tmp_path / "curated"
    write_curated(tmp_path, {"web": [f"web page number {i} " * 20 for i in range(200)],
                            "code": [f"def f{i}(): return {i}\n" * 10 for i in range(100)]})
    extra = tmp_path / "clean.jsonl"
    extra.write_text(json.dumps({"text": "A clean held-out paragraph."}) + "\n")
    cfg = AblateEvalConfig(fraction=0.2, max_docs=10, files={"clean": str(extra)})
    m = build_eval_set(curated, cfg, tmp_path / "set")
    assert {k: v["docs"] for k, v in m["slices"].items()} == {"code": 10, "web": 10, "clean": 1}
    whole = [json.loads(line) for line in (tmp_path / "set" / SET_FILE).read_text().splitlines()]
    assert len(whole) == 21 and {r["slice"] for r in whole} == {"web", "code", "clean"}
    web = [json.loads(line) for line in (tmp_path / "set" / "web.jsonl").read_text().splitlines()]
    assert [r["id"] for r in web] == [r["id"] for r in whole if r["slice"] == "web"]
    assert m["slices"]["web"]["bytes"] == sum(len(r["text"].encode()) for r in web)
    # a second call reads the manifest instead of picking again
    (tmp_path / "set" / "web.jsonl").unlink()
    assert build_eval_set(curated, cfg, tmp_path / "set") == m
    with pytest.raises(AblateError, match="a bucket of the sources has that name"):
        build_eval_set(curated, AblateEvalConfig(fraction=0.2, files={"web": str(extra)}), tmp_path / "other")
