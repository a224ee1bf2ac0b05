import pytest

from tokenmill.config import CURATE_STEPS, CurateConfig
from tokenmill.data.registry import (CORPUS_STEPS, DOC_STEP_CLASSES, FINAL_STEPS, MAP_STEPS, selected_steps,
                                     step_class)


def test_phases_partition_the_canonical_steps():
    assert MAP_STEPS + CORPUS_STEPS + FINAL_STEPS == CURATE_STEPS
    assert set(DOC_STEP_CLASSES) | set(CORPUS_STEPS) == set(CURATE_STEPS)


def test_selection_keeps_canonical_order_and_rejects_unknown():
    cfg = CurateConfig()
    assert selected_steps(cfg) == CURATE_STEPS
    assert selected_steps(cfg, ["minhash_dedup", "extract"]) == ("extract", "minhash_dedup")
    with pytest.raises(ValueError, match="unknown curation step"):
        selected_steps(cfg, ["dedupe"])


def test_every_step_class_names_itself():
    for name in DOC_STEP_CLASSES:
        cls = step_class(name)
        assert cls.name == name and cls.version
