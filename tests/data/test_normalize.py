"""Normalization: one canonical form, idempotent, code indentation untouched."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenmill.data.normalize import normalize_text


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
