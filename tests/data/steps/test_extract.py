"""Extraction keeps a page's main text and drops its chrome; the fallback rescues empty pages."""

from __future__ import annotations

import json
import pydoc
import textwrap
from pathlib import Path

import pytest
from resiliparse.extract.html2text import extract_plain_text

from tokenmill.config import CURATE_STEPS, CurateConfig, ExtractConfig
from tokenmill.data.steps import extract as ex
from tokenmill.data.document import Doc
from tokenmill.data.steps.extract import (Extract, extract, extract_fallback, extract_main_text, extract_primary,
                                    parse_html, unwrap_layout_tables)

WEB_HTML = Path("/work/real_corpora/web_html")
needs_corpora = pytest.mark.skipif(not WEB_HTML.is_dir(),
                                   reason="real corpora not installed (shared/corpora/fetch_real_corpora.sh)")

# Navigation and footer strings of Sphinx and DocBook pages: none may survive extraction.
NAV_STRINGS = ("Table of Contents", "Previous topic", "Next topic", "This Page", "Show Source",
               "Report a Bug", "Navigation", "Quick search", "© Copyright", "Created using Sphinx",
               "Last updated on", "modules |", "Download the ebook", "Product Site")

BODY = " ".join(["The river delta supports many species of birds and fish, and its wetlands filter the water."] * 4)

# A small Sphinx-like page (classic theme markup) and a DocBook-like chapter, written inline so
# the test runs everywhere.
SPHINX_PAGE = f"""<!DOCTYPE html><html><head><title>Delta ecology</title></head><body>
<div class="related" role="navigation"><h3>Navigation</h3><ul><li><a href="genindex.html">index</a></li>
  <li><a href="py-modindex.html">modules</a> |</li><li><a href="next.html">next</a> |</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper"><div class="body" role="main">
  <section id="delta"><h1>Delta ecology<a class="headerlink" href="#delta">¶</a></h1>
  <p>{BODY}</p><p>Seasonal floods renew the soil every spring, and the birds follow the fish upstream.</p>
  </section></div></div></div>
  <div class="sphinxsidebar" role="navigation"><div class="sphinxsidebarwrapper">
    <h3><a href="index.html">Table of Contents</a></h3><ul><li>Delta ecology</li></ul>
    <h4>Previous topic</h4><p>Rivers</p><h4>Next topic</h4><p>Estuaries</p>
    <h3>This Page</h3><ul><li><a href="bugs.html">Report a Bug</a></li><li>Show Source</li></ul>
    <h3>Quick search</h3><form><input type="text" name="q"/></form></div></div></div>
<div class="footer">© Copyright 2001-2024, Example Foundation. Last updated on May 01, 2024.
  Created using Sphinx 5.3.0.</div></body></html>"""

DOCBOOK_PAGE = f"""<html><body>
<div class="navheader"><table><tr><td><a href="prev.html">Prev</a></td><td>The Handbook</td>
  <td><a href="next.html">Next</a></td></tr></table></div>
<div class="chapter"><div class="titlepage"><h1>Chapter 6. Delta ecology</h1></div>
  <div class="toc"><p><b>Table of Contents</b></p><dl><dt>6.1. Birds</dt><dt>6.2. Fish</dt></dl></div>
  <p>{BODY}</p></div>
<div class="navfooter"><ul><li>Prev 5.5. Rivers</li><li>Up</li><li>Home</li><li>Next 6.2. Fish</li></ul></div>
</body></html>"""


def _nav_left(text: str) -> list[str]:
    return [s for s in NAV_STRINGS if s in text]


# --------------------------------------------------------------------------- inline pages
@pytest.mark.parametrize("page", [SPHINX_PAGE, DOCBOOK_PAGE], ids=["sphinx", "docbook"])
def test_inline_pages_keep_body_and_drop_chrome(page):
    plain = extract_plain_text(page)  # no main-content detection: the chrome is there
    assert _nav_left(plain)
    text = extract_main_text(page)
    assert "The river delta supports many species of birds and fish" in text
    assert _nav_left(text) == []
    assert "¶" not in text and "6.1. Birds" not in text  # permalinks and the DocBook TOC
    assert not any(line.strip() in {"Prev", "Next", "Up", "Home", "index"} for line in text.split("\n"))


