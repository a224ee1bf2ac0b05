"""Ablation configs: arms differ in curation only, every arm keeps extraction and the shared
evaluation set's decontamination, and each arm's curate section is the base's as stated."""

from __future__ import annotations

import pytest
import yaml

from tokenmill.config import RunConfig
from tokenmill.data.config import CURATE_STEPS
from tokenmill.decisions.ablate_config import (AblateError, ArmConfig, arm_curate, check_distinct,
                                               load_ablate_config)

SIZES = [{"name": "s", "d_model": 16, "n_layers": 1, "n_heads": 2, "tokens": 1000},
         {"name": "l", "d_model": 32, "n_layers": 1, "n_heads": 2, "tokens": 2000}]


def _write(tmp_path, arms, **over):
    (tmp_path / "base.yaml").write_text("name: b\n")
    cfg = {"base": "base.yaml", "arms": arms, "sizes": SIZES, **over}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "a.yaml"


@pytest.mark.parametrize("arm, named", [
    ({"model": {"d_model": 8}}, "model"),
    ({"tokens": 5}, "tokens"),
    ({"set": ["train.lr=0.1"]}, "train.lr"),
    ({"set": ["curate.sources=[]"]}, "curate.sources"),
    ({"set": ["tokenizer.vocab_size=300"]}, "tokenizer.vocab_size"),
])
def test_arms_that_change_anything_but_curation_are_refused(tmp_path, arm, named):
    path = _write(tmp_path, {"full": {}, "x": arm})
    with pytest.raises(AblateError, match=f"arm 'x' changes {named}.*arms may differ only in curation"):
        load_ablate_config(path)


def test_yaml_off_is_caught_with_the_right_key(tmp_path):
    (tmp_path / "base.yaml").write_text("name: b\n")
    (tmp_path / "a.yaml").write_text("base: base.yaml\narms: {full: {}, x: {off: [quality]}}\n"
                                     f"sizes: {yaml.safe_dump(SIZES, default_flow_style=True)}")
    with pytest.raises(AblateError, match="without:"):
        load_ablate_config(tmp_path / "a.yaml")


def test_config_checks_names_sizes_and_seeds(tmp_path):
    with pytest.raises(AblateError, match="reference 'full' is not an arm"):
        load_ablate_config(_write(tmp_path, {"a": {}, "b": {}}))
    with pytest.raises(AblateError, match="at least 2"):
        load_ablate_config(_write(tmp_path, {"full": {}, "b": {}}, sizes=SIZES[:1]))
    with pytest.raises(AblateError, match="seeds listed twice"):
        load_ablate_config(_write(tmp_path, {"full": {}, "b": {}}, seeds=[1, 1]))
    with pytest.raises(AblateError, match="they name directories"):
        load_ablate_config(_write(tmp_path, {"full": {}, "../x": {}}))
    with pytest.raises(AblateError, match="unknown step"):
        load_ablate_config(_write(tmp_path, {"full": {}, "b": {"without": ["qualty"]}}))
    with pytest.raises(AblateError, match="every arm curates its own"):
        load_ablate_config(_write(tmp_path, {"full": {}, "b": {}}, data="runs/x"))
    cfg = load_ablate_config(_write(tmp_path, {"full": {}, "raw": {"steps": ["extract", "normalize"]}}))
    assert cfg.baseline_arm == "raw" and cfg.seeds == [1, 2, 3] and cfg.base == str((tmp_path / "base.yaml").resolve())


