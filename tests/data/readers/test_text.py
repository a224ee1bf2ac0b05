"""Plain text files: UTF-8 (BOM dropped), legacy encodings detected, UTF-16/32 by BOM, undecodable and too large files."""

from __future__ import annotations

import codecs
import random

import pytest

from tokenmill.data.document import Encoding
from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source, passages


def test_undecodable_and_too_large(tmp_path):
    # issue 19: bytes that are not UTF-8 are decoded when an encoding reads them cleanly (here
    # windows-1252, with the confidence of a guess on 11 bytes); only what none reads is rejected
    (tmp_path / "bad.txt").write_bytes(b"ok \xff\xfe bytes")
    (tmp_path / "big.txt").write_text("x" * 200)
    rng = random.Random(0)  # high bytes at random: no NUL, no control byte, no encoding's text
    (tmp_path / "noise.txt").write_bytes(bytes(rng.randrange(0x80, 0x100) for _ in range(3000)))
    records = {r.locator: r for r in read_source(files_source(tmp_path), 10_000)}
    assert records["bad.txt"].text == "ok ÿþ bytes" and records["bad.txt"].problem is None
    assert records["bad.txt"].encoding == Encoding("cp1252", 0.8, "detected")
    noise = records["noise.txt"].problem
    assert noise.rule == "undecodable" and noise.value == "3000" and records["noise.txt"].encoding is None
    assert str(tmp_path / "noise.txt") in noise.reason and "no encoding decodes it cleanly" in noise.reason
    assert "not valid UTF-8 at byte 0" in noise.reason and "charset-normalizer" in noise.reason
    records = {r.locator: r for r in read_source(files_source(tmp_path), 100)}
    assert records["big.txt"].problem.rule == "too_large" and records["big.txt"].problem.value == "200"


def test_utf8_bom_is_dropped(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffhello".encode("utf-8"))
    assert [r.text for r in read_source(files_source(tmp_path), 100)] == ["hello"]
    assert next(read_source(files_source(tmp_path), 100)).encoding == Encoding("utf-8", 1.0, "bom")


# --------------------------------------------------------------------------- issue 19: legacy encodings
# Real multilingual prose, each passage written in an encoding real archives carry; the
# encoding the detector may name for it (Shift-JIS reads as its superset cp932; ISO-8859-1 text
# as windows-1252, which decodes it to the same characters).
LEGACY = [("fr", "latin-1", {"cp1252", "latin-1"}), ("de", "cp1252", {"cp1252"}),
          ("es", "latin-1", {"cp1252", "latin-1"}), ("ja", "shift_jis", {"shift_jis", "cp932"}),
          ("zh", "gb18030", {"gb18030"}), ("ru", "cp1251", {"cp1251"})]


@pytest.mark.parametrize(("lang", "codec", "names"), LEGACY, ids=[f"{lang}-{c}" for lang, c, _ in LEGACY])
def test_legacy_encodings_are_detected(tmp_path, lang, codec, names):
    text = passages()[lang]
    (tmp_path / f"{lang}.txt").write_bytes(text.encode(codec))
    [record] = read_source(files_source(tmp_path), 100_000)
    assert record.problem is None and record.text == text
    assert record.encoding.name in names and record.encoding.method == "detected"
    assert 0.9 <= record.encoding.confidence <= 1.0


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le"])
def test_utf16_and_utf32_by_byte_order_mark(tmp_path, codec):
    text = passages()["ja"] + "\n" + passages()["de"]
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE, "utf-32-le": codecs.BOM_UTF32_LE}[codec]
    (tmp_path / "wide.txt").write_bytes(bom + text.encode(codec))  # NUL bytes, but text: not "binary"
    [record] = read_source(files_source(tmp_path), 100_000)
    assert record.problem is None and record.text == text
    assert record.encoding == Encoding(codec, 1.0, "bom")


def test_utf8_is_the_fast_path(tmp_path, monkeypatch):
    """Valid UTF-8 never reaches the detector, and is recorded as UTF-8 with confidence 1."""
    from tokenmill.data.readers import decode as decode_module

    def no_detector(data):
        raise AssertionError("the detector ran on UTF-8 input")

    monkeypatch.setattr(decode_module, "detect", no_detector)
    text = "\n\n".join(passages().values())
    (tmp_path / "all.txt").write_text(text, encoding="utf-8")
    [record] = read_source(files_source(tmp_path), 100_000)
    assert record.text == text and record.encoding == Encoding("utf-8", 1.0, "utf-8")
