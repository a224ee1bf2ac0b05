"""Bucket assignment: rules on source, domain, language and quality tier name the bucket.

Split the data into buckets by source, language, domain and quality tier, to prepare for the
mixture design and annealing later (docs/curation.md). `CurateConfig.bucket_rules` is an ordered
list; a rule matches when every condition it sets holds, and the first matching rule wins
(so specific rules go before general ones). A document no rule matches keeps the bucket its
source gave it. Conditions:

  source    glob on the source name (fnmatch, case-sensitive: source names are paths)
  domain    glob on the URL's domain, lowercased ("*.gov" does not match "gov.uk" nor the bare
            "gov"; write both "example.com" and "*.example.com" for a site and its subdomains)
  language  the language code langid gave the document (doc.language)
  tier      the quality tier model_quality gave it (doc.model_quality["tier"])

A rule with a condition the document has no value for (no domain, language never identified)
does not match. The step runs last and never removes a document; it is off without rules and
without `license_policy.bucket_by_permission`, whose routing (data/licenses.py) wins over the rules.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from tokenmill.data import licenses
from tokenmill.data.config import BucketRule, CurateConfig
from tokenmill.data.document import Doc, Rejection
from tokenmill.data.step import DocStep
from tokenmill.data.steps.urlfilter import domain_of


@dataclass(frozen=True, slots=True)
class CompiledRule:
    """A BucketRule with its globs compiled once."""

    bucket: str
    source: re.Pattern[str] | None
    domain: re.Pattern[str] | None
    language: str | None
    tier: str | None

    @classmethod
    def of(cls, rule: BucketRule) -> "CompiledRule":
        def glob(p: str | None, lower: bool = False) -> re.Pattern[str] | None:
            return None if p is None else re.compile(fnmatch.translate(p.lower() if lower else p))

        return cls(
            rule.bucket,
            glob(rule.source),
            glob(rule.domain, lower=True),
            rule.language.lower() if rule.language else None,
            rule.tier,
        )

    def matches(self, source: str, domain: str | None, language: str | None, tier: str | None) -> bool:
        if self.source is not None and not self.source.match(source):
            return False
        if self.domain is not None and (domain is None or not self.domain.match(domain)):
            return False
        if self.language is not None and self.language != (language or "").lower():
            return False
        return self.tier is None or self.tier == tier


def assign_bucket(rules: list[CompiledRule], doc: Doc) -> str:
    """The bucket of the first rule the document matches, else its current bucket."""
    domain = doc.domain if doc.domain is not None else domain_of(doc.url)
    tier = (doc.model_quality or {}).get("tier")
    for rule in rules:
        if rule.matches(doc.source, domain, doc.language, tier):
            return rule.bucket
    return doc.bucket


class Bucket(DocStep):
    """Moves each document to the bucket of the first matching rule."""

    name = "bucket"
    version = "1"

    def __init__(self, cfg: CurateConfig, base_dir: Path | None = None):
        super().__init__(cfg, base_dir)
        self.rules = [CompiledRule.of(r) for r in cfg.bucket_rules]
        self.license_table = licenses.table(cfg) if cfg.license_policy.bucket_by_permission else None
        self._routes: dict[str, str | None] = {}  # license id -> bucket it is routed to

    def enabled(self) -> bool:
        return bool(self.rules) or self.license_table is not None

    def process(self, doc: Doc) -> Rejection | None:
        doc.bucket = assign_bucket(self.rules, doc)
        if self.license_table is not None:
            if doc.license not in self._routes:
                spec = licenses.permissions(self.license_table, doc.license)
                self._routes[doc.license] = licenses.routed_bucket(spec, self.cfg.license_policy)
            doc.bucket = self._routes[doc.license] or doc.bucket
        return None
