"""The license policy step: documents whose source's license the policy refuses are removed first.

`curate.license_policy.require` lists grants (training, redistribution, commercial_use) a license must
give; `exclude_if` lists conditions (attribution_required, share_alike) it must not set. A document
failing either leaves with step `license`, rule `missing_<grant>` or `has_<condition>`, and its
license id as the value in `_rejected`. It runs right after `select`, before extraction: a license
is a property of the source, so refusing a document costs one dict lookup, never a parse.

Routing by permission (`bucket_by_permission`) is applied by the bucket step (data/steps/bucketing.py),
the last one, so that no bucket rule moves a non-commercial document back into a commercial bucket.
"""

from __future__ import annotations

from pathlib import Path

from tokenmill.data import licenses
from tokenmill.data.document import Doc, Rejection
from tokenmill.data.step import DocStep

VERSION = "1"


class License(DocStep):
    """Removes documents whose license lacks a required grant or sets an excluded condition."""

    name = "license"
    version = VERSION

    def enabled(self) -> bool:
        return self.cfg.license_policy.removes

    def setup(self, work_dir: Path) -> None:
        self._table = licenses.table(self.cfg)
        # the verdict depends only on the license id: computed once per id a worker meets
        self._verdicts: dict[str, tuple[str, str] | None] = {}

    def process(self, doc: Doc) -> Rejection | None:
        lic = doc.license
        if lic not in self._verdicts:
            self._verdicts[lic] = licenses.verdict(licenses.permissions(self._table, lic), self.cfg.license_policy)
        found = self._verdicts[lic]
        if found is None:
            return None
        rule, what = found
        said = "does not grant" if rule.startswith("missing_") else "sets"
        return Rejection(self.name, rule, lic, f"license {lic} of source {doc.source} {said} {what} (curate.license_policy)")
