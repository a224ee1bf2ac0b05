"""The run config: every stage's config model composed into one `RunConfig`; YAML in, unknown keys
rejected with their path.

Each stage owns its config model next to its code (`data/config.py`, `tokenizer/config.py`,
`tokens/config.py`, `mixture/config.py`, `model/config.py`, `train/config.py`, `eval/config.py`,
`report/config.py`; the shared base in `config_base.py`). A run is described by one `RunConfig`:
the CLI only picks the YAML file and applies `--set section.key=value` overrides; every knob has a
default and a one-line description, and the fully resolved config is written to the run directory.
The stage models are importable from here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from tokenmill.config_base import ConfigError, Strict, format_validation_error
from tokenmill.ownership import FolderName
from tokenmill.data.config import (
    BucketRule,
    CURATE_STEPS,
    CanaryConfig,
    ClassifierConfig,
    CurateConfig,
    DecontaminateConfig,
    ExtractConfig,
    LangIdConfig,
    LineDedupConfig,
    MinHashConfig,
    ModelQualityConfig,
    NormalizeConfig,
    PiiConfig,
    QualityConfig,
    SafetyConfig,
    SourceConfig,
    SubstringDedupConfig,
    UrlFilterConfig,
)
from tokenmill.tokenizer.config import TokenizerConfig
from tokenmill.tokens.config import TokenizeConfig
from tokenmill.mixture.config import MixtureConfig, PhaseConfig, SyntheticLimitsConfig
from tokenmill.model.config import ModelConfig
from tokenmill.train.config import FaultConfig, GuardConfig, ParallelConfig, TrainConfig
from tokenmill.eval.config import EvalConfig, ProbeConfig, SemanticContaminationConfig, TaskConfig
from tokenmill.report.config import ReportConfig, StopConfig

__all__ = [
    "BucketRule",
    "CURATE_STEPS",
    "CanaryConfig",
    "ClassifierConfig",
    "ConfigError",
    "CurateConfig",
    "DecontaminateConfig",
    "EvalConfig",
    "ExtractConfig",
    "FaultConfig",
    "GuardConfig",
    "LangIdConfig",
    "LineDedupConfig",
    "MinHashConfig",
    "MixtureConfig",
    "ModelConfig",
    "ModelQualityConfig",
    "NormalizeConfig",
    "ParallelConfig",
    "PhaseConfig",
    "PiiConfig",
    "ProbeConfig",
    "QualityConfig",
    "ReportConfig",
    "SafetyConfig",
    "SemanticContaminationConfig",
    "SourceConfig",
    "StopConfig",
    "Strict",
    "SubstringDedupConfig",
    "SyntheticLimitsConfig",
    "TaskConfig",
    "TokenizeConfig",
    "TokenizerConfig",
    "TrainConfig",
    "UrlFilterConfig",
]


class RunConfig(Strict):
    """A whole run: every stage's config plus where the run directory lives."""

    name: FolderName = Field("run", description="Run name; the run directory is <root>/<name>.")
    root: str = Field("runs", description="Directory holding run directories.")
    seed: int = Field(1234, description="Seed every stage's generators derive from.")
    curate: CurateConfig = Field(default_factory=CurateConfig)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    tokenize: TokenizeConfig = Field(default_factory=TokenizeConfig)
    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)

    @model_validator(mode="after")
    def _layout_fits_model(self) -> "RunConfig":
        from tokenmill.train.layout import cp_phase_problems, layout_problems  # the layout rules live with the trainer

        phase_lengths = [p.seq_len for p in self.mixture.phases if p.seq_len is not None]
        problems = layout_problems(self.model, self.train, phase_lengths) + cp_phase_problems(self.train, self.mixture.phases)
        if problems:
            raise ValueError("train.parallel does not fit this model: " + "; ".join(problems))
        return self

    @model_validator(mode="after")
    def _sequence_fits_model(self) -> "RunConfig":
        # caught here, before any stage runs, instead of when training builds the model
        if self.train.seq_len > self.model.max_seq_len:
            raise ValueError(
                f"train.seq_len={self.train.seq_len} exceeds model.max_seq_len={self.model.max_seq_len}; "
                f"raise model.max_seq_len or lower train.seq_len"
            )
        return self

    @property
    def train_seed(self) -> int:
        """Seed of the model's initialization and the batch order: train.seed, else the run seed."""
        return self.seed if self.train.seed is None else self.train.seed

    @property
    def run_dir(self) -> Path:
        return Path(self.root) / self.name


# --------------------------------------------------------------------------- loading
def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: where (line, column) and what."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = getattr(exc, "problem", None) or str(exc)
    return where + " ".join(str(what).split())


def parse_override(text: str, label: str = "--set") -> tuple[list[str], Any]:
    """`train.lr=3e-4` -> (["train", "lr"], 0.0003); the value is read as YAML. `label` says where
    the override was written (`--set` on the command line, or a file's `set:` list)."""
    if "=" not in text:
        raise ConfigError(f"{label} {text}: expected section.key=value")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"{label} {text}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"{label} {text}: value is not valid YAML: {yaml_problem(exc)}") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str], label: str = "--set") -> dict[str, Any]:
    """Set nested keys; a key that does not exist is reported by validation with its path."""
    for text in overrides:
        path, value = parse_override(text, label)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if child is None:  # an optional section that is off (e.g. eval.tiers: null): setting a key turns it on
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"{label} {text}: {'.'.join(path[: i + 1])} is not a section")
            node = child
        node[path[-1]] = value
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None, overrides_from: str = "--set") -> RunConfig:
    """Read a YAML config (or the defaults when path is None), apply overrides, validate.

    A problem under a key an override set names the override (`--set train.max_stpes=5: unknown
    key (did you mean train.max_steps?)`), not the file, which may not even hold that key.
    `overrides_from` says where the overrides were written: `--set` (the command line), or
    e.g. `sweep.yaml: set:` for an experiment file's own list."""
    # Without a file, a problem no override's key explains comes from the overrides together
    # (the defaults validate): a check across sections, such as a layout that does not fit the model.
    origin = str(path) if path is not None else (f"the {overrides_from} overrides" if overrides else "<defaults>")
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: {'is a directory, not a config file' if p.is_dir() else 'config file not found'}")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {yaml_problem(exc)}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}): not a YAML config") from None
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: top level must be a mapping, got {type(loaded).__name__}")
        data = loaded or {}
    data = apply_overrides(data, overrides or [], overrides_from)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        blamed = [(parse_override(o)[0], f"{overrides_from} {o.strip()}") for o in overrides or []]
        raise ConfigError(format_validation_error(err, origin, blamed, RunConfig)) from None


def dump_config(cfg: RunConfig) -> str:
    """The resolved config as YAML, every default filled in."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
