"""The curation funnel: documents and bytes into and out of every step, per bucket and in total.

Every document passes every step in order: a step that does not apply to it (extract on plain
text, quality on a skipped bucket) passes it through unchanged and counts it as skipped. So for
every step docs_in = docs_out + rejected, and docs_out of a step = docs_in of the next. Bytes
are UTF-8 bytes of the text entering and leaving a step (raw bytes entering "read").
The `d_eff` block holds the inputs of D_eff = D (1 - r_dup)(1 - r_pad) ρ_parse ρ_quality.
The `pii` block says, per bucket, what the pii step replaced in the kept documents, with a few
placeholders in context: a rewrite of the text is never silent.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from tokenmill.data.steps.pii import PLACEHOLDERS

VERSION = "1"
STEPS: tuple[str, ...] = ("read", "extract", "normalize", "length", "quality", "exact_dedup")
FILES_LISTED = 1000  # file names kept per source in _funnel.json: the count and the hash cover the rest


def files_read(names: Iterable[str], listed: int = FILES_LISTED) -> dict[str, Any]:
    """The files a source read, in reading order, in bounded memory however many there are: the
    first `listed` names, their count, and the SHA-256 of the whole list (one name a line, UTF-8)."""
    digest = hashlib.sha256()
    count = 0
    first: list[str] = []
    for name in names:
        digest.update(name.encode("utf-8", "surrogateescape") + b"\n")  # a name may not be valid UTF-8
        count += 1
        if len(first) < listed:
            first.append(name)
    return {"count": count, "sha256": digest.hexdigest(), "names": first, "all_named": count <= listed}


class StepMark(NamedTuple):
    """What one step did to one document; rule is set when the step removed it."""

    step: str
    bytes_in: int
    bytes_out: int
    applied: bool = True
    rule: str | None = None


@dataclass
class StepCounts:
    docs_in: int = 0
    bytes_in: int = 0
    docs_out: int = 0
    bytes_out: int = 0
    docs_skipped: int = 0  # passed through without the step applying
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)  # rule -> docs, bytes

    def add(self, mark: StepMark) -> None:
        self.docs_in += 1
        self.bytes_in += mark.bytes_in
        if mark.rule is not None:
            slot = self.rejected.setdefault(mark.rule, {"docs": 0, "bytes": 0})
            slot["docs"] += 1
            slot["bytes"] += mark.bytes_in
            return
        self.docs_out += 1
        self.bytes_out += mark.bytes_out
        self.docs_skipped += not mark.applied

    def merge(self, other: "StepCounts") -> None:
        self.docs_in += other.docs_in
        self.bytes_in += other.bytes_in
        self.docs_out += other.docs_out
        self.bytes_out += other.bytes_out
        self.docs_skipped += other.docs_skipped
        for rule, r in other.rejected.items():
            slot = self.rejected.setdefault(rule, {"docs": 0, "bytes": 0})
            slot["docs"] += r["docs"]
            slot["bytes"] += r["bytes"]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StepCounts":
        return cls(
            d["docs_in"],
            d["bytes_in"],
            d["docs_out"],
            d["bytes_out"],
            d["docs_skipped"],
            {rule: dict(v) for rule, v in d["rejected"].items()},
        )

    @property
    def docs_rejected(self) -> int:
        return sum(r["docs"] for r in self.rejected.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "docs_in": self.docs_in,
            "bytes_in": self.bytes_in,
            "docs_out": self.docs_out,
            "bytes_out": self.bytes_out,
            "docs_skipped": self.docs_skipped,
            "docs_rejected": self.docs_rejected,
            "rejected": {rule: dict(v) for rule, v in sorted(self.rejected.items())},
        }


@dataclass
class SourceCounts:
    bucket: str
    docs_in: int = 0
    bytes_in: int = 0
    docs_out: int = 0
    bytes_out: int = 0
    encodings: dict[str, int] = field(default_factory=dict)  # documents read, by the encoding decoded
    # documents read whose record had an id of its own: "user" (the row's id), or why it was not
    # taken: "shared" (another record has it), "unusable" (data/doc_ids.py)
    ids: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The counts; `encodings` and `ids` only for a source that has any."""
        out: dict[str, Any] = {k: v for k, v in vars(self).items() if k not in ("encodings", "ids")}
        for name in ("encodings", "ids"):
            if getattr(self, name):
                out[name] = dict(sorted(getattr(self, name).items()))
        return out


