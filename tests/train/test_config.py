"""TrainConfig: every field is described; the knobs kept out of the training fingerprint exist;
`init_from` leaves earlier runs' fingerprints alone at its default and changes the run when set."""

from __future__ import annotations

from pydantic import BaseModel

from tokenmill.config import RunConfig
from tokenmill.runs import NOT_FINGERPRINTED, RunDir
from tokenmill.train.config import TrainConfig


def test_every_field_has_a_one_line_description():
    for name, field in TrainConfig.model_fields.items():
        factory = field.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            continue  # a nested section: its own fields carry the descriptions
        assert field.description and "\n" not in field.description, name


def test_unfingerprinted_knobs_are_real_fields():
    assert NOT_FINGERPRINTED["train"] <= set(TrainConfig.model_fields)


def test_init_from_changes_the_training_fingerprint_only_when_set(tmp_path):
    base = RunConfig.model_validate({"name": "r", "root": str(tmp_path)})
    assert base.train.init_from is None
    plain = RunDir(base, tmp_path / "r").fingerprint("train")
    same = RunDir(base.model_copy(update={"train": base.train.model_copy(update={"init_from": None})}),
                  tmp_path / "r").fingerprint("train")
    started = RunDir(base.model_copy(update={"train": base.train.model_copy(update={"init_from": "runs/a/checkpoints"})}),
                     tmp_path / "r").fingerprint("train")
    other = RunDir(base.model_copy(update={"train": base.train.model_copy(update={"init_from": "runs/b/checkpoints"})}),
                   tmp_path / "r").fingerprint("train")
    assert plain == same and len({plain, started, other}) == 3
    from tokenmill.runs import _without_disabled

    assert "init_from" not in _without_disabled("train", base.train.model_dump(mode="json"))


def test_health_signals_are_described_and_never_change_the_training_fingerprint(tmp_path):
    """train.health only watches: a run made before it existed (no `health` key) and a run with
    other health settings resume as the same run."""
    from tokenmill.train.config import HealthConfig

    assert all(f.description and "\n" not in f.description for f in HealthConfig.model_fields.values())
    base = RunConfig.model_validate({"name": "r", "root": str(tmp_path)})
    plain = RunDir(base, tmp_path / "r").fingerprint("train")
    tuned = base.model_copy(update={"train": base.train.model_copy(update={"health": HealthConfig(
        activation_stats_every=1, bucket_loss=False, drift_window=0, collapse_ratio=3.0)})})
    assert RunDir(tuned, tmp_path / "r").fingerprint("train") == plain
    old = base.train.model_dump(mode="json")
    old.pop("health")  # a config.yaml written before train.health existed
    assert TrainConfig.model_validate(old).health == HealthConfig()
