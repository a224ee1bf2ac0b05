"""A labelled file streamed into a bounded sample: at most max_examples per label whatever the
file's size, the same records whatever its order, the whole file when it is small, and an
over-long line refused naming file:line before the rest of it is read."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from tokenmill.data import labelled as lb
from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers.ngram_lm import tokenize
from tokenmill.data.config import CurateConfig
from tokenmill.data.steps.classify import Classify, ClassifyLabelsError
from tokenmill.data.steps.safety import Safety, SafetyLabelsError


class Boom(ValueError):
    pass


def _records(n: int, labels: tuple[str, ...] = ("a", "b")) -> list[tuple[int, str, str]]:
    return [(i + 1, f"text number {i} of {labels[i % len(labels)]}", labels[i % len(labels)]) for i in range(n)]


def _sample(records: list[tuple[int, str, str]], cap: int, calls: list[str] | None = None) -> lb.Sample:
    def featurize(text: str) -> tuple[np.ndarray, np.ndarray]:
        if calls is not None:
            calls.append(text)
        return lc.features(tokenize(text))

    return lb.bottom_k(iter(records), cap, featurize, lambda t: False, Boom, "f.jsonl")


def test_sample_holds_at_most_max_examples_per_label_and_counts_every_record() -> None:
    calls: list[str] = []
    sample = _sample(_records(2000), 50, calls)
    assert {k: len(v) for k, v in sample.kept.items()} == {"a": 50, "b": 50}
    assert sample.counts == {"a": 1000, "b": 1000} and sample.examples() == 2000
    assert len(calls) < 2000 // 2  # records whose hash cannot make the sample are never featurized
    for kept in sample.kept.values():
        assert [e.line for e in kept] == sorted(e.line for e in kept)  # file order
        assert all(e.features[0].dtype == np.int32 and e.features[1].dtype == np.float32 for e in kept)


def test_sample_is_the_same_records_whatever_the_file_order() -> None:
    records = _records(600)
    texts = {line: text for line, text, _ in records}
    shuffled = records[:]
    random.Random(3).shuffle(shuffled)
    picked = lambda s: {k: sorted(texts[e.line] for e in v) for k, v in s.kept.items()}  # noqa: E731
    assert picked(_sample(records, 40)) == picked(_sample(shuffled, 40))


def test_small_file_is_used_whole_in_file_order() -> None:
    sample = _sample(_records(30), 100)
    examples, labels = lb.in_file_order(sample.kept, ["a", "b"])
    assert [e.line for e in examples] == list(range(1, 31)) and labels == ["a", "b"] * 15


def test_too_many_labels_is_one_error_naming_the_line() -> None:
    records = [(i + 1, f"t{i}", f"label{i}") for i in range(lb.MAX_LABELS + 5)]
    with pytest.raises(Boom, match=rf"f.jsonl:{lb.MAX_LABELS + 1}: label 'label{lb.MAX_LABELS}'"):
        _sample(records, 10)


def test_over_long_line_is_refused_naming_file_line_and_setting(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    ok = json.dumps({"text": "short", "label": "a"}) + "\n"
    path.write_text(ok + json.dumps({"text": "x" * 5000, "label": "b"}) + "\n" + ok)
    reader = lb.labelled_records(path, 1000, Boom)
    assert next(reader)[0] == 1  # streamed: the first record comes before the long line is read
    with pytest.raises(Boom, match=r"labels.jsonl:2: line longer than 1,000 bytes \(curate.max_doc_bytes\)"):
        next(reader)


def _write(path: Path, per: int, labels: tuple[str, str]) -> Path:
    rows = [
        {"text": f"{labels[i % 2]} words {i} " + " ".join(f"w{(i * 7 + j) % 97}" for j in range(20)), "label": labels[i % 2]}
        for i in range(2 * per)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_classify_trains_on_at_most_max_examples_per_label(tmp_path: Path) -> None:
    labels = _write(tmp_path / "topics.jsonl", 300, ("news", "recipe"))
    cfg = CurateConfig(classify=[{"name": "topic", "labelled": str(labels), "max_examples": 40}])
    Classify(cfg, tmp_path).prepare(tmp_path / "work")
    meta = json.loads((tmp_path / "work" / "classify" / "topic.json").read_text())
    assert meta["examples"] == 600 and meta["sampled"] == 80
    assert meta["label_counts"] == {"news": 300, "recipe": 300}


def test_safety_trains_on_at_most_max_examples_per_class(tmp_path: Path) -> None:
    labels = _write(tmp_path / "tox.jsonl", 300, ("toxic", "clean"))
    cfg = CurateConfig(safety={"labelled": str(labels), "max_examples": 40})
    Safety(cfg, tmp_path).prepare(tmp_path / "work")
    manifest = json.loads((tmp_path / "work" / "safety" / "manifest.json").read_text())
    assert manifest["examples"] == {"toxic": 300, "clean": 300} and manifest["sampled"] == {"toxic": 40, "clean": 40}


@pytest.mark.parametrize("step", ["classify", "safety"])
def test_labelled_line_over_max_doc_bytes_is_one_line(tmp_path: Path, step: str) -> None:
    path = _write(tmp_path / "l.jsonl", 5, ("toxic", "clean"))
    with path.open("a") as fh:
        fh.write(json.dumps({"text": "y" * 3000, "label": "clean"}) + "\n")
    if step == "classify":
        cfg = CurateConfig(classify=[{"name": "c", "labelled": str(path)}], max_doc_bytes=2000)
        with pytest.raises(ClassifyLabelsError, match=r"l.jsonl:11: line longer than 2,000 bytes \(curate.max_doc_bytes\)"):
            Classify(cfg, tmp_path).prepare(tmp_path / "work")
    else:
        cfg = CurateConfig(safety={"labelled": str(path)}, max_doc_bytes=2000)
        with pytest.raises(SafetyLabelsError, match=r"l.jsonl:11: line longer than 2,000 bytes \(curate.max_doc_bytes\)"):
            Safety(cfg, tmp_path).prepare(tmp_path / "work")