def test_generic_page_drops_nav_and_footer():
    html = f"""<html><head><title>t</title></head><body>
      <nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li></ul></nav>
      <article><h1>Delta ecology</h1><p>{BODY}</p><p>{BODY}</p></article>
      <footer>Copyright 2024 Example Corp. All rights reserved.</footer></body></html>"""
    text = extract_main_text(html)
    assert "The river delta supports many species" in text
    assert "About us" not in text and "All rights reserved" not in text


# --------------------------------------------------------------------------- real pages
@needs_corpora
def test_real_sphinx_page_drops_navigation():
    html = (WEB_HTML / "python3.11-doc/library/textwrap.html").read_text(encoding="utf-8")
    plain = extract_plain_text(html)
    assert len(_nav_left(plain)) >= 10  # the page really carries Sphinx's chrome
    text = extract_main_text(html)
    assert _nav_left(text) == []
    assert "The textwrap module provides some convenience functions" in text
    assert "Wraps the single paragraph in text (a string)" in text
    assert text.count("\n") > 50  # paragraphs and code keep their own lines


@needs_corpora
def test_real_docbook_page_drops_toc_and_nav_bars():
    html = (WEB_HTML / "debian-handbook/en/apt.html").read_text(encoding="utf-8")
    plain = extract_plain_text(html)
    assert "6.2.1. Initialization" in plain and "Download the ebook" in plain  # TOC and header
    text = extract_main_text(html)
    assert "6.2.1. Initialization" not in text and _nav_left(text) == []
    assert "APT is the abbreviation for Advanced Packaging Tool." in text


@needs_corpora
def test_real_page_where_primary_finds_nothing_uses_fallback():
    html = (WEB_HTML / "python3.11-doc/copyright.html").read_text(encoding="utf-8")
    assert extract_primary(html).strip() == ""
    text = extract_main_text(html)
    assert text is not None and "Python Software Foundation" in text
    assert extract(html, fallback=False)[1].rule == "no_content"


# --------------------------------------------------------------------------- fallback logic
def test_fallback_used_only_when_primary_yields_nothing(monkeypatch):
    calls: list[str] = []

    def fallback(html: str) -> str:
        calls.append(html)
        return "fallback text"

    monkeypatch.setattr(ex, "extract_fallback", fallback)
    monkeypatch.setattr(ex, "extract_primary", lambda html: " \n | \n ")  # chrome leftovers only
    assert extract_main_text("<p>x</p>") == "fallback text" and len(calls) == 1
    monkeypatch.setattr(ex, "extract_primary", lambda html: "short title")
    assert extract_main_text("<p>x</p>") == "short title" and len(calls) == 1  # not tried
    monkeypatch.setattr(ex, "extract_primary", lambda html: "")
    assert extract_main_text("<p>x</p>", fallback=False) is None and len(calls) == 1


def test_both_failing_is_no_content(monkeypatch):
    monkeypatch.setattr(ex, "extract_primary", lambda html: "")
    monkeypatch.setattr(ex, "extract_fallback", lambda html: "  ")
    html = "<html>" + "é" * 10 + "</html>"
    text, rejection = extract(html)
    assert text is None
    assert (rejection.step, rejection.rule, rejection.value) == ("extract", "no_content", "33")  # bytes
    assert "resiliparse and trafilatura" in rejection.reason


def test_primary_parse_error_means_nothing(monkeypatch):
    def boom(*args, **kwargs):
        raise ValueError("parser exploded")

    monkeypatch.setattr(ex, "extract_plain_text", boom)
    assert extract_primary("<p>words</p>") == ""
    body = " ".join(["Plain words about a subject, written as a paragraph."] * 10)
    assert "Plain words about a subject" in extract_main_text(f"<html><body><p>{body}</p></body></html>")


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
    assert "Plain words about a subject" in extract_fallback(html)


# --------------------------------------------------------------------------- pydoc pages
@pytest.fixture(scope="module")
def json_page() -> str:
    import json as module  # already imported by the test itself: rendering it changes nothing

    return pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, "json"))


@pytest.fixture(scope="module")
def textwrap_page() -> str:
    return pydoc.html.page(pydoc.describe(textwrap), pydoc.html.document(textwrap, "textwrap"))


