"""The eval stage's config: the semantic back-check's default threshold is the one its benchmark
chose on a tuning half and confirmed on a test half, and out-of-range values are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tokenmill.eval.config import EvalConfig, SemanticContaminationConfig

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "semantic_contamination.json"


def test_the_default_threshold_is_the_one_chosen_on_the_tuning_half_and_it_held_on_the_test_half():
    th = json.loads(RESULTS.read_text())["threshold"]
    assert SemanticContaminationConfig().threshold == th["chosen"]
    # by the benchmark's own criterion (mean F1 over paraphrased and verbatim), on items the choice never saw
    test = th["test"]

    def mean_f1(which: str) -> float:
        return (test["paraphrased"][which]["f1"] + test["verbatim"][which]["f1"]) / 2

    assert mean_f1("chosen") >= mean_f1("default")


def test_the_back_check_is_off_by_default_and_bad_thresholds_are_refused():
    assert EvalConfig().semantic_contamination.enabled is False
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(ValidationError, match="threshold"):
            SemanticContaminationConfig(threshold=bad)
    assert SemanticContaminationConfig(threshold=1.0).threshold == 1.0
