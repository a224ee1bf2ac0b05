"""The contract of a per-document curation step (datatrove-style: small, composable, one job).

A step is built once per worker from the curation config (`setup` loads its lists or models
there, never per document), then called on every document in canonical order:

    step = MyStep(cfg, base_dir)     # cfg: CurateConfig; base_dir: relative paths in cfg resolve here
    step.prepare(work_dir)           # once per run, in the driver (train models, build indexes)
    step.setup(work_dir)             # once per worker (load them)
    if step.applies(doc):            # False: passed through unchanged, counted as skipped
        rejection = step.process(doc)    # may rewrite doc.text and fill its signal fields

`process` records every signal it measures on the document (kept or not) and returns the
Rejection (step, rule, measured value, reason) that removes it, or None to keep it. Steps never
drop a document silently and never keep state between documents: the output must not depend on
which worker saw which document. The corpus-wide steps (exact / MinHash / line dedup) have
their own map-reduce contract in their modules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from tokenmill.data.config import CurateConfig
from tokenmill.data.document import Doc, Rejection


class DocStep(ABC):
    """One per-document step; subclasses set `name` (a CURATE_STEPS entry) and `version`."""

    name: ClassVar[str]
    version: ClassVar[str]

    def __init__(self, cfg: CurateConfig, base_dir: Path | None = None):
        self.cfg = cfg
        self.base_dir = base_dir or Path.cwd()

    def resolve(self, path: str) -> Path:
        """A path from the config, relative to the config file's directory."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    def prepare(self, work_dir: Path) -> None:
        """Once per run, in the driver, before any worker starts: train what the step needs
        (an n-gram LM, a classifier, an eval-set n-gram index) and save it under `work_dir`.
        Must be deterministic and idempotent (a resumed run calls it again)."""

    def setup(self, work_dir: Path) -> None:
        """Once per worker before any document: load lists and what `prepare` saved."""

    def enabled(self) -> bool:
        """False when the config leaves the step nothing to do (e.g. no block list given)."""
        return True

    def applies(self, doc: Doc) -> bool:
        """Whether this document is in scope (bucket, format); others pass through."""
        return True

    @abstractmethod
    def process(self, doc: Doc) -> Rejection | None:
        """Measure, maybe rewrite `doc.text`, and return the rejection or None."""
