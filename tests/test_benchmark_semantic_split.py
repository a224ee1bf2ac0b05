"""bench_semantic_contamination.py chooses its threshold on the tuning half and reports the test half."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_semantic_contamination as bench  # noqa: E402


def _items():
    items = {t: [f"{t} {i}" for i in range(20)] for t in bench.TASKS}
    labels = {t: [i % 2 == 0 for i in range(20)] for t in bench.TASKS}
    return items, labels


def test_the_halves_split_every_task_and_both_labels_evenly_and_disjointly():
    items, labels = _items()
    side = bench.splits(items, labels, seed=3)
    assert side.count("tune") == side.count("test") == 60
    flat = [(t, lab) for t in bench.TASKS for lab in labels[t]]
    for t in bench.TASKS:
        for lab in (True, False):
            mine = [s for (tt, ll), s in zip(flat, side) if tt == t and ll == lab]
            assert mine.count("tune") == mine.count("test") == 5
    assert bench.splits(items, labels, seed=3) == side != bench.splits(items, labels, seed=4)


def test_the_threshold_comes_from_the_tuning_half_alone():
    def result(tune_best: float, test_best: float) -> dict:
        def part(best: float) -> dict:
            return {"semantic": [{"threshold": th, "f1": 1.0 - abs(th - best), "precision": 1.0, "recall": 1.0}
                                 for th in bench.THRESHOLDS], "ngram13": {}, "auc": 0.5}
        return {"tune": part(tune_best), "test": part(test_best)}

    chosen = bench.choose_threshold(result(0.65, 0.85), result(0.65, 0.85))
    assert chosen["chosen"] == 0.65  # the test half would have picked 0.85
    assert chosen["test"]["paraphrased"]["chosen"]["threshold"] == 0.65
    assert chosen["test"]["verbatim"]["default"]["threshold"] == chosen["default"]
