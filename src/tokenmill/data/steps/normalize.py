"""Text normalization: one canonical form per text, so equal-looking texts hash equal.

Exact dedup hashes the normalized text (whether normalization is complete
enough decides what counts as a duplicate), so this step must be idempotent: normalize(normalize(t)) == normalize(t).
In order:

1. mojibake repair (optional, `NormalizeConfig.fix_mojibake`): text that was UTF-8 but got
   decoded as Latin-1 / cp1252 ("cafÃ©", "donâ€™t") is re-decoded with ftfy. Only ftfy's
   encoding fixes run: its other fixes (curly quotes, full-width letters, ligatures, HTML
   entities, its own NFC and line breaks) would change text that is not broken — full-width
   forms are ordinary CJK typography and "&amp;" in code is code. It runs first because the
   C1 controls and NEL that steps 2–3 remove are part of the mojibake it must see whole.
   Only lines with a lead byte followed by its continuation bytes as cp1252 shows them ("Ã©",
   "â€™") can hold this mojibake and go to ftfy (one regex search instead of ftfy's ~3 MB/s).
   Removing controls or collapsing spaces afterwards can join two halves of mojibake, so the
   whole normalization repeats (at most 3 passes) until it changes nothing: idempotent.
2. line breaks: \\r\\n, lone \\r, NEL and U+2028/U+2029 become \\n.
3. control characters (C0/C1 except \\n \\t, BOM, lone surrogates) are removed, then NFC.
4. whitespace: trailing spaces go, runs of 4+ newlines become 3; prose also collapses runs of
   horizontal whitespace inside a line (HTML extraction leaves column padding behind). Code
   keeps its indentation and inner spacing byte for byte.
5. books (text of the `books` kind, declared or detected before unwrapping, data/steps/text_kinds.py;
   `NormalizeConfig.unwrap_books`):
   hard-wrapped paragraphs become one line each. Project Gutenberg wraps prose at ~70
   characters, so a line is not a paragraph: every line-based rule (FineWeb's punctuation per
   line, C4's line rules) and the tokens a model sees would treat each wrap as a break. A
   paragraph (lines between blank lines) is unwrapped when it has 2+ lines, none indented (verse,
   quotations and tables are), none longer than WRAP_MAX, not verse (3+ lines, three in four
   starting with a capital), and every line but the last long (>= 60% of the widest) or broken
   because the next word would not fit in the widest: Emma (Gutenberg) has 2,015 multi-line
   paragraphs, all unwrapped but 16, every one indented verse.
"""

from __future__ import annotations

import re
import unicodedata

import ftfy

from tokenmill.data.document import Doc, Rejection
from tokenmill.data.step import DocStep
from tokenmill.data.steps.text_kinds import assign_kind

VERSION = f"5+ftfy-{ftfy.__version__}"  # 4: kinds detected from the text; any detected book unwrapped; 5: CJK sentence ends, code among sentences is a manual

# \r\n, lone \r, NEL, and the Unicode line/paragraph separators all end a line.
_NEWLINES = re.compile(r"\r\n|[\r\x85\u2028\u2029]")
# C0/C1 controls except \n and \t, the byte-order mark, and lone surrogates (not encodable).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\ud800-\udfff]")
# The same less C1 (U+0080-U+009F) and \r: those can be bytes of mojibake, which ftfy must see.
_C0_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufeff\ud800-\udfff]")
# Between two words of a line: a run of 2+ horizontal spaces, or one tab / exotic space (prose).
_INNER_SPACE = re.compile(r"(?<=\S)(?:[^\S\n]{2,}|[^\S\n ])(?=\S)")
_TRAILING_SPACE = re.compile(r"[^\S\n]+$", re.MULTILINE)
# More than two blank lines in a row (four or more newlines) become exactly two blank lines.
_BLANK_RUN = re.compile(r"\n{4,}")
# Paragraph separators (one or more blank lines), kept when splitting so the text can be rebuilt.
_PARAGRAPH_SEP = re.compile(r"(\n[^\S\n]*\n\s*)")
WRAP_MAX = 100  # a hard-wrapped line is at most this long (Gutenberg wraps at ~70, RFCs at 72)

