"""Decontamination: a planted 13-gram of an eval item is found and a 12-gram is not; the overlap
share is exact; the index is rebuilt only when its inputs change; shard reports merge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenmill.config import CurateConfig, DecontaminateConfig
from tokenmill.data.steps.decontaminate import (Decontaminate, EvalSetError, merge_overlap_stats, overlap_report,
                                          read_items)
from tokenmill.data.document import Doc

# 18 words; with the answer, the item is 20 words: 8 distinct 13-grams
ITEM = ("Which river flows through the ancient city of Baghdad and joins the Euphrates "
        "before reaching the Persian Gulf?")
ANSWER = "The Tigris"
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split()


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _step(tmp_path: Path, max_overlap: float = 0.0, n: int = 13) -> Decontaminate:
    _write(tmp_path / "qa.jsonl", [{"id": "q1", "question": ITEM, "answer": ANSWER},
                                   {"id": "q2", "question": "Too short to check."},
                                   {"text": " ".join(f"word{i}" for i in range(30))}])
    _write(tmp_path / "other.jsonl", [{"text": " ".join(f"other{i}" for i in range(14))}])
    cfg = CurateConfig(decontaminate=DecontaminateConfig(eval_sets=["qa.jsonl", "other.jsonl"],
                                                         text_fields=["text", "question", "answer"],
                                                         n=n, max_overlap=max_overlap))
    step = Decontaminate(cfg, base_dir=tmp_path)
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    return step


def _doc(text: str) -> Doc:
    return Doc(id="d", text=text, source="s", url="u", bucket="web", license="x", format="text")


def _around(words: list[str]) -> str:
    return " ".join(FILLER + words + FILLER)


def test_planted_13_gram_is_found_and_12_gram_is_not(tmp_path):
    step = _step(tmp_path)
    words = ITEM.split()
    doc = _doc(_around(words[3:16]))  # exactly one 13-gram of the item
    r = step.process(doc)
    assert r is not None and (r.step, r.rule) == ("decontaminate", "eval_overlap")
    assert doc.contamination == {"max_overlap": 1 / 8, "eval_set": "qa.jsonl", "shared_ngrams": 1}
    assert "'q1'" in r.reason and r.value == "0.125"
    doc12 = _doc(_around(words[3:15]))  # 12 words: no 13-gram
    assert step.process(doc12) is None
    assert doc12.contamination == {"max_overlap": 0.0, "eval_set": None, "shared_ngrams": 0}


def test_overlap_share_is_exact_and_normalised(tmp_path):
    step = _step(tmp_path, max_overlap=0.5)
    words = (ITEM + " " + ANSWER).split()
    doc = _doc(_around([w.upper() + "," for w in words[:15]]))  # case and punctuation differ
    assert step.process(doc) is None  # 3/8 is not above 0.5
    assert doc.contamination == {"max_overlap": 3 / 8, "eval_set": "qa.jsonl", "shared_ngrams": 3}
    whole = _doc("Quoted: " + ITEM + " " + ANSWER + ".")
    assert step.process(whole) is not None and whole.contamination["max_overlap"] == 1.0


def test_largest_share_wins_across_eval_sets(tmp_path):
    step = _step(tmp_path)
    qa_words = ITEM.split()
    doc = _doc(" ".join(qa_words[:14]) + " and then " + " ".join(f"other{i}" for i in range(14)))
    step.process(doc)
    # qa: 2 of 8 13-grams; other.jsonl: 2 of its 2
    assert doc.contamination == {"max_overlap": 1.0, "eval_set": "other.jsonl", "shared_ngrams": 2}


def test_report_counts_items_and_removed_docs_and_merges_shards(tmp_path):
    step = _step(tmp_path)
    words = ITEM.split()
    step.process(_doc(_around(words[:13])))
    step.process(_doc("nothing here at all"))
    first = step.take_stats()
    step.process(_doc(_around(words[5:18])))
    step.process(_doc(" ".join(f"other{i}" for i in range(14))))
    second = step.take_stats()
    assert step.take_stats() == {}
    merged = merge_overlap_stats([first, second])
    assert merged == merge_overlap_stats([second, first])
    assert merged["qa.jsonl"] == {"docs_removed": 2, "docs_with_overlap": 2, "contaminated_items": [0]}
    report = overlap_report([first, second], tmp_path / "work", 0.0)
    qa = report["eval_sets"]["qa.jsonl"]
    assert report["n"] == 13
    assert (qa["items"], qa["items_too_short"], qa["items_contaminated"], qa["docs_removed"]) == (3, 1, 1, 2)
    assert qa["contaminated_share"] == 0.5 and qa["contaminated_item_ids"] == ["q1"]
    assert report["eval_sets"]["other.jsonl"]["docs_removed"] == 1


def test_index_is_reused_until_inputs_change(tmp_path):
    step = _step(tmp_path)
    meta = tmp_path / "work" / "decontaminate" / "meta.json"
    stamp = meta.stat().st_mtime_ns
    step.prepare(tmp_path / "work")
    assert meta.stat().st_mtime_ns == stamp  # same inputs: not rebuilt
    _write(tmp_path / "other.jsonl", [{"text": " ".join(f"changed{i}" for i in range(14))}])
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    doc = _doc(" ".join(f"changed{i}" for i in range(14)))
    assert step.process(doc) is not None


def test_bad_eval_files_are_clear_errors(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{not json\n', encoding="utf-8")
    with pytest.raises(EvalSetError, match=r"bad.jsonl:2"):
        list(read_items(tmp_path / "bad.jsonl", ["text"]))
    cfg = CurateConfig(decontaminate=DecontaminateConfig(eval_sets=["missing.jsonl"]))
    with pytest.raises(EvalSetError, match="missing.jsonl"):
        Decontaminate(cfg, base_dir=tmp_path).prepare(tmp_path / "work")


def test_disabled_without_eval_sets():
    assert not Decontaminate(CurateConfig()).enabled()
    assert Decontaminate.name == "decontaminate"


def test_an_ngram_shared_by_several_items_counts_for_each(tmp_path):
    words = [f"t{i}" for i in range(20)]
    _write(tmp_path / "a.jsonl", [{"id": "long", "text": " ".join(words)},
                                  {"id": "prefix", "text": " ".join(words[:14])},
                                  {"id": "copy", "text": " ".join(words)}])
    cfg = CurateConfig(decontaminate=DecontaminateConfig(eval_sets=["a.jsonl"]))
    step = Decontaminate(cfg, base_dir=tmp_path)
    step.prepare(tmp_path / "w")
    step.setup(tmp_path / "w")
    items, shared = step.overlaps(_around(words[:14]))
    assert items.tolist() == [0, 1, 2] and shared.tolist() == [2, 2, 2]
    doc = _doc(_around(words[:14]))
    step.process(doc)
    assert doc.contamination == {"max_overlap": 1.0, "eval_set": "a.jsonl", "shared_ngrams": 2}
    assert step.take_stats()["a.jsonl"]["contaminated_items"] == [0, 1, 2]


def test_a_set_can_have_its_own_limit(tmp_path):
    """set_max_overlap: whole held-out documents get a looser limit than benchmark items, whose
    any shared 13-gram still removes a document."""
    _write(tmp_path / "qa.jsonl", [{"id": "q1", "question": ITEM, "answer": ANSWER}])
    _write(tmp_path / "held.jsonl", [{"id": "h1", "text": " ".join(f"held{i}" for i in range(20))}])  # 8 13-grams
    cfg = CurateConfig(decontaminate=DecontaminateConfig(eval_sets=["qa.jsonl", "held.jsonl"],
                                                         text_fields=["text", "question", "answer"],
                                                         set_max_overlap={"held.jsonl": 0.5}))
    step = Decontaminate(cfg, base_dir=tmp_path)
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    held = [f"held{i}" for i in range(20)]
    footer = _doc(_around(held[:15]))  # 3 of the document's 8 13-grams: under its 0.5
    assert step.process(footer) is None and footer.contamination["max_overlap"] == 3 / 8
    copy = _doc(_around(held[:18]))  # 6 of 8: a copy
    assert step.process(copy) is not None and copy.contamination["eval_set"] == "held.jsonl"
    # one 13-gram of the benchmark item is reported even beside a larger share of the held set
    both = _doc(_around(ITEM.split()[:13] + ["and"] + held[:15]))
    r = step.process(both)
    assert r is not None and both.contamination == {"max_overlap": 1 / 8, "eval_set": "qa.jsonl", "shared_ngrams": 1}
    assert "the limit is 0.0%" in r.reason
    with pytest.raises(ValueError, match="set_max_overlap names"):
        DecontaminateConfig(eval_sets=["qa.jsonl"], set_max_overlap={"held.jsonl": 0.5})
