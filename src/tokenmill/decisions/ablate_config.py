"""The ablation config (`tokenmill ablate ABLATE.yaml`) and the curate config of each arm.

An arm is a named variation of the base config's curation and nothing else: an explicit step
list, steps turned off, or overrides inside `curate` (a threshold moved, a classifier cut). The
model sizes, their token budgets and the seeds are the experiment's, shared by every arm, so the
only difference between two arms' runs is the data their curation kept.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tokenmill.config import RunConfig, apply_overrides, parse_override
from tokenmill.config_base import Strict, config_problem
from tokenmill.data.config import CURATE_STEPS
from tokenmill.decisions.optimize import ExperimentConfig
from tokenmill.errors import UserError
from tokenmill.runs import sha256_json
from tokenmill.scaling.sweep import resolve_base
from tokenmill.ownership import FolderName

# what an arm may not touch: the experiment fixes it for every arm
NOT_CURATION = (
    "name",
    "root",
    "seed",
    "tokenizer",
    "tokenize",
    "mixture",
    "model",
    "train",
    "eval",
    "report",
    "tokens",
    "sizes",
    "seeds",
    "shape",
    "lr",
)
# Steps every arm runs even when its list leaves them out (`steps: [extract, normalize]` is the
# usual baseline): decontamination keeps the shared evaluation set out of every arm's training
# data, and bucket assignment is no filter (it decides the slices). Turning them off is refused.
ALWAYS_STEPS = ("decontaminate", "bucket")


class AblateError(UserError, ValueError):
    """An ablation config that cannot give a fair comparison, or an experiment directory that
    does not match it."""


class ArmConfig(Strict):
    """One curation variant: the base config's curate section, changed only as stated here."""

    steps: list[str] | None = Field(None, description="The arm's curate steps, in canonical order (None: the base config's).")
    without: list[str] = Field(
        default_factory=list,
        description="Steps turned off (removed from the base config's steps). Not `off:`, which YAML reads as false.",
    )
    set: list[str] = Field(
        default_factory=list,
        description="Overrides inside `curate`, e.g. `quality.min_words=20` or `model_quality.keep_top_percent=10`.",
    )
    note: str = Field("", description="What the arm tests, shown in the tables.")

    @field_validator("steps", "without")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        unknown = [s for s in v or [] if s not in CURATE_STEPS]
        if unknown:
            raise ValueError(f"unknown step(s) {unknown}; steps are {', '.join(CURATE_STEPS)}")
        return v


class SizeConfig(Strict):
    """One model size; every arm and seed trains it on the same number of tokens."""

    name: str = Field(..., min_length=1, description="Name of the size in run names and tables.")
    d_model: int = Field(..., gt=0, description="Width.")
    n_layers: int = Field(..., gt=0, description="Blocks.")
    n_heads: int = Field(..., gt=0, description="Attention heads.")
    tokens: int = Field(..., gt=0, description="Training tokens of every run at this size (arms with less data repeat it).")


class AblateEvalConfig(Strict):
    """The evaluation set shared by every arm: held-out documents no arm's filtering touched."""

    fraction: float = Field(
        0.05,
        ge=0,
        lt=0.5,
        description="Share of the extracted and normalized documents (chosen by a hash of their id) that may enter the evaluation set (0: only `files`, e.g. when the sources hold junk that no slice should score).",
    )
    max_docs: int = Field(100, gt=0, description="At most this many documents per slice (bucket): the lowest hash scores.")
    seed: int = Field(
        7919,
        description="Salt of the hash that picks the evaluation documents (not the run seed, so it is not the tokenize split).",
    )
    max_overlap: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Every arm removes training documents holding more than this share of an evaluation document's 13-grams (its copies and near-copies; a shared footer is no copy).",
    )
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Extra slices: name -> JSONL with a `text` field (relative to this file), e.g. a clean held-out reference set; decontaminated like the rest.",
    )

    @model_validator(mode="after")
    def _something_to_score(self) -> "AblateEvalConfig":
        if self.fraction == 0 and not self.files:
            raise ValueError("fraction 0 takes no slice from the sources: name the evaluation text in `files`")
        return self


