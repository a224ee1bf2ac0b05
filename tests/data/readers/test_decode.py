"""Bytes to text: the order BOM > UTF-8 > declared charset > detector, and what is recorded."""

from __future__ import annotations

import codecs

from tokenmill.data.document import Encoding
from tokenmill.data.readers.decode import binary_problem, decode, markup_charset
from tests.data.readers.helpers import passages


def test_order_bom_utf8_declared_detected():
    de = passages()["de"]
    assert decode(codecs.BOM_UTF8 + de.encode()).encoding == Encoding("utf-8", 1.0, "bom")
    # valid UTF-8 wins over a declaration that says otherwise (a mislabelled page)
    assert decode(de.encode(), declared="iso-8859-1") == decode(de.encode())
    assert decode(de.encode()).encoding == Encoding("utf-8", 1.0, "utf-8")
    # a declared charset that decodes the bytes is taken as declared, before any guess
    ru = passages()["ru"]
    got = decode(ru.encode("koi8-r"), declared="KOI8-R")
    assert got.text == ru and got.encoding == Encoding("koi8-r", 1.0, "declared")
    # one that does not decode them is passed over for the detector
    got = decode(ru.encode("cp1251"), declared="utf-8")
    assert got.text == ru and got.encoding.method == "detected" and got.encoding.name == "cp1251"


def test_web_latin1_labels_read_as_windows_1252():
    """WHATWG: ISO-8859-1 and ASCII labels mean windows-1252 (curly quotes and dashes in 0x80-0x9F)."""
    data = "„Grüße“ – naïve".encode("cp1252")
    got = decode(data, declared="ISO-8859-1")
    assert got.text == "„Grüße“ – naïve" and got.encoding == Encoding("cp1252", 1.0, "declared")
    # a byte windows-1252 leaves undefined: the declared Latin-1 itself
    assert decode(b"caf\xe9 \x81", declared="latin1").encoding == Encoding("iso8859-1", 1.0, "declared")


def test_markup_declarations():
    assert markup_charset(b'<html><head><meta charset="Shift_JIS">') == "Shift_JIS"
    assert markup_charset(b'<meta http-equiv="Content-Type" content="text/html; charset=euc-jp">') == "euc-jp"
    assert markup_charset(b"<?xml version='1.0' encoding='ISO-8859-15'?><html>") == "ISO-8859-15"
    assert markup_charset(b"<html><body>no declaration</body></html>") is None
    fr = passages()["fr"]
    page = f'<html><head><meta charset="utf-16"></head><body>{fr}</body></html>'
    # a <meta> readable as ASCII cannot mean UTF-16 (WHATWG): not taken; the detector decides
    got = decode(page.encode("latin-1"), markup=True)
    assert got.text == page and got.encoding.method == "detected"
    # a declaration is only read in markup
    assert decode(b'<meta charset="koi8-r">\xf0\xd2\xc9\xd7\xc5\xd4').encoding.method == "detected"


def test_unknown_charset_and_nothing_decodes():
    got = decode(bytes(range(0x80, 0x100)) * 8, declared="x-no-such-charset")
    assert got.text is None and got.encoding is None
    assert "declared charset 'x-no-such-charset' is unknown" in got.problem
    assert got.problem.startswith("no encoding decodes it cleanly: ") and "not valid UTF-8 at byte 0" in got.problem


def test_wide_text_is_not_binary():
    text = passages()["zh"].encode("utf-16-le")
    assert binary_problem(codecs.BOM_UTF16_LE + text) is None
    assert binary_problem(text, declared="UTF-16LE") is None  # declared by the protocol (HTTP)
    assert binary_problem("abc".encode("utf-16-le")).startswith("binary: NUL byte")
    assert binary_problem(b"\x00\x01\x02 nothing wide") is not None
