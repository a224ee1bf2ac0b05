"""Kinds of text, and which quality rule families fit each (seed 002 §2.4: domain-specific filtering).

The published rule families were written for one kind of text each: Gopher's and C4's for web
pages in English, FineWeb's for lines of extracted HTML (a line is a paragraph). Applied to a
novel, a module or a manual they remove good documents for the wrong reason: a novel has more
than Gopher's 100,000 words, a hard-wrapped book fails FineWeb's punctuation-per-line rule, a
manual with a shell snippet fails C4's curly-bracket rule. So each kind gets its own:

| kind      | rule families                                                 | default for       |
|-----------|---------------------------------------------------------------|-------------------|
| web       | Gopher quality, Gopher repetition, C4, FineWeb                | html, warc input  |
| reference | the same, without C4's curly-bracket rule (manuals show code) |                   |
| prose     | Gopher quality, Gopher repetition                             | text, jsonl, parquet |
| books     | Gopher quality without max_words; Gopher repetition as the    |                   |
|           | median over 5,000-word units, without the duplicated 5-10-gram |                  |
|           | rules; plain text is unwrapped into paragraphs by `normalize` |                   |
| code      | the code rules (data/code_quality.py)                         | code input, the `code` bucket |

A bucket's kind is `quality.kinds[bucket]` when listed, else it follows the input format. The
length floor (`min_chars`) applies to every kind.
"""

from __future__ import annotations

from tokenmill.data.config import QualityConfig, QualityKind

FAMILIES: dict[str, frozenset[str]] = {
    "web": frozenset({"gopher", "gopher_repetition", "c4", "fineweb"}),
    "reference": frozenset({"gopher", "gopher_repetition", "c4", "fineweb"}),
    "prose": frozenset({"gopher", "gopher_repetition"}),
    "books": frozenset({"gopher", "gopher_repetition"}),
    "code": frozenset({"code"}),
}
WEB_FORMATS: frozenset[str] = frozenset({"html", "warc"})


def kind_of(bucket: str, fmt: str, cfg: QualityConfig) -> QualityKind:
    """The kind of text a document is judged as: the bucket's declared kind, else its format's."""
    if bucket in cfg.kinds:
        return cfg.kinds[bucket]
    if fmt in WEB_FORMATS:
        return "web"
    return "code" if fmt == "code" else "prose"


def families(kind: QualityKind, cfg: QualityConfig) -> frozenset[str]:
    """The rule families that apply to a kind, less those the config turns off everywhere."""
    off = {name for name in ("gopher", "gopher_repetition", "c4", "fineweb") if not getattr(cfg, name)}
    return FAMILIES[kind] - off
