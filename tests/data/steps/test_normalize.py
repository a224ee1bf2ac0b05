"""Normalization: one canonical form, idempotent, code indentation untouched."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenmill.data.steps.normalize import normalize_text


def test_nfc_and_controls():
    text = "Cafe\u0301 \x00na\x07i\u0308ve\ufeff"
    out = normalize_text(text)
    assert out == "Café naïve"
    assert unicodedata.is_normalized("NFC", out)


def test_control_between_letter_and_mark_still_composes():
    # Removing the NUL brings 'e' and the combining acute together: NFC must run after removal.
    assert normalize_text("e\x00\u0301") == "é"


def test_newlines_trailing_spaces_and_blank_runs():
    text = "\n\n  a  \r\nb\t\rc\u2028d" + "\n" * 9 + "e   \n"
    assert normalize_text(text) == "  a\nb\nc\nd\n\n\ne"


def test_prose_collapses_inner_space_but_keeps_indent():
    assert normalize_text("    x  =\t\u00a0 1   y") == "    x = 1 y"


def test_code_keeps_indentation_and_alignment():
    code = "def f():\n\tif x:\n\t\treturn {'a':   1,\n\t\t        'b': 2}   \n\n\n\n\n# end\n"
    out = normalize_text(code, code=True)
    assert out == "def f():\n\tif x:\n\t\treturn {'a':   1,\n\t\t        'b': 2}\n\n\n# end"


def test_lone_surrogates_removed():
    assert normalize_text("a\ud800b") == "ab"
    normalize_text("a\ud800b").encode("utf-8")  # must be writable as UTF-8


_text = st.text(alphabet=st.sampled_from(list("ab é\u0301\t\n\r\x00\x85\u2028\ufeff\u00a0  x\u0308")), max_size=60)


@settings(max_examples=300, deadline=None, database=None)  # no .hypothesis/ in the tree
@given(_text, st.booleans())
def test_idempotent(text, code):
    once = normalize_text(text, code=code)
    assert normalize_text(once, code=code) == once
    assert unicodedata.is_normalized("NFC", once)
    assert "\r" not in once and "\n\n\n\n" not in once
    assert all(not line.endswith((" ", "\t")) for line in once.split("\n"))


# --------------------------------------------------------------------------- mojibake + step
from tokenmill.config import CurateConfig  # noqa: E402
from tokenmill.data.document import Doc  # noqa: E402
from tokenmill.data.steps.normalize import Normalize, fix_mojibake  # noqa: E402

# Real words of several scripts, broken the way a UTF-8 page read as cp1252 / Latin-1 breaks.
_CLEAN = ["café naïve", "Ångström", "Dateien aneinanderhängen", "l’été à Paris", "привет мир",
          "don’t … “quoted” – dash", "日本語のテキスト", "Đà Nẵng", "smörgåsbord ✔"]


@pytest.mark.parametrize("clean", _CLEAN)
def test_mojibake_repaired_to_the_original(clean):
    broken = clean.encode("utf-8").decode("cp1252", errors="ignore") if clean.isascii() else None
    for codec in ("cp1252", "latin-1"):
        try:
            broken = clean.encode("utf-8").decode(codec)
        except UnicodeDecodeError:
            continue  # cp1252 leaves 5 bytes undefined; latin-1 decodes everything
        assert normalize_text(broken, mojibake=True) == normalize_text(clean)
    assert broken is not None


def test_mojibake_off_keeps_the_text_and_repair_runs_before_newline_handling():
    # "Å" is C3 85; read as Latin-1 its second byte is NEL, which step 2 would turn into a newline.
    broken = "Ångström".encode("utf-8").decode("latin-1")
    assert normalize_text(broken, mojibake=True) == "Ångström"
    assert normalize_text(broken) == "Ã\nngstrÃ¶m"  # what repairing after newline handling would see


def test_only_encoding_is_repaired():
    # Curly quotes, full-width letters, ligatures, HTML entities and dashes are text, not damage.
    text = "“quotes” ＡＢＣ 全角 ﬁne &amp; x – y"
    assert fix_mojibake(text) == text
    assert normalize_text(text, mojibake=True) == normalize_text(text)


def test_clean_non_ascii_text_unchanged_by_repair():
    for clean in _CLEAN:
        assert fix_mojibake(clean) == clean


def test_step_uses_config_and_keeps_code_indentation():
    broken = "caf\u00c3\u00a9  au   lait\r\n\r\n\r\n\r\n\r\nend"
    code = "def f():\n\treturn  'caf\u00c3\u00a9'   \r\n"
    on, off = Normalize(CurateConfig()), Normalize(CurateConfig(normalize={"fix_mojibake": False}))
    assert on.name == "normalize" and on.enabled()
    docs = {}
    for key, step, text, fmt in (("on", on, broken, "text"), ("off", off, broken, "text"), ("code", on, code, "code")):
        doc = Doc(id=key, text=text, source="s", url="u", bucket="b", license="l", format=fmt)
        assert step.process(doc) is None  # normalization never removes a document
        docs[key] = doc.text
    assert docs["on"] == "café au lait\n\n\nend"
    assert docs["off"] == "caf\u00c3\u00a9 au lait\n\n\nend"
    assert docs["code"] == "def f():\n\treturn  'café'"


_moji = st.text(alphabet=st.sampled_from(list(
    "aAé \u00c3\u00a9\u00a2\u00e2\u20ac\u2122\u0153\u0303\u0301\u00ef\u00bb\u00bf\ufeff\n\r\t\x85\x81\x00")),
    max_size=40)


@settings(max_examples=200, deadline=None, database=None)
@given(_moji, st.booleans())
def test_idempotent_with_mojibake_repair(text, code):
    once = normalize_text(text, code=code, mojibake=True)
    assert normalize_text(once, code=code, mojibake=True) == once


def test_line_wise_repair_equals_ftfy_on_the_whole_text():
    # Real multilingual text (the langid fixture), every line broken as cp1252 would break it,
    # plus clean lines between: repairing only the flagged lines must equal ftfy on everything.
    import json
    from pathlib import Path

    import ftfy

    from tokenmill.data.steps import normalize as module

    fixture = Path(__file__).parents[1] / "fixtures" / "langid_samples.jsonl"
    texts = [json.loads(line)["text"] for line in fixture.read_text(encoding="utf-8").splitlines()]
    mixed = "\n".join(t.encode("utf-8").decode("cp1252", errors="replace") if i % 2 else t
                      for i, t in enumerate(texts[:40]))
    assert fix_mojibake(mixed) == ftfy.fix_text(mixed, module._FTFY)
    assert fix_mojibake(mixed) != mixed


# --------------------------------------------------------------------------- unwrapping books
from tokenmill.data.steps.normalize import WRAP_MAX, unwrap_paragraphs  # noqa: E402

WRAPPED = ("It is a truth universally acknowledged, that a single man in possession\n"
           "of a good fortune, must be in want of a wife.\n\n"
           "However little known the feelings or views of such a man may be on his\n"
           "first entering a neighbourhood, this truth is so well fixed in the minds\n"
           "of the surrounding families.")
VERSE = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\nRough winds do shake"


def test_hard_wrapped_paragraphs_become_one_line_each():
    out = unwrap_paragraphs(WRAPPED)
    assert out.split("\n\n") == [" ".join(p.split("\n")) for p in WRAPPED.split("\n\n")]
    assert out.replace("\n\n", " ").split() == WRAPPED.split()  # no word lost, none joined
    assert unwrap_paragraphs(out) == out  # idempotent, as normalize must be


def test_verse_indented_and_long_lines_are_left_alone():
    assert unwrap_paragraphs(VERSE) == VERSE  # every line starts with a capital: verse
    short = "Yours ever,\nthe writer of this long letter to you"  # a break where the next word fits
    assert unwrap_paragraphs(short) == short
    indented = "    The quoted letter starts here and it is rather long, too long\n    to be verse, yet indented."
    assert unwrap_paragraphs(indented) == indented
    long = ("x" * (WRAP_MAX + 1) + "\n") * 2
    assert unwrap_paragraphs(long) == long


def test_normalize_unwraps_only_books_declared_or_detected():
    books = CurateConfig(quality={"kinds": {"books": "books", "docs": "reference"}})
    for bucket, fmt in (("books", "text"), ("books", "jsonl"), ("web", "text")):  # web: detected (issue 41)
        doc = Doc(id="x", text=WRAPPED, source="s", url="u", bucket=bucket, license="l", format=fmt)
        Normalize(books).process(doc)
        assert doc.text == unwrap_paragraphs(WRAPPED) and doc.kind == "books", (bucket, fmt)
    for bucket, fmt, cfg in (("docs", "text", books), ("books", "code", books),
                             ("books", "text", CurateConfig(quality={"kinds": {"books": "books"}},
                                                            normalize={"unwrap_books": False}))):
        doc = Doc(id="x", text=WRAPPED, source="s", url="u", bucket=bucket, license="l", format=fmt)
        Normalize(cfg).process(doc)
        assert doc.text == WRAPPED, (bucket, fmt)
