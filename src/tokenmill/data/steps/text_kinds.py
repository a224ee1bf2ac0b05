"""Kinds of text, and which quality rule families fit each (domain-specific filtering, docs/curation.md).

The published rule families were written for one kind of text each: Gopher's and C4's for web
pages in English, FineWeb's for lines of extracted HTML (a line is a paragraph). Applied to a
novel, a module or a manual they remove good documents for the wrong reason: a novel has more
than Gopher's 100,000 words, a hard-wrapped book fails FineWeb's punctuation-per-line rule, a
manual with a shell snippet fails C4's curly-bracket rule. So each kind gets its own:

| kind      | rule families                                                 | detected (data/steps/kind_detect.py) |
|-----------|---------------------------------------------------------------|-------------------|
| web       | Gopher quality, Gopher repetition, C4, FineWeb                | lines that end no sentence, short lines, menus, separators: pages, and junk (link lists, tag clouds, shop pages) |
| reference | Gopher quality without '#'/'...' and the letter rule; Gopher  | shell prompts, --options, `code`, headings with code lines; paragraphs among headings and lists; technical prose; an HTML page a documentation toolchain made (extract.py) |
|           | repetition without the top and duplicated n-gram shares, its  |                  |
|           | duplicated-line share over text lines; C4 without its curly   |                  |
|           | bracket rule; no FineWeb                                      |                  |
|           | (manuals repeat their labels, commands and phrasing: of 1,054  |                  |
|           | real manual pages and sections FineWeb's duplicated-line rule  |                  |
|           | breaks 51%, Gopher's duplicated 5-gram rule 19%)               |                  |
| prose     | Gopher quality, Gopher repetition without the duplicated      | paragraphs of sentences |
|           | 5-10-gram rules (scripture's formulas)                        |                  |
| books     | Gopher quality without max_words; Gopher repetition as the    | >= 100,000 characters, or hard-wrapped lines, or chapter headings |
|           | median over 5,000-word units, without the duplicated 5-10-gram |                  |
|           | rules; hard-wrapped paragraphs are unwrapped by `normalize`   |                   |
| code      | the code rules (data/steps/code_quality.py)                         | code input, code lines and symbols, the `code` bucket |

A document's kind is its bucket's `quality.kinds[bucket]` when listed (declared); else code for
code input (format); else the kind its own text shows (detected, `quality.detect_kinds`; with
detection off: web for html/warc input, prose otherwise). It is decided once per document, by
`normalize` (before books are unwrapped) or by `quality` when normalize did not run, and kept on
the row (`kind`), in the lineage (`kind`: "web (detected: ended_char_frac=0.12, ...)") and in
the funnel (documents in / kept per kind). The length floor (`min_chars`) applies to every kind,
and the garbled-word rule (`garble`, data/steps/garble.py) to every kind but code.
"""

from __future__ import annotations

from typing import cast

from tokenmill.data.config import QualityConfig, QualityKind
from tokenmill.data.document import Doc
from tokenmill.data.steps.kind_detect import WEB_FORMATS, detect_kind

FAMILIES: dict[str, frozenset[str]] = {
    "web": frozenset({"gopher", "gopher_repetition", "c4", "fineweb", "garble"}),
    "reference": frozenset({"gopher", "gopher_repetition", "c4", "garble"}),  # repetition without the 5-10-grams (quality.py)
    "prose": frozenset({"gopher", "gopher_repetition", "garble"}),
    "books": frozenset({"gopher", "gopher_repetition", "garble"}),
    "code": frozenset({"code"}),
}


def kind_of(bucket: str, fmt: str, cfg: QualityConfig, text: str | None = None) -> tuple[QualityKind, str]:
    """The kind of text a document is judged as, and how it was decided, in words: the bucket's
    declared kind, code for code input, else the kind its text shows (or, with detection off or
    no text, its format's)."""
    if bucket in cfg.kinds:
        return cfg.kinds[bucket], "declared"
    if fmt == "code":
        return "code", "format"
    if cfg.detect_kinds and text is not None:
        kind, evidence = detect_kind(text, fmt)
        return cast(QualityKind, kind), f"detected: {evidence}"
    return ("web" if fmt in WEB_FORMATS else "prose"), "format"


KIND_STEP = "kind"  # the lineage entry that names a document's kind and how it was decided


def assign_kind(doc: Doc, cfg: QualityConfig) -> QualityKind:
    """A document's kind, decided once (doc.kind) and written into its lineage."""
    if doc.kind is None:
        kind, how = kind_of(doc.bucket, doc.format, cfg, doc.text or "")
        doc.kind = kind
        doc.lineage.append((KIND_STEP, f"{kind} ({how})"))
    return cast(QualityKind, doc.kind)


def families(kind: QualityKind, cfg: QualityConfig) -> frozenset[str]:
    """The rule families that apply to a kind, less those the config turns off everywhere."""
    off = {name for name in ("gopher", "gopher_repetition", "c4", "fineweb", "garble") if not getattr(cfg, name)}
    return FAMILIES[kind] - off