PII_EXAMPLES = 2  # placeholders in context kept per kind and bucket: the funnel stays small whatever the corpus
PII_CONTEXT = 50  # characters either side of an example's placeholder


def _pii_examples(text: str, kind: str, want: int) -> list[str]:
    """Up to `want` of the kind's placeholders in the masked text, each with its context on one line."""
    placeholder = PLACEHOLDERS[kind]
    out: list[str] = []
    at = text.find(placeholder)
    while at != -1 and len(out) < want:
        window = text[max(0, at - PII_CONTEXT) : at + len(placeholder) + PII_CONTEXT]
        out.append("…" + " ".join(window.split()) + "…")
        at = text.find(placeholder, at + len(placeholder))
    return out


@dataclass
class PiiCounts:
    """What the pii step replaced in one bucket's kept documents: documents rewritten, placeholders
    per kind, and the first few placeholders of each kind in context (from the masked text, so an
    example shows what was lost, "Mr. <NAME> bowed", never the identifier itself)."""

    docs: int = 0  # kept documents with at least one replacement
    kinds: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, counts: dict[str, int], text: str) -> None:
        found = {k: n for k, n in counts.items() if n}
        if not found:
            return
        self.docs += 1
        for kind, n in found.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + n
            have = self.examples.setdefault(kind, [])
            if len(have) < PII_EXAMPLES and kind in PLACEHOLDERS:
                have.extend(_pii_examples(text, kind, PII_EXAMPLES - len(have)))

    def merge(self, other: "PiiCounts") -> None:
        self.docs += other.docs
        for kind, n in other.kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + n
        for kind, examples in other.examples.items():
            have = self.examples.setdefault(kind, [])
            have.extend(examples[: max(0, PII_EXAMPLES - len(have))])

    def to_dict(self) -> dict[str, Any]:
        return {"docs": self.docs, "kinds": dict(sorted(self.kinds.items())), "examples": dict(sorted(self.examples.items()))}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PiiCounts":
        return cls(d["docs"], dict(d["kinds"]), {k: list(v) for k, v in d["examples"].items()})


UNDETERMINED = "und"  # ISO 639-2 for "undetermined": removed before langid ran, or no langid step


