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
