"""HTML main-content extraction with trafilatura.

Settings were chosen by measurement on 24 pydoc pages of the demo corpus (json, os, re, ...),
counting how many public functions' and classes' docstrings survive and whether the page
chrome (index link, source path, "Module Reference") does:

  trafilatura defaults                      58% of docstrings, chrome kept, 40k-char lines
  favor_recall                              86% of docstrings, chrome kept, 40k-char lines
  favor_recall + layout tables unwrapped    81% of docstrings, chrome kept, lines <= 4k chars
  ... + chrome pruned (what runs here)      81% of docstrings, chrome gone

trafilatura flattens every table row into one "| a | b |" line, which on pages laid out with
tables (pydoc, old sites) glues a whole class's documentation into a single line of pipes.
Tables that contain block content (paragraphs, definition lists, nested tables) are layout,
not data, so they are turned into divs first; data tables (cells of inline text) are kept.
trafilatura's own `deduplicate` is off: its cache is per process, which would make the output
depend on which worker saw which page first.
"""

from __future__ import annotations

import logging

import lxml.etree
import lxml.html
import trafilatura

from tokenmill.data.document import Rejection, format_value, text_bytes

VERSION = f"1+trafilatura-{trafilatura.__version__}"

# Page chrome that trafilatura's generic rules miss: pydoc's header bar (index link, source
# file path, "Module Reference" link). nav/header/footer/aside are already dropped by trafilatura.
CHROME_XPATHS: tuple[str, ...] = ("//table[@class='heading']",)

# Block-level content inside a table marks the table as page layout.
_LAYOUT_XPATH = ".//p|.//dl|.//pre|.//ul|.//ol|.//table|.//blockquote|.//h1|.//h2|.//h3|.//h4"
_TABLE_TAGS = ("tr", "td", "th", "tbody", "thead", "tfoot", "caption")

# trafilatura logs every empty page at WARNING; the rejection already records it.
logging.getLogger("trafilatura").setLevel(logging.CRITICAL)

_PARSER = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)


def parse_html(html: str) -> lxml.html.HtmlElement | None:
    """Parse as UTF-8 bytes: str input with an XML encoding declaration makes lxml refuse it."""
    try:
        return lxml.html.document_fromstring(html.encode("utf-8", "replace"), parser=_PARSER)
    except (lxml.etree.ParserError, ValueError):
        return None


def drop_chrome(tree: lxml.html.HtmlElement) -> None:
    for xpath in CHROME_XPATHS:
        for element in tree.xpath(xpath):
            element.drop_tree()


def unwrap_layout_tables(tree: lxml.html.HtmlElement) -> None:
    """Turn tables holding block content into divs, so their text keeps its own lines."""
    for table in list(tree.iter("table")):
        if not table.xpath(_LAYOUT_XPATH):
            continue
        # Only this table's own rows and cells: a nested data table keeps its structure.
        own = [el for el in table.iter(*_TABLE_TAGS) if next(el.iterancestors("table"), None) is table]
        for element in (table, *own):
            element.tag = "div"


def extract_main_text(html: str) -> str | None:
    """The main content of a page as plain text with line breaks; None when nothing is found."""
    tree = parse_html(html)
    if tree is None:
        return None
    drop_chrome(tree)
    unwrap_layout_tables(tree)
    text = trafilatura.extract(
        tree, favor_recall=True, include_tables=True, include_comments=False,
        include_links=False, include_images=False, deduplicate=False, with_metadata=False,
    )
    # &nbsp; is a rendering hint (pydoc writes every docstring space as one); text wants spaces.
    return text.replace("\xa0", " ") if text else None


def extract(html: str) -> tuple[str | None, Rejection | None]:
    """The extract step: (text, None), or (None, rejection with rule 'no_content')."""
    text = extract_main_text(html)
    if text is None or not text.strip():
        n = text_bytes(html)
        return None, Rejection("extract", "no_content", format_value(n),
                               f"no main content found in {n} bytes of HTML")
    return text, None
