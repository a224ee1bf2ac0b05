"""Which class implements each per-document curation step, and building the enabled ones.

Corpus-wide steps (exact_dedup, minhash_dedup, line_dedup, substring_dedup) are not DocSteps: the curate stage
runs them as map-reduce phases between the per-document ones.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from tokenmill.data.config import CURATE_STEPS, CurateConfig
from tokenmill.data.step import DocStep

DOC_STEP_CLASSES: dict[str, tuple[str, str]] = {
    "select": ("tokenmill.data.steps.select", "Select"),
    "license": ("tokenmill.data.steps.license", "License"),
    "extract": ("tokenmill.data.steps.extract", "Extract"),
    "normalize": ("tokenmill.data.steps.normalize", "Normalize"),
    "url": ("tokenmill.data.steps.urlfilter", "UrlFilter"),
    "langid": ("tokenmill.data.steps.langid", "LangId"),
    "quality": ("tokenmill.data.steps.quality", "Quality"),
    "model_quality": ("tokenmill.data.steps.model_quality", "ModelQuality"),
    "classify": ("tokenmill.data.steps.classify", "Classify"),
    "safety": ("tokenmill.data.steps.safety", "Safety"),
    "pii": ("tokenmill.data.steps.pii", "Pii"),
    "decontaminate": ("tokenmill.data.steps.decontaminate", "Decontaminate"),
    "bucket": ("tokenmill.data.steps.bucketing", "Bucket"),
}
CORPUS_STEPS: tuple[str, ...] = ("exact_dedup", "minhash_dedup", "line_dedup", "substring_dedup")
# Per-document steps before the corpus-wide ones, and after them.
MAP_STEPS: tuple[str, ...] = CURATE_STEPS[: CURATE_STEPS.index("exact_dedup")]
FINAL_STEPS: tuple[str, ...] = CURATE_STEPS[CURATE_STEPS.index("substring_dedup") + 1 :]


def selected_steps(cfg: CurateConfig, override: list[str] | None = None) -> tuple[str, ...]:
    """The steps to run, always in canonical order whatever order they were listed in."""
    wanted = override if override is not None else cfg.steps
    if wanted is None:
        return CURATE_STEPS
    unknown = sorted(set(wanted) - set(CURATE_STEPS))
    if unknown:
        raise ValueError(f"unknown curation step(s) {unknown}; steps are {', '.join(CURATE_STEPS)}")
    return tuple(s for s in CURATE_STEPS if s in wanted)


def step_class(name: str) -> type[DocStep]:
    module, cls = DOC_STEP_CLASSES[name]
    return getattr(importlib.import_module(module), cls)


def build_doc_steps(names: tuple[str, ...], cfg: CurateConfig, base_dir: Path) -> list[DocStep]:
    """Instances of the named per-document steps that have something to do under this config."""
    steps = [step_class(n)(cfg, base_dir) for n in names if n in DOC_STEP_CLASSES]
    return [s for s in steps if s.enabled()]