def test_arm_curate_changes_only_what_the_arm_says(tmp_path):
    base = RunConfig.model_validate({"curate": {"steps": None, "quality": {"min_words": 50},
                                                "decontaminate": {"eval_sets": ["bench.jsonl"]}}})
    full = arm_curate(base, "full", ArmConfig(), tmp_path / "set.jsonl", 0.5)
    assert full["steps"] == list(CURATE_STEPS)
    assert full["decontaminate"]["eval_sets"] == ["bench.jsonl", str(tmp_path / "set.jsonl")]
    assert full["decontaminate"]["set_max_overlap"] == {str(tmp_path / "set.jsonl"): 0.5}
    assert full["decontaminate"]["max_overlap"] == 0.0  # the user's benchmarks keep their rule
    raw = arm_curate(base, "raw", ArmConfig(steps=["normalize", "extract"]), tmp_path / "set.jsonl", 0.5)
    assert raw["steps"] == ["extract", "normalize", "decontaminate", "bucket"]
    moved = arm_curate(base, "loose", ArmConfig(set=["quality.min_words=20"]), tmp_path / "set.jsonl", 0.5)
    assert moved["quality"]["min_words"] == 20
    assert {k: v for k, v in moved.items() if k != "quality"} == {k: v for k, v in full.items() if k != "quality"}
    off = arm_curate(base, "nq", ArmConfig(without=["quality"]), tmp_path / "set.jsonl", 0.5)
    assert "quality" not in off["steps"] and len(off["steps"]) == len(CURATE_STEPS) - 1
    for arm in (ArmConfig(without=["decontaminate"]), ArmConfig(steps=["normalize"])):
        with pytest.raises(AblateError, match="every arm runs extract"):
            arm_curate(base, "bad", arm, tmp_path / "set.jsonl", 0.5)
    with pytest.raises(AblateError, match="arms 'full' and 'same' curate identically"):
        check_distinct({"full": full, "same": arm_curate(base, "same", ArmConfig(set=["quality.min_words=50"]),
                                                             tmp_path / "set.jsonl", 0.5)})


def test_the_example_ablation_loads():
    from pathlib import Path

    from tokenmill.config import load_config

    example = Path(__file__).resolve().parents[2] / "examples" / "ablate"
    cfg = load_ablate_config(example / "ablate.yaml")
    assert len(cfg.arms) == 6 and len(cfg.sizes) == 2 and cfg.seeds == [1, 2, 3] and cfg.baseline_arm == "raw"
    base = load_config(example / "base.yaml")
    assert base.curate.model_quality.min_classifier_score == 0.002 and len(base.curate.sources) == 13


def test_the_design_states_what_it_can_see_before_any_run(tmp_path):
    from tokenmill.decisions.ablate import planned_power
    from tokenmill.decisions.ablate_stats import detectable_delta

    cfg = load_ablate_config(_write(tmp_path, {"full": {}, "raw": {"without": ["quality"]}}, seeds=[1, 2, 3, 4],
                                    expected_paired_sd=0.03))
    planned = planned_power(cfg)
    assert planned["seeds"] == 4 and planned["detectable_bpb"] == pytest.approx(detectable_delta(0.03, 4, 0.95))
    more = load_ablate_config(_write(tmp_path, {"full": {}, "raw": {"without": ["quality"]}}, seeds=list(range(1, 13)),
                                     expected_paired_sd=0.03))
    assert planned_power(more)["detectable_bpb"] < planned["detectable_bpb"] / 2  # more seeds see smaller effects
    assert planned_power(load_ablate_config(_write(tmp_path, {"full": {}, "raw": {}}))) is None


def test_an_arm_may_select_records_and_evaluation_may_come_from_files_only(tmp_path):
    """An oracle or a peer's filter is an id list fed to the select step (curation, same sources);
    fraction 0 scores only the named files, and needs them."""
    (tmp_path / "held.jsonl").write_text('{"text": "held out"}\n')
    arms = {"full": {}, "oracle": {"steps": ["select", "extract", "normalize"], "set": ["select.ids=ids.txt"]}}
    cfg = load_ablate_config(_write(tmp_path, arms, eval={"fraction": 0, "files": {"held": "held.jsonl"}}))
    base = RunConfig.model_validate({})
    oracle = arm_curate(base, "oracle", cfg.arms["oracle"], tmp_path / "set.jsonl", 0.5)
    assert oracle["steps"] == ["select", "extract", "normalize", "decontaminate", "bucket"]
    assert oracle["select"]["ids"] == "ids.txt" and cfg.eval.fraction == 0
    with pytest.raises(AblateError, match="fraction 0 takes no slice"):
        load_ablate_config(_write(tmp_path, arms, eval={"fraction": 0}))
