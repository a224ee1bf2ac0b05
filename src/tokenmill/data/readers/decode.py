"""Bytes to text: UTF-8 for plain text, the declared charset for markup and web records."""

from __future__ import annotations

import codecs
import re

_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)


def decode_utf8(data: bytes) -> tuple[str | None, str | None]:
    """(text, None) or (None, problem); a leading UTF-8 BOM is not part of the text."""
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 at byte {exc.start}: {exc.reason}"


def codec(label: str | None) -> str | None:
    """A Python codec name for a declared charset, or None when Python does not know it."""
    if not label:
        return None
    try:
        return codecs.lookup(label.strip().strip("\"'")).name
    except LookupError:
        return None


def decode_markup(data: bytes, declared: str | None = None) -> tuple[str | None, str | None]:
    """HTML bytes to text: the HTTP charset, else <meta charset>, then UTF-8; an undeclared page
    that is not UTF-8 is windows-1252, the WHATWG encoding standard's default for the web."""
    name = codec(declared)
    if name is None:
        m = _META_CHARSET.search(data, 0, 4096)
        name = codec(m.group(1).decode("ascii")) if m else None
        if name and name.startswith(("utf-16", "utf-32")):
            name = "utf-8"  # WHATWG: a <meta> that could be read as ASCII cannot mean UTF-16
    candidates = list(dict.fromkeys([name, "utf-8"] if name else ["utf-8", "cp1252"]))
    for candidate in candidates:
        try:
            return data.decode("utf-8-sig" if candidate == "utf-8" else candidate), None
        except (UnicodeDecodeError, LookupError):  # LookupError: a bytes-to-bytes codec (hex, zip)
            continue
    _text, problem = decode_utf8(data)
    return None, f"not valid {' nor '.join(candidates)}; {problem}"


def content_type_charset(content_type: str | None) -> str | None:
    """The charset parameter of an HTTP Content-Type, or None."""
    m = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", content_type or "", re.I)
    return m.group(1) if m else None
