"""Bytes to text, and how: the encoding used, its confidence and how it was found.

`decode` tries, in order, and takes the first that decodes the bytes without an error:
  1. a byte-order mark (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE)              confidence 1.0, "bom"
  2. UTF-8 (ASCII included): the fast path, most data is UTF-8          confidence 1.0, "utf-8"
     (after step 3 when the protocol declares UTF-16 / UTF-32, whose
     text of ASCII or Cyrillic letters is valid UTF-8 as well)
  3. the declared charset: the HTTP Content-Type of a web record, else   confidence 1.0, "declared"
     for markup the page's <meta charset> / http-equiv or its XML
     declaration (an ISO-8859-1 / ASCII label reads as windows-1252, as
     the WHATWG encoding standard and every browser do)
  4. charset-normalizer's best match (ties go to windows-1252, the web's  1 - its mess ratio
     most common legacy encoding); confidence as its chardet-compatible   (less 0.2 under 32
     `detect` gives it                                                     bytes), "detected"
and when none does, the bytes are `undecodable`: the problem says what each step found. The
detector never runs on valid UTF-8, so the UTF-8 path costs what it cost before.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from tokenmill.data.document import Encoding
from tokenmill.data.readers.base import binary_reason

_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]{0,200}?encoding\s*=\s*["']([A-Za-z0-9_.:-]{1,40})""", re.I)
DECLARATION_SCAN_BYTES = 4096  # where a page must declare its charset (the spec says 1024; pages overrun it)
# UTF-32 before UTF-16: the UTF-32 LE mark starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig", "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32", "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32", "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16", "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16", "utf-16-be"),
)
# WHATWG: these labels mean windows-1252 on the web (C1 bytes are its curly quotes and dashes).
_WEB_LATIN1 = frozenset({"iso8859-1", "ascii"})  # codecs.lookup names of latin-1 / us-ascii labels
DETECTOR_TIE = 0.005  # matches whose mess and coherence are this close count as equally good
SMALL_INPUT = 32  # bytes: charset-normalizer's TOO_SMALL_SEQUENCE, where a detection is a guess
SMALL_INPUT_PENALTY = 0.2
UTF8 = Encoding("utf-8", 1.0, "utf-8")


@dataclass(frozen=True, slots=True)
class Decoded:
    """The text and how it was decoded, or None and the problem."""

    text: str | None
    encoding: Encoding | None = None
    problem: str | None = None


def codec(label: str | None) -> str | None:
    """A Python codec name for a declared charset, or None when Python does not know it."""
    if not label:
        return None
    try:
        return codecs.lookup(label.strip().strip("\"'")).name
    except LookupError:
        return None


def content_type_charset(content_type: str | None) -> str | None:
    """The charset parameter of an HTTP Content-Type, or None."""
    m = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", content_type or "", re.I)
    return m.group(1) if m else None


def _bom(data: bytes) -> tuple[str, str] | None:
    """(codec that drops the mark, name recorded) of a leading byte-order mark."""
    for mark, name, recorded in _BOMS:
        if data.startswith(mark):
            return name, recorded
    return None


def _is_wide(name: str | None) -> bool:
    return name is not None and name.replace("_", "-").startswith(("utf-16", "utf-32"))


def binary_problem(data: bytes, declared: str | None = None) -> str | None:
    """binary_reason, except for UTF-16 / UTF-32 text (a byte-order mark, or such a charset
    declared by the protocol), whose NUL bytes are part of its characters."""
    bom = _bom(data)
    if (bom is not None and _is_wide(bom[1])) or _is_wide(codec(declared)):
        return None
    return binary_reason(data)


def markup_charset(data: bytes) -> str | None:
    """The charset a page declares in its first bytes: <meta charset> / http-equiv, or <?xml encoding?>."""
    m = _XML_ENCODING.search(data, 0, DECLARATION_SCAN_BYTES) or _META_CHARSET.search(data, 0, DECLARATION_SCAN_BYTES)
    return m.group(1).decode("ascii") if m else None


def decode_utf8(data: bytes) -> tuple[str | None, str | None]:
    """(text, None) or (None, problem); a leading UTF-8 BOM is not part of the text."""
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 at byte {exc.start}: {exc.reason}"


def _attempt(data: bytes, name: str, encoding: Encoding, what: str, tried: list[str]) -> Decoded | None:
    """The bytes decoded strictly by `name`, or None with why not appended to `tried`."""
    try:
        return Decoded(data.decode(name), encoding)
    except UnicodeDecodeError as exc:
        tried.append(f"not valid {what} at byte {exc.start}: {exc.reason}")
    except LookupError:  # a bytes-to-bytes codec (hex, zip) is no text encoding
        tried.append(f"{what} is not a text encoding")
    return None


def decode(data: bytes, declared: str | None = None, markup: bool = False) -> Decoded:
    """The bytes as text by the first method of the module's order that decodes them cleanly.
    `declared`: the protocol's charset (HTTP Content-Type); `markup`: also look for the page's own."""
    tried: list[str] = []
    bom = _bom(data)
    attempts = [(bom[0], Encoding(bom[1], 1.0, "bom"), f"{bom[1]} after its byte-order mark")] if bom else []
    attempts.append(("utf-8", UTF8, "UTF-8"))
    label = declared or (markup_charset(data) if markup else None)
    name = codec(label)
    if label and name is None:
        tried.append(f"declared charset {label!r} is unknown")
    elif name is not None and not (_is_wide(name) and not declared):  # a <meta> readable as ASCII is not UTF-16
        for candidate in ["cp1252", name] if name in _WEB_LATIN1 else [name] if name != "utf-8" else []:
            step = (candidate, Encoding(candidate, 1.0, "declared"), f"{candidate} (declared {label!r})")
            # UTF-16 text of ASCII or Cyrillic letters is valid UTF-8 too: a declared one goes first
            attempts.insert(len(attempts) - 1 if _is_wide(name) else len(attempts), step)
    for codec_name, encoding, what in attempts:
        got = _attempt(data, codec_name, encoding, what, tried)
        if got is not None:
            return got
    detected = detect(data)
    if detected is not None:
        return detected
    tried.append("charset-normalizer finds no encoding that decodes it without mess")
    return Decoded(None, problem="no encoding decodes it cleanly: " + "; ".join(tried))


def detect(data: bytes) -> Decoded | None:
    """charset-normalizer's best match that decodes the bytes strictly, or None."""
    from charset_normalizer import from_bytes  # lazy: only bytes that are not UTF-8 need it

    matches = list(from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    ties = [m for m in matches if m.chaos <= best.chaos + DETECTOR_TIE and m.coherence >= best.coherence - DETECTOR_TIE]
    ranked = [m for m in ties if "cp1252" in m.could_be_from_charset] + matches
    for match in ranked:
        name = "cp1252" if "cp1252" in match.could_be_from_charset else codec(match.encoding)
        if name is None:
            continue
        try:
            text = data.decode(name)
        except UnicodeDecodeError:
            continue
        confidence = 1.0 - match.chaos - (SMALL_INPUT_PENALTY if len(data) < SMALL_INPUT else 0.0)
        return Decoded(text, Encoding(name, round(max(confidence, 0.0), 4), "detected"))
    return None
