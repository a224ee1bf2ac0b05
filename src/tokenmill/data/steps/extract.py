"""HTML main-content extraction: resiliparse first, trafilatura as the fallback.

Primary: resiliparse's `extract_plain_text(main_content=True)` (a C++ DOM walk with
main-content heuristics). Fallback (`ExtractConfig.fallback`): trafilatura, tried only when the
primary yields nothing usable (no letter or digit at all, or a parse error). It is not tried
when the primary finds a little text: on these corpora such pages are tables of contents and
indexes (DocBook chapter pages, Sphinx genindex-*.html: resiliparse 9-150 characters of title,
trafilatura 0.2-80k characters of link lists), which the length floor should remove, not the
fallback resurrect. When both find nothing the page is removed with rule `no_content`.

Measured here on real documentation HTML (shared/corpora/fetch_real_corpora.sh; 25 random
pages per collection, 15 for debian-reference; one core of a shared machine): docs/s, and the
nav/footer lines that survive ("Table of Contents", "Previous topic", "Next", "Show Source",
"© Copyright", "Created using Sphinx", ...; exact or prefix line matches):

  collection        this module (primary)  resiliparse bare   trafilatura (datatrove)  trafilatura (v1)
  python3.11-doc    328 docs/s, 0          292, 0             16.4, 0                  23.8, 0
  debian-handbook   1645, 0                1178, 0            70.7, 3 (copyright)      125, 4
  debian-reference  276, 0                 240, 15 (TOC)      10.3, 1                  16.1, 2
  install-guide     4207, 0                2295, 5 (TOC)      170, 0                   241, 5
  maint-guide       623, 0                 516, 2 (TOC)       30.0, 5                  47.3, 5
  linux-doc         986, 0                 883, 0             56.8, 1                  99.2, 0

The primary runs 17-27x faster than trafilatura as datatrove calls it. Bare resiliparse drops
the Sphinx sidebar, header and footer by itself but keeps DocBook tables of contents and
navigation headers; the `SKIP_SELECTORS` below (the chrome classes of DocBook, Sphinx and
pydoc) remove them and make the walk faster (less to render). On 24 pydoc pages it keeps 91%
of public docstrings (trafilatura with the v1 layout-table unwrapping: 87%), with no line over
420 characters, so the v1 layout-table unwrapping is needed only on the trafilatura path,
where it is kept. Of the 6,209 pages of web_html, resiliparse finds nothing on 6 (Sphinx
toctree pages and a copyright page): those are what the fallback is for.
A page nested deeper than `curate.limits.max_html_depth` never reaches either extractor
(data.limits: resiliparse's walk is worse than quadratic in depth; trafilatura finds nothing).
trafilatura's own `deduplicate` stays off: its cache is per process, which would make the
output depend on which worker saw which page first.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re

import lxml.etree
import lxml.html
import trafilatura
from resiliparse.extract.html2text import extract_plain_text

from tokenmill.data.document import Doc, Rejection, format_value, text_bytes
from tokenmill.data.limits import depth_rejection
from tokenmill.data.step import DocStep
from tokenmill.data.steps.text_kinds import KIND_STEP

VERSION = f"4+resiliparse-{importlib.metadata.version('resiliparse')}+trafilatura-{trafilatura.__version__}"

# Page chrome of the documentation generators the corpora are made of, skipped by the primary
# extractor: pydoc's header bar; DocBook's tables of contents and prev/up/next bars; Sphinx's
# sidebar, breadcrumb bars, footer and the "¶" permalinks after every heading.
SKIP_SELECTORS: tuple[str, ...] = (
    "table.heading",
    "div.toc",
    "div.navheader",
    "div.navfooter",
    "div.sphinxsidebar",
    "div.related",
    "div.footer",
    "a.headerlink",
)
_SKIP = [", ".join(SKIP_SELECTORS)]  # one selector list: one DOM match pass instead of eight
# A manual's contents page: the same chrome skipped but for the table of contents.
_SKIP_KEEP_TOC = [", ".join(s for s in SKIP_SELECTORS if s != "div.toc")]

# Documentation toolchains as they name themselves in <meta name="generator" content="...">.
# A page one of them made is a page of a manual, whatever its text looks like: its chapter pages
# are lists, its reference pages tables and code. DocBook XSL, Docutils (Sphinx) and Publican (a
# DocBook publisher: the Debian handbook) made the manuals of the real corpora; the others are the
# toolchains of other documentation sites (AsciiDoc / Asciidoctor, Texinfo's texi2any and
# makeinfo, Doxygen, javadoc, MkDocs, rustdoc, GTK-Doc). General site builders (WordPress, Hugo,
# Jekyll, pandoc) are not evidence of a manual.
DOC_GENERATORS = re.compile(
    r"\b(?:DocBook|Docutils|Sphinx|Publican|AsciiDoc|Asciidoctor|texi2any|makeinfo|Doxygen|javadoc|MkDocs|rustdoc|GTK-Doc)\b",
    re.IGNORECASE,
)
# Sphinx names no generator in its recent themes, but every page it writes links its general index
# in the head (<link rel="index" title="Index" href="../genindex.html">): Django's documentation.
GENERATOR_HEAD_CHARS = 16_384  # the generator is named in the page's head: only its start is searched
# One tag at a time, each at most TAG_CHARS long, then its attributes: a single pattern with two
# unbounded attribute runs backtracks quadratically (a head of 1,000 "<link rel=index " took 39 s).
TAG_CHARS = 1024
_TAG = re.compile(r"<(meta|link)\b([^<>]{0,%d})>" % TAG_CHARS, re.IGNORECASE)
_GENERATOR_NAME = re.compile(r"\bname\s*=\s*[\"']?generator\b", re.IGNORECASE)
_INDEX_REL = re.compile(r"\brel\s*=\s*[\"']?index\b", re.IGNORECASE)
_GENINDEX = re.compile(r"\bgenindex\.html\b", re.IGNORECASE)
_CONTENT_ATTR = re.compile(r"\bcontent\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.IGNORECASE)

# Page chrome that trafilatura's generic rules miss (fallback path): pydoc's header bar.
CHROME_XPATHS: tuple[str, ...] = ("//table[@class='heading']",)

# Block-level content inside a table marks the table as page layout.
_LAYOUT_XPATH = ".//p|.//dl|.//pre|.//ul|.//ol|.//table|.//blockquote|.//h1|.//h2|.//h3|.//h4"
_TABLE_TAGS = ("tr", "td", "th", "tbody", "thead", "tfoot", "caption")

# "Usable" text has at least one letter or digit: "|" or "»" alone is leftover chrome.
_USABLE = re.compile(r"\w")

# trafilatura logs every empty page at WARNING; the rejection already records it.
logging.getLogger("trafilatura").setLevel(logging.CRITICAL)

_PARSER = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)


# --------------------------------------------------------------------------- primary
def doc_generator(html: str) -> str | None:
    """The documentation toolchain a page names as its generator (`DOC_GENERATORS`), or None."""
    sphinx_index = False
    for tag in _TAG.finditer(html, 0, GENERATOR_HEAD_CHARS):
        name, attrs = tag.group(1).lower(), tag.group(2)
        if name == "meta" and _GENERATOR_NAME.search(attrs):
            content = _CONTENT_ATTR.search(attrs)
            value = (content.group(1) or content.group(2) or "") if content else ""
            if DOC_GENERATORS.search(value):
                return " ".join(value.split())[:80]
        elif name == "link" and _INDEX_REL.search(attrs) and _GENINDEX.search(attrs):
            sphinx_index = True
    return "Sphinx (a genindex.html link)" if sphinx_index else None


def extract_primary(html: str, keep_toc: bool = False) -> str:
    """resiliparse main-content text ('' when it finds none or cannot parse the page); with
    keep_toc, a DocBook table of contents is kept."""
    try:
        # comments=True: with False, resiliparse drops every element whose class or id says
        # "comment", which on these corpora removed documentation *about* comments (10 of 833
        # pages: Python's "Comments" lexical section, the whole of linux-doc's kernel-doc.html).
        text = extract_plain_text(
            html,
            main_content=True,
            alt_texts=False,
            links=False,
            form_fields=False,
            noscript=False,
            comments=True,
            skip_elements=_SKIP_KEEP_TOC if keep_toc else _SKIP,
        )
    except Exception:  # noqa: BLE001 - a parser error on one page means "nothing usable"
        return ""
    # &nbsp; is a rendering hint (pydoc writes every docstring space as one); text wants spaces.
    return text.replace("\xa0", " ")


# --------------------------------------------------------------------------- fallback
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
    """Turn tables holding block content into divs, so their text keeps its own lines.

    trafilatura flattens every table row into one "| a | b |" line, which on pages laid out
    with tables (pydoc, old sites) glues a whole class's documentation into one line.
    """
    for table in list(tree.iter("table")):
        if not table.xpath(_LAYOUT_XPATH):
            continue
        # Only this table's own rows and cells: a nested data table keeps its structure.
        own = [el for el in table.iter(*_TABLE_TAGS) if next(el.iterancestors("table"), None) is table]
        for element in (table, *own):
            element.tag = "div"


def extract_fallback(html: str) -> str:
    """trafilatura (favor_recall, layout tables unwrapped, pydoc chrome pruned); '' when none."""
    tree = parse_html(html)
    if tree is None:
        return ""
    drop_chrome(tree)
    unwrap_layout_tables(tree)
    try:
        text = trafilatura.extract(
            tree,
            favor_recall=True,
            include_tables=True,
            include_comments=False,
            include_links=False,
            include_images=False,
            deduplicate=False,
            with_metadata=False,
        )
    except Exception:  # noqa: BLE001 - the fallback failing is "nothing found", not a crash
        return ""
    return text.replace("\xa0", " ") if text else ""


# --------------------------------------------------------------------------- the step
def usable(text: str) -> bool:
    return _USABLE.search(text) is not None


def extract_main_text(html: str, fallback: bool = True) -> str | None:
    """The main content of a page as plain text with line breaks; None when nothing usable is
    found. The fallback extractor runs only when the primary finds nothing usable."""
    text = extract_primary(html)
    if not usable(text) and fallback:
        text = extract_fallback(html)
    return text if usable(text) else None


def extract(html: str, fallback: bool = True) -> tuple[str | None, Rejection | None]:
    """(text, None), or (None, rejection with rule 'no_content') when no extractor finds text."""
    text = extract_main_text(html, fallback)
    if text is None:
        n = text_bytes(html)
        tried = "resiliparse and trafilatura" if fallback else "resiliparse"
        return None, Rejection("extract", "no_content", format_value(n), f"no main content found in {n} bytes of HTML ({tried})")
    return text, None


class Extract(DocStep):
    """HTML pages become their main-content text; other formats pass through."""

    name = "extract"
    version = VERSION

    def applies(self, doc: Doc) -> bool:
        return doc.format == "html"

    def process(self, doc: Doc) -> Rejection | None:
        # Before any parser: resiliparse's walk is worse than quadratic in nesting depth.
        rejection = depth_rejection(doc.text or "", self.cfg.limits.max_html_depth)
        if rejection is not None:
            return rejection
        html = doc.text or ""
        text, rejection = extract(html, self.cfg.extract.fallback)
        generator = doc_generator(html) if self.cfg.extract.doc_generators else None
        if generator is not None:
            text, rejection = self._manual_page(doc, html, text, rejection, generator)
        if rejection is None:
            doc.text = text
        return rejection

    def _manual_page(
        self, doc: Doc, html: str, text: str | None, rejection: Rejection | None, generator: str
    ) -> tuple[str | None, Rejection | None]:
        """A page a documentation toolchain made: a manual's page (kind reference, unless its
        bucket declares one). A chapter or contents page whose text is only its title keeps its
        table of contents: that list is the page's content, not site chrome repeated on every page."""
        if len(text or "") < self.cfg.min_chars:
            with_toc = extract_primary(html, keep_toc=True)
            if usable(with_toc) and len(with_toc) > len(text or ""):
                doc.lineage.append((self.name, f"table of contents kept ({len(text or '')} characters without it)"))
                text, rejection = with_toc, None
        quality = self.cfg.quality
        if doc.kind is None and doc.bucket not in quality.kinds and quality.detect_kinds:
            doc.kind = "reference"
            doc.lineage.append((KIND_STEP, f"reference (page generator: {generator})"))
        return text, rejection