def test_pydoc_page_keeps_docstrings(json_page, textwrap_page):
    text = extract_main_text(json_page)
    assert "JSON (JavaScript Object Notation)" in text
    # Docstrings of functions and classes, not only the module docstring.
    assert "Serialize ``obj`` to a JSON formatted ``str``." in text
    assert "Simple JSON <https://json.org> decoder" in text
    tw = extract_main_text(textwrap_page)
    assert "Text wrapping and filling." in tw
    assert "Reformat the single paragraph in 'text' so it fits in lines of no" in tw


def test_pydoc_page_drops_chrome(json_page):
    assert "Module Reference" in json_page and json.__file__ in json_page  # present in the HTML
    for text in (extract_main_text(json_page), extract_fallback(json_page)):
        assert "Module Reference" not in text
        assert json.__file__ not in text
        assert not any(line.strip() in {"index", "| index |"} for line in text.split("\n"))


def test_pydoc_lines_stay_short(json_page):
    # A class's documentation spans many lines instead of one "| ... |" row, on both paths.
    for text in (extract_main_text(json_page), extract_fallback(json_page)):
        assert max(len(line) for line in text.split("\n")) < 2000
        assert "dumps(obj, *, skipkeys=False" in text


def test_data_tables_stay_tables():
    tree = parse_html("<html><body><table><tr><td>a</td><td>b</td></tr></table>"
                      "<table><tr><td><p>para</p></td></tr></table></body></html>")
    unwrap_layout_tables(tree)
    assert len(tree.xpath("//table")) == 1  # the one with a <p> was layout


# --------------------------------------------------------------------------- the step
def _doc(text: str, fmt: str = "html") -> Doc:
    return Doc(id="x", text=text, source="s", url="u", bucket="web", license="l", format=fmt)


def test_step_contract():
    assert Extract.name == "extract" and Extract.name in CURATE_STEPS
    assert Extract.version.startswith("4+resiliparse-")
    step = Extract(CurateConfig())
    assert step.enabled()
    assert step.applies(_doc(SPHINX_PAGE)) and not step.applies(_doc("plain", "text"))
    doc = _doc(SPHINX_PAGE)
    assert step.process(doc) is None
    assert doc.text.startswith("Delta ecology") and _nav_left(doc.text) == []


def test_step_follows_fallback_switch(monkeypatch):
    monkeypatch.setattr(ex, "extract_primary", lambda html: "")
    monkeypatch.setattr(ex, "extract_fallback", lambda html: "from the fallback")
    doc = _doc(SPHINX_PAGE)
    assert Extract(CurateConfig()).process(doc) is None and doc.text == "from the fallback"
    off = Extract(CurateConfig(extract=ExtractConfig(fallback=False)))
    doc = _doc(SPHINX_PAGE)
    rejection = off.process(doc)
    assert rejection.rule == "no_content" and doc.text == SPHINX_PAGE  # a rejected doc keeps its input


# --------------------------------------------------------------------------- manuals' pages
DOCBOOK_CONTENTS = """<html><head><meta name="generator" content="DocBook XSL Stylesheets Vsnapshot">
<title>Chapter 7. Delta ecology</title></head><body>
<div class="navheader"><table><tr><td><a href="prev.html">Prev</a></td><td><a href="next.html">Next</a></td></tr></table></div>
<div class="chapter"><div class="titlepage"><h1>Chapter 7. Delta ecology</h1></div>
  <div class="toc"><p><b>Table of Contents</b></p><dl>
  <dt>7.1. Birds of the wetlands</dt><dt>7.2. Fish that follow the floods</dt><dt>7.3. Seasonal renewal of the soil</dt>
  <dt>7.4. How the reeds filter the water</dt><dt>7.5. Where to read more about the delta</dt></dl></div></div>
<div class="navfooter"><ul><li>Prev</li><li>Up</li><li>Home</li><li>Next</li></ul></div></body></html>"""