class AblateConfig(ExperimentConfig):
    """Arms of curation, sizes, seeds and the shared evaluation set of one ablation."""

    name: FolderName = Field("ablate", description="Experiment name; the directory is <root>/<name>.")
    arms: dict[str, ArmConfig] = Field(..., min_length=2, description="Named curation variants.")
    reference: str = Field("full", description="The arm every other is compared with (usually the full pipeline).")
    baseline: str | None = Field(
        None, description="The arm whose data-efficiency multiplier is headlined (None: 'raw' when there is one)."
    )
    tokenizer_from: str | None = Field(
        None, description="The arm whose curated data trains the one shared tokenizer (None: the reference)."
    )
    sizes: list[SizeConfig] = Field(..., min_length=2, description="Model sizes (at least 2: the loss-vs-compute lines).")
    seeds: list[int] = Field(
        [1, 2, 3], min_length=2, description="train.seed of each repeat (at least 2: the paired confidence intervals)."
    )
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Level of the paired t confidence intervals over seeds.")
    warmup_fraction: float = Field(0.05, ge=0, lt=1, description="Warmup as a share of each run's tokens.")
    expected_paired_sd: float | None = Field(
        None,
        gt=0,
        description="Spread over seeds of the paired Δ bpb you expect (an earlier ablation's `power.paired_sd`): the smallest Δ this design detects is stated before any run (None: only after, from the measured spread).",
    )
    eval: AblateEvalConfig = Field(default_factory=AblateEvalConfig)

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"seeds listed twice: {v}")
        return v

    @field_validator("arms")
    @classmethod
    def _arm_names(cls, v: dict[str, ArmConfig]) -> dict[str, ArmConfig]:
        bad = [a for a in v if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", a)]
        if bad:
            raise ValueError(f"arm names {bad} must be letters, digits, '-', '_' or '.' (they name directories)")
        return v

    @model_validator(mode="after")
    def _names(self) -> "AblateConfig":
        for field in ("reference", "baseline", "tokenizer_from"):
            arm = getattr(self, field)
            if arm is not None and arm not in self.arms:
                raise ValueError(f"{field} {arm!r} is not an arm (arms: {', '.join(self.arms)})")
        names = [s.name for s in self.sizes]
        if len(set(names)) != len(names):
            raise ValueError(f"size names listed twice: {names}")
        bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", n)]
        if bad:
            raise ValueError(f"size names {bad} must be letters, digits, '-', '_' or '.' (they name run directories)")
        return self

    @property
    def baseline_arm(self) -> str | None:
        return self.baseline or ("raw" if "raw" in self.arms and self.reference != "raw" else None)


def _refuse_non_curation(path: Path, data: dict[str, Any]) -> None:
    """Arms that try to change the model, the tokens or the seeds get a message saying why not."""
    for name, arm in (data.get("arms") or {}).items():
        if not isinstance(arm, dict):
            continue
        if any(isinstance(k, bool) for k in arm):
            raise AblateError(
                f"{path}: arm {name!r} has a key YAML reads as true/false (`off:`, `on:`, `no:`); "
                "turn steps off with `without: [step, ...]`"
            )
        bad = [k for k in arm if k in NOT_CURATION]
        for text in arm.get("set") or []:
            if not isinstance(text, str):
                continue
            key = text.split("=", 1)[0].strip()
            head = key.split(".", 1)[0]
            if head in NOT_CURATION or (head == "curate" and key.split(".")[1:2] == ["sources"]):
                bad.append(key)
            elif head == "sources":
                bad.append(key)
        if bad:
            raise AblateError(
                f"{path}: arm {name!r} changes {', '.join(bad)}: arms may differ only in curation — the sources, "
                "tokenizer, model sizes, training tokens and seeds are the experiment's (`base`, `sizes`, `seeds`), "
                "the same for every arm, so that a difference in loss is the curation's"
            )


def load_ablate_config(path: Path) -> AblateConfig:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise AblateError(f"{path}: cannot read the ablation config: {exc}") from exc
    if not isinstance(data, dict):
        raise AblateError(f"{path}: top level must be a mapping")
    _refuse_non_curation(path, data)
    try:
        cfg = AblateConfig.model_validate(data)
    except ValidationError as exc:
        raise AblateError(config_problem(exc, f"{path}: invalid ablation config")) from exc
    if cfg.data is not None:
        raise AblateError(f"{path}: `data:` reuses one token store, but every arm curates its own; remove it")
    files = {k: str((Path(path).parent / v).resolve()) for k, v in cfg.eval.files.items()}
    for k, f in files.items():
        if not Path(f).is_file():
            raise AblateError(f"{path}: eval.files {k}: {f} not found")
    return cfg.model_copy(update={"base": resolve_base(path, cfg.base), "eval": cfg.eval.model_copy(update={"files": files})})


def arm_steps(base: RunConfig, arm: ArmConfig) -> list[str]:
    """The arm's steps in canonical order: its own list or the base's, minus those turned off."""
    chosen = arm.steps if arm.steps is not None else (base.curate.steps or list(CURATE_STEPS))
    return [s for s in CURATE_STEPS if s in chosen and s not in arm.without]


def arm_curate(base: RunConfig, name: str, arm: ArmConfig, eval_set: Path | None, max_overlap: float) -> dict[str, Any]:
    """The arm's curate section (as data): the base's with the arm's overrides and steps, and the
    shared evaluation set added to its decontamination (None: the evaluation set's own source)."""
    curate = base.curate.model_dump(mode="json")
    try:
        overrides = [t if t.startswith("curate.") else f"curate.{t}" for t in arm.set]
        for text in overrides:
            parse_override(text)
        curate = apply_overrides({"curate": curate}, overrides)["curate"]
    except UserError as exc:
        raise AblateError(f"arm {name!r}: {exc}") from exc
    steps = arm_steps(base, arm)
    refused = [s for s in ALWAYS_STEPS if s in arm.without] + (["extract"] if "extract" not in steps else [])
    if refused:
        raise AblateError(
            f"arm {name!r} turns off {', '.join(refused)}: every arm runs extract (documents from raw "
            "records), decontaminate (the shared evaluation set kept out of its training data) and "
            "bucket (the slices)"
        )
    curate["steps"] = [s for s in CURATE_STEPS if s in steps or s in ALWAYS_STEPS]
    curate["canaries"] = {**curate.get("canaries", {}), "counts": []}  # planted text is no curation choice
    if eval_set is not None:
        dc = curate.setdefault("decontaminate", {})
        dc["eval_sets"] = [*dc.get("eval_sets", []), str(eval_set)]
        dc["set_max_overlap"] = {**dc.get("set_max_overlap", {}), str(eval_set): max_overlap}
    return curate


def check_distinct(curates: dict[str, dict[str, Any]]) -> None:
    """Two arms with the same curate section would measure nothing: refuse them."""
    seen: dict[str, str] = {}
    for arm, curate in curates.items():
        other = seen.setdefault(sha256_json(curate), arm)
        if other != arm:
            raise AblateError(
                f"arms {other!r} and {arm!r} curate identically (same steps and settings): "
                "one of them measures nothing; change or remove it"
            )
