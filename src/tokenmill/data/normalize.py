"""Text normalization: one canonical form per text, so equal-looking texts hash equal.

Exact dedup hashes the normalized text (seed 002 §2.5: "whether normalization is complete
enough"), so this step must be idempotent: normalize(normalize(t)) == normalize(t).
Code keeps its indentation and inner spacing byte for byte; prose also collapses runs of
horizontal whitespace inside a line (HTML extraction leaves column padding behind).
"""

from __future__ import annotations

import re
import unicodedata

VERSION = "1"

# \r\n, lone \r, NEL, and the Unicode line/paragraph separators all end a line.
_NEWLINES = re.compile(r"\r\n|[\r\x85\u2028\u2029]")
# C0/C1 controls except \n and \t, the byte-order mark, and lone surrogates (not encodable).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\ud800-\udfff]")
# Between two words of a line: a run of 2+ horizontal spaces, or one tab / exotic space (prose).
_INNER_SPACE = re.compile(r"(?<=\S)(?:[^\S\n]{2,}|[^\S\n ])(?=\S)")
_TRAILING_SPACE = re.compile(r"[^\S\n]+$", re.MULTILINE)
# More than two blank lines in a row (four or more newlines) become exactly two blank lines.
_BLANK_RUN = re.compile(r"\n{4,}")


def normalize_text(text: str, code: bool = False) -> str:
    """NFC, controls stripped, newlines unified, trailing spaces and blank-line runs collapsed."""
    text = _NEWLINES.sub("\n", text)
    # Controls go before NFC: removing one can bring a base letter and a combining mark together.
    text = _CONTROL.sub("", text)
    text = unicodedata.normalize("NFC", text)
    if not code:
        text = _INNER_SPACE.sub(" ", text)
    text = _TRAILING_SPACE.sub("", text)
    text = _BLANK_RUN.sub("\n\n\n", text)
    # Leading blank lines carry nothing; leading spaces of the first line are indentation.
    return text.lstrip("\n").rstrip()