@dataclass
class LanguageCounts:
    """The fate of the documents of one language (or of one kind of text): kept, or removed by
    which step's which rule.
    A rule that removes one language's documents far more often than another's is a bias of the
    filter, not of the data (FineWeb-2, Penedo et al. 2025): this is where it shows."""

    docs: int = 0
    kept: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # "step/rule" -> documents

    def merge(self, other: "LanguageCounts") -> None:
        self.docs += other.docs
        self.kept += other.kept
        for rule, n in other.rejected.items():
            self.rejected[rule] = self.rejected.get(rule, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {
            "docs": self.docs,
            "kept": self.kept,
            "keep_rate": _ratio(self.kept, self.docs),
            "rejected": dict(sorted(self.rejected.items(), key=lambda kv: (-kv[1], kv[0]))),
        }


@dataclass
class LicenseCounts(LanguageCounts):
    """The fate of the documents of one license id: read (documents, raw bytes), kept (documents,
    bytes of curated text), removed by which step's rule; `license/...` rules are the policy's."""

    bytes_in: int = 0
    bytes_kept: int = 0

    def merge(self, other: "LanguageCounts") -> None:
        super().merge(other)
        if isinstance(other, LicenseCounts):
            self.bytes_in += other.bytes_in
            self.bytes_kept += other.bytes_kept

    def to_dict(self) -> dict[str, Any]:
        by_policy = sum(n for rule, n in self.rejected.items() if rule.startswith("license/"))
        return {
            **super().to_dict(),
            "bytes_in": self.bytes_in,
            "bytes_kept": self.bytes_kept,
            "removed_by_policy": by_policy,
            "removed_by_other_steps": self.docs - self.kept - by_policy,
        }


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


PARSE_STEPS = ("read", "extract")
QUALITY_STEPS = ("length", "langid", "quality", "model_quality", "safety")
DEDUP_STEPS = ("exact_dedup", "minhash_dedup", "line_dedup", "substring_dedup")


def _share_kept(steps: dict[str, StepCounts], names: tuple[str, ...]) -> float | None:
    """Bytes kept through the named steps that ran, as a product of per-step keep rates."""
    ran = [steps[n] for n in names if n in steps and steps[n].bytes_in]
    if not ran:
        return None
    kept = 1.0
    for c in ran:
        kept *= c.bytes_out / c.bytes_in if c.bytes_in else 1.0
    return kept


def d_eff_inputs(steps: dict[str, StepCounts]) -> dict[str, float | None]:
    """Effective tokens (docs/curation.md): D_eff = D (1 - r_dup)(1 - r_pad) ρ_parse ρ_quality.

    ρ_parse: documents that survive reading and extraction; ρ_quality: bytes kept by the quality
    steps; r_dup: bytes removed by the dedup steps (bytes as a token proxy; r_pad is the packer's).
    """
    first = steps[next(iter(steps))]
    parsed = [steps[n] for n in PARSE_STEPS if n in steps]
    dedup_kept = _share_kept(steps, DEDUP_STEPS)
    return {
        "rho_parse": _ratio(parsed[-1].docs_out, first.docs_in) if parsed else None,
        "rho_quality": _share_kept(steps, QUALITY_STEPS),
        "r_dup": None if dedup_kept is None else 1.0 - dedup_kept,
    }


class Funnel:
    """Accumulates StepMarks per bucket; `to_dict` is the content of curated/_funnel.json."""

    def __init__(self, steps: tuple[str, ...] = STEPS):
        self.steps = steps
        self.buckets: dict[str, dict[str, StepCounts]] = {}
        self.sources: dict[str, SourceCounts] = {}
        self.languages: dict[str, LanguageCounts] = {}
        # the same fates by kind of text (data/steps/text_kinds.py); "und": removed before it was decided
        self.kinds: dict[str, LanguageCounts] = {}
        # False once a funnel written before languages were counted is merged in (a curation
        # resumed across versions): its documents' fates are unknown, so none are claimed
        self.languages_complete = True
        # the same fates (and bytes) by the license id of the document's source (data/licenses.py)
        self.licenses: dict[str, LicenseCounts] = {}
        self.licenses_complete = True  # False once a funnel written before licenses were counted is merged in
        self.license_permissions: dict[str, dict[str, Any]] = {}  # set by the driver before writing
        # per files source: the files it read (files_read); set by the driver before writing
        self.files_read: dict[str, dict[str, Any]] = {}
        # per bucket: what the pii step replaced in kept documents
        self.pii: dict[str, PiiCounts] = {}
        self.pii_complete = True  # False once a funnel written before replacements were counted is merged in

    def merge(self, other: "Funnel") -> None:
        """Add another funnel's counts (of a shard or chunk) to this one."""
        for bucket, per_step in other.buckets.items():
            mine = self._bucket(bucket)
            for step, c in per_step.items():
                mine[step].merge(c)
        for name, sc in other.sources.items():
            mine_src = self.sources.setdefault(name, SourceCounts(sc.bucket))
            mine_src.bucket = mine_src.bucket or sc.bucket
            for k in ("docs_in", "bytes_in", "docs_out", "bytes_out"):
                setattr(mine_src, k, getattr(mine_src, k) + getattr(sc, k))
            for enc, n in sc.encodings.items():
                mine_src.encodings[enc] = mine_src.encodings.get(enc, 0) + n
            for kind, n in sc.ids.items():
                mine_src.ids[kind] = mine_src.ids.get(kind, 0) + n
        for lang, lc in other.languages.items():
            self.languages.setdefault(lang, LanguageCounts()).merge(lc)
        for kind, kc in other.kinds.items():
            self.kinds.setdefault(kind, LanguageCounts()).merge(kc)
        self.languages_complete = self.languages_complete and other.languages_complete
        for lic, lc in other.licenses.items():
            self.licenses.setdefault(lic, LicenseCounts()).merge(lc)
        self.licenses_complete = self.licenses_complete and other.licenses_complete
        for bucket, pc in other.pii.items():
            self.pii.setdefault(bucket, PiiCounts()).merge(pc)
        self.pii_complete = self.pii_complete and other.pii_complete

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Funnel":
        """Inverse of to_dict for the counts (per bucket and per source)."""
        f = cls(tuple(data["steps"]))
        for bucket, per_step in data["buckets"].items():
            f.buckets[bucket] = {s: StepCounts.from_dict(c) for s, c in per_step.items()}
        for name, c in data.get("sources", {}).items():
            f.sources[name] = SourceCounts(**c)
        for lang, c in data.get("languages", {}).items():
            f.languages[lang] = LanguageCounts(c["docs"], c["kept"], dict(c["rejected"]))
        for kind, c in data.get("kinds", {}).items():
            f.kinds[kind] = LanguageCounts(c["docs"], c["kept"], dict(c["rejected"]))
        f.languages_complete = "languages" in data
        for lic, c in data.get("licenses", {}).items():
            f.licenses[lic] = LicenseCounts(c["docs"], c["kept"], dict(c["rejected"]), c["bytes_in"], c["bytes_kept"])
        f.licenses_complete = "licenses" in data
        f.pii = {b: PiiCounts.from_dict(c) for b, c in data.get("pii", {}).items()}
        f.pii_complete = "pii" in data
        return f

    def _bucket(self, bucket: str) -> dict[str, StepCounts]:
        if bucket not in self.buckets:
            self.buckets[bucket] = {s: StepCounts() for s in self.steps}
        return self.buckets[bucket]

    def record(self, bucket: str, mark: StepMark) -> None:
        if mark.step not in self.steps:
            raise KeyError(f"unknown step {mark.step!r}; the funnel's steps are {self.steps}")
        self._bucket(bucket)[mark.step].add(mark)

    def outcome(
        self, language: str | None, removed_by: StepMark | None, kind: str | None = None, license: str | None = None
    ) -> None:
        """A document's final fate, once: kept (None) or removed by the step and rule of
        `removed_by`; counted under its language, its kind of text and (when given) its license."""
        tables: list[tuple[dict[str, Any], str | None, type[LanguageCounts]]] = [
            (self.languages, language, LanguageCounts),
            (self.kinds, kind, LanguageCounts),
        ]
        if license is not None:
            tables.append((self.licenses, license, LicenseCounts))
        for table, key, make in tables:
            counts = table.setdefault(key or UNDETERMINED, make())
            counts.docs += 1
            if removed_by is None:
                counts.kept += 1
            else:
                rule = f"{removed_by.step}/{removed_by.rule}"
                counts.rejected[rule] = counts.rejected.get(rule, 0) + 1

    def source_in(self, source: str, bucket: str, n_bytes: int, encoding: str | None = None, id_kind: str | None = None) -> None:
        counts = self.sources.setdefault(source, SourceCounts(bucket))
        counts.docs_in += 1
        counts.bytes_in += n_bytes
        if encoding is not None:
            counts.encodings[encoding] = counts.encodings.get(encoding, 0) + 1
        if id_kind is not None:
            counts.ids[id_kind] = counts.ids.get(id_kind, 0) + 1

    def pii_replaced(self, bucket: str, counts: dict[str, int], text: str) -> None:
        """A kept document's PII replacements (its `pii` counts and masked text), under its bucket."""
        if any(counts.values()):
            self.pii.setdefault(bucket, PiiCounts()).add(counts, text)

    def license_bytes(self, license: str, bytes_in: int = 0, bytes_kept: int = 0) -> None:
        """Raw bytes read, or curated bytes kept, of a document of this license."""
        counts = self.licenses.setdefault(license, LicenseCounts())
        counts.bytes_in += bytes_in
        counts.bytes_kept += bytes_kept

    def source_out(self, source: str, n_bytes: int, bucket: str | None = None) -> None:
        """A kept document leaves the funnel (possibly counted in another chunk's funnel than
        the one that saw it come in: the counts are merged before they are read)."""
        counts = self.sources.setdefault(source, SourceCounts(bucket or ""))
        counts.docs_out += 1
        counts.bytes_out += n_bytes

    def total(self) -> dict[str, StepCounts]:
        total = {s: StepCounts() for s in self.steps}
        for per_step in self.buckets.values():
            for step, c in per_step.items():
                total[step].merge(c)
        return total

    def violations(self) -> list[str]:
        """Broken invariants (should be none): in = out + rejected; out of a step = in of the next."""
        problems = []
        for bucket, per_step in {**self.buckets, "<total>": self.total()}.items():
            for i, step in enumerate(self.steps):
                c = per_step[step]
                if c.docs_in != c.docs_out + c.docs_rejected:
                    problems.append(f"{bucket}/{step}: docs_in {c.docs_in} != out + rejected")
                if i and per_step[self.steps[i - 1]].docs_out != c.docs_in:
                    problems.append(f"{bucket}/{step}: docs_in {c.docs_in} != previous docs_out")
        if self.languages and self.languages_complete:  # every document's fate counted once, under one language
            total = self.total()
            decided = sum(c.docs for c in self.languages.values())
            if decided != total[self.steps[0]].docs_in:
                problems.append(f"languages: {decided} documents decided != {total[self.steps[0]].docs_in} read")
            kept = sum(c.kept for c in self.languages.values())
            if kept != total[self.steps[-1]].docs_out:
                problems.append(f"languages: {kept} kept != {total[self.steps[-1]].docs_out} out of the last step")
        return problems

    def kinds_complete(self) -> bool:
        """Every decided fate also counted by kind (not so when a funnel written before kinds
        were counted was merged in: then no kind counts are claimed)."""
        return (
            bool(self.kinds)
            and self.languages_complete
            and sum(c.docs for c in self.kinds.values()) == sum(c.docs for c in self.languages.values())
        )

    def to_dict(self) -> dict[str, Any]:
        total = self.total()
        return {
            "version": VERSION,
            "steps": list(self.steps),
            "total": {s: c.to_dict() for s, c in total.items()},
            "buckets": {b: {s: c.to_dict() for s, c in per.items()} for b, per in sorted(self.buckets.items())},
            "sources": {name: c.to_dict() for name, c in self.sources.items()},
            **(
                {"languages": {lang: c.to_dict() for lang, c in sorted(self.languages.items(), key=lambda kv: -kv[1].docs)}}
                if self.languages_complete
                else {}
            ),
            **(
                {"kinds": {kind: c.to_dict() for kind, c in sorted(self.kinds.items(), key=lambda kv: -kv[1].docs)}}
                if self.kinds_complete()
                else {}
            ),
            **({"licenses": self._licenses_dict()} if self.licenses_complete else {}),
            **({"files_read": self.files_read} if self.files_read else {}),
            **({"pii": {b: c.to_dict() for b, c in sorted(self.pii.items())}} if self.pii_complete else {}),
            "d_eff": {"total": d_eff_inputs(total), "buckets": {b: d_eff_inputs(per) for b, per in sorted(self.buckets.items())}},
        }

    def _licenses_dict(self) -> dict[str, Any]:
        """Per license id (most documents first): its counts, and its permissions when the driver set them."""
        out = {}
        for lic, c in sorted(self.licenses.items(), key=lambda kv: (-kv[1].docs, kv[0])):
            perms = self.license_permissions.get(lic)
            out[lic] = {**c.to_dict(), **({"permissions": perms} if perms is not None else {})}
        return out

    def write(self, path: Path) -> dict[str, Any]:
        data = self.to_dict()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        return data
