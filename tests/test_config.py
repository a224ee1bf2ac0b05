import pytest
import yaml

from tokenmill.config import ConfigError, RunConfig, dump_config, load_config, parse_override


def test_defaults_and_yaml_roundtrip(tmp_path):
    cfg = load_config(None)
    assert cfg == RunConfig()
    p = tmp_path / "c.yaml"
    p.write_text(dump_config(cfg))
    assert load_config(p) == cfg


def test_unknown_key_is_named_with_its_path(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  lrr: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(p) in str(err.value) and "train.lrr: unknown key" in str(err.value)


def test_nested_unknown_key_in_list(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("curate:\n  sources:\n    - {path: x, bucket: web, colour: red}\n")
    with pytest.raises(ConfigError, match=r"curate\.sources\.0\.colour: unknown key"):
        load_config(p)


def test_overrides_are_typed_by_yaml_and_validated():
    cfg = load_config(None, ["train.lr=3e-4", "model.n_layers=2", "mixture.weights={a: 1, b: 3}"])
    assert cfg.train.lr == 3e-4 and cfg.model.n_layers == 2 and cfg.mixture.weights == {"a": 1.0, "b": 3.0}
    with pytest.raises(ConfigError, match="train.max_steps"):
        load_config(None, ["train.max_steps=lots"])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config(None, ["train.lr"])
    with pytest.raises(ConfigError, match="not a section"):
        load_config(None, ["seed=1", "seed.x=1"])


def test_an_override_turns_on_an_optional_section_written_as_null(tmp_path):
    """A resolved config.yaml writes an unset optional section as null (eval.tiers: null); a key
    set under it creates the section instead of refusing it."""
    p = tmp_path / "run.yaml"
    p.write_text("name: r\neval:\n  tiers: null\n")
    cfg = load_config(p, ["eval.tiers.cheap.every_steps=100"])
    assert cfg.eval.tiers is not None and cfg.eval.tiers.cheap.every_steps == 100


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(p)


def test_yaml_is_loaded_safely(tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)


def test_parse_override_keeps_strings():
    assert parse_override("name=my run") == (["name"], "my run")
    assert parse_override("report.title=") == (["report", "title"], "")


def test_dump_has_every_default():
    data = yaml.safe_load(dump_config(RunConfig()))
    assert data["train"]["warmup_steps"] == RunConfig().train.warmup_steps
    assert set(data) >= {"curate", "tokenizer", "tokenize", "mixture", "model", "train", "eval", "report"}


def test_each_stage_owns_its_config_model_and_the_run_config_composes_them():
    import importlib

    from tokenmill.config import RunConfig

    owners = {"curate": "data", "tokenizer": "tokenizer", "tokenize": "tokens", "mixture": "mixture",
              "model": "model", "train": "train", "eval": "eval", "report": "report"}
    for section, pkg in owners.items():
        model = RunConfig.model_fields[section].annotation
        assert model.__module__ == f"tokenmill.{pkg}.config", section
        assert getattr(importlib.import_module(f"tokenmill.{pkg}.config"), model.__name__) is model


def test_an_unknown_key_in_a_stage_section_is_named_with_its_path(tmp_path):
    from tokenmill.config import ConfigError, load_config

    path = tmp_path / "run.yaml"
    path.write_text("train:\n  guard:\n    spike_sigma: 3\n")
    with pytest.raises(ConfigError, match=r"train\.guard\.spike_sigma: unknown key"):
        load_config(path)


def test_override_problems_name_where_the_override_was_written(tmp_path):
    """The command line's --set, or an experiment file's `set:` list: never the base file, which
    does not hold the key; a key the base file does hold is still the file's."""
    p = tmp_path / "base.yaml"
    p.write_text("train:\n  lrr: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config(p, ["train.max_stpes=5"], "sweep.yaml: set:")
    assert str(err.value) == (
        f"{p}: train.lrr: unknown key (did you mean lr?); "
        "sweep.yaml: set: train.max_stpes=5: unknown key (did you mean train.max_steps?)"
    )
    with pytest.raises(ConfigError, match=r"^--set model\.n_layers=x: Input should be a valid integer"):
        load_config(None, ["model.n_layers=x"])
    # a list item's keys, and a section's name, get suggestions too
    with pytest.raises(ConfigError, match=r"; curate\.sources\.0\.buckt: unknown key \(did you mean bucket\?\)$"):
        load_config(None, ["curate.sources=[{path: x, buckt: web}]"])
    with pytest.raises(ConfigError, match=r"^--set trian\.lr=1: trian: unknown key \(did you mean train\?\)$"):
        load_config(None, ["trian.lr=1"])


def test_any_strict_config_suggests_its_keys():
    """Experiment configs (sweeps, ablations, ...) are validated outside load_config: the error
    finds its model by the title pydantic gives it, and suggests that model's keys."""
    from pydantic import ValidationError

    from tokenmill.config_base import Strict, config_problem

    class SuggestionProbeConfig(Strict):
        budgets: list[float] = []
        seeds: int = 1

    with pytest.raises(ValidationError) as err:
        SuggestionProbeConfig.model_validate({"budget": [1e15], "sedes": 2})
    assert config_problem(err.value, "s.yaml: invalid sweep config") == (
        "s.yaml: invalid sweep config: budget: unknown key (did you mean budgets?); "
        "sedes: unknown key (did you mean seeds?)"
    )