@pytest.mark.parametrize(
    "head, found",
    [
        ('<meta name="generator" content="DocBook XSL Stylesheets Vsnapshot">', "DocBook XSL Stylesheets Vsnapshot"),
        ("<meta content='Docutils 0.19: https://docutils.sourceforge.io/' name='generator' />", "Docutils 0.19: https://docutils.sourceforge.io/"),
        ('<META NAME="Generator" CONTENT="texi2any">', "texi2any"),
        ('<meta xmlns:d="http://docbook.org/ns/docbook" name="generator" content="publican v4.3.2" />', "publican v4.3.2"),
        ('<link rel="index" title="Index" href="../../genindex.html" />', "Sphinx (a genindex.html link)"),
        ('<link rel="search" title="Search" href="../search.html" />', None),  # many sites have a search page
        ('<meta name="generator" content="WordPress 6.4.2">', None),  # a site builder, not a manual
        ('<meta name="description" content="Sphinx tutorial">', None),  # not the generator tag
    ],
)
def test_doc_generator_reads_the_meta_tag(head, found):
    assert ex.doc_generator(f"<html><head>{head}</head><body><p>x</p></body></html>") == found


def test_doc_generator_looks_only_at_the_head():
    late = "<html><body>" + "<p>filler</p>" * 3000 + '<meta name="generator" content="Doxygen 1.9.8"></body></html>'
    assert len(late) > ex.GENERATOR_HEAD_CHARS and ex.doc_generator(late) is None


def test_manual_contents_page_keeps_its_contents_and_is_reference():
    doc = _doc(DOCBOOK_CONTENTS, "html")
    assert Extract(CurateConfig()).process(doc) is None
    assert doc.text.startswith("Chapter 7. Delta ecology") and "7.4. How the reeds filter the water" in doc.text
    assert "Prev" not in doc.text  # the navigation bars still go
    assert doc.kind == "reference"
    assert ("kind", "reference (page generator: DocBook XSL Stylesheets Vsnapshot)") in doc.lineage
    assert any(step == "extract" and note.startswith("table of contents kept") for step, note in doc.lineage)


def test_page_without_a_generator_still_drops_its_contents():
    doc = _doc(DOCBOOK_CONTENTS.replace('name="generator"', 'name="author"'), "html")
    assert Extract(CurateConfig()).process(doc) is None
    assert doc.text == "Chapter 7. Delta ecology" and doc.kind is None


def test_declared_kind_and_the_switch_win_over_the_generator():
    declared = CurateConfig.model_validate({"quality": {"kinds": {"web": "prose"}}})
    doc = _doc(DOCBOOK_CONTENTS, "html")
    assert Extract(declared).process(doc) is None and doc.kind is None  # the bucket's kind decides later
    off = CurateConfig(extract=ExtractConfig(doc_generators=False))
    doc = _doc(DOCBOOK_CONTENTS, "html")
    assert Extract(off).process(doc) is None and doc.text == "Chapter 7. Delta ecology" and doc.kind is None


def test_long_manual_page_is_not_given_its_contents():
    body = "<p>" + BODY + "</p>"
    page = DOCBOOK_CONTENTS.replace("</dl></div></div>", "</dl></div>" + body + "</div>")
    doc = _doc(page, "html")
    assert Extract(CurateConfig()).process(doc) is None
    assert "7.4. How the reeds" not in doc.text and BODY in doc.text and doc.kind == "reference"


@needs_corpora
def test_real_installation_guide_chapter_page_keeps_its_contents():
    html = (WEB_HTML / "installation-guide-amd64/en/ch07.html").read_text(encoding="utf-8")
    assert extract_main_text(html) == "Chapter 7. Booting Into Your New Debian System"
    doc = _doc(html, "html")
    assert Extract(CurateConfig()).process(doc) is None
    assert "7.2. Mounting encrypted volumes" in doc.text and doc.kind == "reference"


def test_doc_generator_reads_one_bounded_tag_at_a_time():
    # A tag longer than TAG_CHARS is not read (the work per tag is bounded) ...
    padded = '<meta name="generator" ' + "x" * (ex.TAG_CHARS + 1) + ' content="DocBook XSL">'
    assert ex.doc_generator(padded) is None
    # ... and a head of unclosed, repeated tags is read tag by tag, not with nested backtracking
    # (one pattern with two unbounded attribute runs took 39 s on this head).
    hostile = "<link rel=index " * 1000 + "x" * 10_000
    assert ex.doc_generator(hostile) is None
    assert ex.doc_generator(hostile + '<link rel="index" href="genindex.html">') is None  # past the head window
    assert ex.doc_generator('<link rel="index" href="genindex.html">' + hostile) == "Sphinx (a genindex.html link)"
