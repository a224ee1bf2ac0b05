"""Extraction keeps a page's main text and drops its chrome, on real pydoc pages."""

from __future__ import annotations

import json
import pydoc
import textwrap

import pytest

from tokenmill.data.extract import extract, extract_main_text, parse_html, unwrap_layout_tables


@pytest.fixture(scope="module")
def json_page() -> str:
    import json as module  # already imported by the test itself: rendering it changes nothing

    return pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, "json"))


@pytest.fixture(scope="module")
def textwrap_page() -> str:
    return pydoc.html.page(pydoc.describe(textwrap), pydoc.html.document(textwrap, "textwrap"))


def test_pydoc_page_keeps_docstrings(json_page, textwrap_page):
    text = extract_main_text(json_page)
    assert text is not None
    assert "JSON (JavaScript Object Notation)" in text
    # Docstrings of functions and classes, not only the module docstring.
    assert "Serialize ``obj`` to a JSON formatted ``str``." in text
    assert "Simple JSON <https://json.org> decoder" in text
    tw = extract_main_text(textwrap_page)
    assert "Text wrapping and filling." in tw
    assert "Reformat the single paragraph in 'text' so it fits in lines of no" in tw


def test_pydoc_page_drops_chrome(json_page):
    assert "Module Reference" in json_page and json.__file__ in json_page  # present in the HTML
    text = extract_main_text(json_page)
    assert "Module Reference" not in text
    assert json.__file__ not in text
    assert not any(line.strip() in {"index", "| index |"} for line in text.split("\n"))


def test_layout_tables_keep_lines(json_page):
    # Unwrapped, a class's documentation spans many lines instead of one "| ... |" row.
    text = extract_main_text(json_page)
    assert max(len(line) for line in text.split("\n")) < 2000
    assert "- dumps(obj, *, skipkeys=False" in text or "dumps(obj, *, skipkeys=False" in text


def test_generic_page_drops_nav_and_footer():
    body = " ".join(["The river delta supports many species of birds and fish."] * 12)
    html = f"""<html><head><title>t</title></head><body>
      <nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li></ul></nav>
      <article><h1>Delta ecology</h1><p>{body}</p><p>{body}</p></article>
      <footer>Copyright 2024 Example Corp. All rights reserved.</footer></body></html>"""
    text = extract_main_text(html)
    assert "The river delta supports many species" in text
    assert "About us" not in text and "All rights reserved" not in text


def test_data_tables_stay_tables():
    tree = parse_html("<html><body><table><tr><td>a</td><td>b</td></tr></table>"
                      "<table><tr><td><p>para</p></td></tr></table></body></html>")
    unwrap_layout_tables(tree)
    assert len(tree.xpath("//table")) == 1  # the one with a <p> was layout


@pytest.mark.parametrize("html", ["", "   ", "<html><body></body></html>", "<html><script>x=1</script></html>"])
def test_no_content_is_rejected(html):
    text, rejection = extract(html)
    assert text is None
    assert rejection.step == "extract" and rejection.rule == "no_content"


def test_xml_declaration_is_accepted():
    body = " ".join(["Plain words about a subject, written as a paragraph."] * 10)
    html = f'<?xml version="1.0" encoding="utf-8"?><html><body><p>{body}</p></body></html>'
    text, rejection = extract(html)
    assert rejection is None and "Plain words about a subject" in text