# UTF-8 read as cp1252/Latin-1 shows a character's lead byte as "Â".."ß" (2-byte sequence),
# "à".."ï" (3-byte) or "ð".."ô" (4-byte), followed by its 1, 2 or 3 continuation bytes 0x80-0xBF
# shown as C1 controls, cp1252 punctuation and symbols, or Latin-1 signs. Only lines holding
# such a run go to ftfy (~3 MB/s of per-line Python work; this search runs at > 100 MB/s), so
# French "é\u00a0:" or Italian "à»" — a lead without its continuations — never do.
_CONT = (
    "[\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc"
    "\u2013\u2014\u2018-\u201a\u201c-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122"
    "\ufffd]"
)  # U+FFFD: a byte cp1252 leaves undefined (0x81, 0x8D, ...) decoded with "replace"
_MOJIBAKE_HINT = re.compile(f"[\u00c2-\u00df]{_CONT}|[\u00e0-\u00ef]{_CONT}{{2}}|[\u00f0-\u00f4]{_CONT}{{3}}")
_MAX_PASSES = 3
# ftfy's encoding repairs only; every other decision stays with the rules of this module.
_FTFY = ftfy.TextFixerConfig(
    unescape_html=False,
    remove_terminal_escapes=False,
    fix_latin_ligatures=False,
    fix_character_width=False,
    uncurl_quotes=False,
    fix_line_breaks=False,
    remove_control_chars=False,
    normalization=None,
    explain=False,
)


def fix_mojibake(text: str) -> str:
    """Re-decode UTF-8 that was read as Latin-1/cp1252; text that is not broken is returned as is.

    ftfy fixes text line by line, so giving it only the lines that hold a mojibake run gives
    the same result as giving it everything."""
    parts: list[str] = []
    pos = 0
    for m in _MOJIBAKE_HINT.finditer(text):
        if m.start() < pos:
            continue  # on a line already repaired
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        end = len(text) if end == -1 else end
        parts += [text[pos:start], ftfy.fix_text(text[start:end], _FTFY)]
        pos = end
    return "".join(parts) + text[pos:] if parts else text


def _normalize_once(text: str, code: bool, mojibake: bool) -> str:
    if mojibake and _MOJIBAKE_HINT.search(text):
        # C0 controls, BOM and surrogates are never bytes of mojibake (those are >= 0x80) but
        # split it: they go first, so ftfy sees "Ã\x00©" as the "Ã©" it is.
        text = fix_mojibake(unicodedata.normalize("NFC", _C0_CONTROL.sub("", text)))
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


def normalize_text(text: str, code: bool = False, mojibake: bool = False) -> str:
    """Mojibake (when asked), newlines unified, controls stripped, NFC, spaces and blank runs collapsed."""
    out = _normalize_once(text, code, mojibake)
    # Removing a C1 control or collapsing spaces after the repair can join two halves of
    # mojibake ("Ã" + "\x81" + "©"): repeat until nothing changes, so the result is idempotent.
    for _ in range(_MAX_PASSES - 1):
        if not (mojibake and _MOJIBAKE_HINT.search(out)):
            break
        again = _normalize_once(out, code, mojibake)
        if again == out:
            break
        out = again
    return out


def _hard_wrapped(lines: list[str]) -> bool:
    """Prose wrapped at a width: every line but the last is long (>= 60% of the widest) or was
    broken because the next word would not fit in the widest; not verse, whose lines (3 or
    more) start with a capital letter, three in four at least."""
    widest = max(map(len, lines))
    if widest > WRAP_MAX or any(line[:1].isspace() or not line.strip() for line in lines):
        return False
    if len(lines) >= 3 and 4 * sum(line[:1].isupper() for line in lines) >= 3 * len(lines):
        return False
    return all(len(line) >= 0.6 * widest or len(line) + 1 + len(nxt.split()[0]) > widest for line, nxt in zip(lines, lines[1:]))


def unwrap_paragraphs(text: str) -> str:
    """Each hard-wrapped paragraph joined into one line (see step 5); others left as they are."""
    parts = _PARAGRAPH_SEP.split(text)
    for i in range(0, len(parts), 2):  # even indices: paragraphs; odd: their separators
        lines = parts[i].split("\n")
        if len(lines) >= 2 and _hard_wrapped(lines):
            parts[i] = " ".join(line.strip() for line in lines)
    return "".join(parts)


class Normalize(DocStep):
    """Rewrites doc.text into its canonical form; never removes a document (the length floor does)."""

    name = "normalize"
    version = VERSION

    def process(self, doc: Doc) -> Rejection | None:
        if doc.text is not None:
            doc.text = normalize_text(doc.text, code=doc.format == "code", mojibake=self.cfg.normalize.fix_mojibake)
            # the kind of the text as written: a book is known by its hard-wrapped lines
            kind = assign_kind(doc, self.cfg.quality)
            if self.cfg.normalize.unwrap_books and doc.format != "code" and kind == "books":
                doc.text = unwrap_paragraphs(doc.text)
        return None
