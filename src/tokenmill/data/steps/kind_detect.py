"""The kind of a text from its own signals (issue 41): web, reference, prose, books or code.

A bucket that declares no kind (`curate.quality.kinds`) gets, per document, the kind its text
looks like, not the kind its file format suggests: a JSONL of scraped pages is judged as web,
a link list or a shop page too (so C4's and FineWeb's rules see it), a novel as books.

Cheap, explainable signals of the first WINDOW characters (a 10 MB one-line document costs
the same as a 128 KB one), over its non-blank lines:

  short_line_frac   lines under 30 characters (FineWeb's short line); short_char_frac: the
                    share of characters in them (a heading or two do not make a menu)
  long_line_frac    lines over 200 characters: a paragraph per line (scraped prose)
  ended_char_frac   share of characters in lines that end a sentence (. ! ? : ; or a closing
                    quote; CJK's full-width 。 ！ ？ ： ； and 」 』), or go on into the next line's sentence (a hard-wrapped line, or the
                    next line starts with a small letter): a menu, a link list, a tag cloud or a
                    shop page ends almost none of its lines
  sentence_rate     sentence ends (. ! ? then a space or the line's end; CJK's 。 ！ ？) per 100 words
  wrapped_frac      of the lines followed by another line of their paragraph, those 60-100% as
                    wide as the text's wrap width (50-100 characters, the 90th percentile of line
                    lengths) that were broken because the next word would not fit: hard-wrapped
  code_line_frac    lines that read as code: a keyword first (def, return, #include, ...), or
                    ending in { } or ");", or indented with ( ) { } = in them
  symbol_rate       ( ) { } [ ] = ; < > per 100 characters
  heading_frac      numbered ("2.3 Title", no end mark), Markdown (#) or reStructuredText
                    (==== under a line) headings
  command_rate      lines with a shell prompt ("$ cmd", ">>> "), an option (--flag), `inline
                    code` or a "::" per 100 lines
  web_line_frac     short lines holding separators ( | · » › ) or footers (©, All rights reserved),
                    or of at most MENU_WORDS words with a menu word (Home, Login, Cookies, Privacy,
                    Copyright, Next, Previous, Share, Add to cart, ...)
  chapters          chapter headings ("CHAPTER IV", "Psalm 12", "ACT I")

The decision, in order (thresholds set on half of the labelled documents of
benchmarks/bench_kind_detect.py, accuracy measured on the other half, BENCHMARKS.md); a
manual is command_rate >= REF_COMMANDS, or headings (heading_frac >= REF_HEADINGS) with code
lines among the prose (code_line_frac >= REF_CODE):

  code       code_line_frac >= CODE_ALONE, or >= CODE_LINES with symbol_rate >= CODE_SYMBOLS
             (html / warc input: a page is not a source file; reference when its code sits
             among sentences, ended_char_frac >= WEB_ENDED and sentence_rate >= WEB_SENTENCES
             with code_line_frac < CODE_ALONE, else web)
  web        not a manual and ended_char_frac < WEB_ENDED; or sentence_rate < WEB_SENTENCES
             with ended_char_frac < PROSE_ENDED; or web_line_frac >= WEB_LINES; or not a
             manual and short_char_frac >= WEB_SHORT
  books      n_chars >= BOOK_CHARS (Gopher's max_words would remove it as anything else)
  reference  a manual
  books      wrapped_frac >= BOOK_WRAPPED, or 2+ chapter headings
  reference  ended_char_frac < PROSE_ENDED: headings, lists and captions among the paragraphs
             (documentation's shape; a page without sentences was web above)
  reference  symbol_rate >= REF_SYMBOLS: technical prose, calls and options among the sentences
  prose      the rest: paragraphs of sentences

Junk is not a kind: text without sentences is `web` so that the web rule families judge it.
The costly confusions are between web and reference (a manual judged by FineWeb's rules loses
most pages; a page judged as a manual escapes them); prose that comes out `reference` only gains
C4's five-sentence floor and loses the duplicated 5-10-gram rules, and prose that comes out
`books` keeps Gopher's rules but for max_words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WEB_FORMATS: frozenset[str] = frozenset({"html", "warc"})
WINDOW = 1 << 17  # characters measured: the kind of a 10 MB document is the kind of its start

# Thresholds of the decision (see the module docstring).
CODE_ALONE, CODE_LINES, CODE_SYMBOLS = 0.5, 0.3, 2.5
WEB_ENDED, WEB_SENTENCES, WEB_SHORT, WEB_LINES = 0.5, 1.5, 0.5, 0.3
REF_COMMANDS, REF_HEADINGS, REF_CODE = 3.0, 0.03, 0.03
BOOK_CHARS, BOOK_WRAPPED = 100_000, 0.6
PROSE_ENDED = 0.8
REF_SYMBOLS = 0.6  # technical prose: calls, options, brackets among the sentences

# CJK scripts end sentences with full-width marks and put no space after them (。 ！ ？ ：),
# and close quotes with 」 』: without them a Chinese or Japanese manual ends no line.
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*(?=\s|$)|[。！？｡][」』”’)）]*")
_ENDED = re.compile(r"(?:[.!?:;。！？｡：；][\"'”’)\]」』）]*|[\"”’」』])$")
_WORD = re.compile(r"\w+")
_SYMBOL = re.compile(r"[(){}\[\]=;<>]")
_CODE_START = re.compile(
    r"\s*(?:def|class|import|from \S+ import|return|elif|else:|try:|except\b|raise|yield|async def|"
    r"function|var|let|const|export|require\(|module\.exports|#include|#define|#if|#endif|"
    r"typedef|struct|static|void|int|char|unsigned|public|private|protected|namespace|"
    r"sub|my|our|use strict|package|foreach|interface|enum|switch|case .*:|break;|continue;)(?!\w)"
)
_CODE_END = re.compile(r"(?:[{}]|\);)\s*$|^\s*[})\]];?,?$")
_INDENTED_CODE = re.compile(r"^(?: {2,}|\t).*[(){}=]")


def is_code_line(line: str) -> bool:
    """A line that reads as code: a keyword first, an end in { } or ");", or indented with ( ) { } =."""
    return bool(_CODE_START.match(line) or _CODE_END.search(line) or _INDENTED_CODE.match(line))


_HEADING = re.compile(r"^(?:\d+(?:\.\d+)*\.?\s+\S.{0,60}(?<![.,;:!?])|#{1,6}\s+\S.*|[=\-~^\"'*+#]{4,})$")
_CHAPTER = re.compile(r"^\W*(?:CHAPTER|Chapter|BOOK|ACT|SCENE|Psalm|PSALM|VOLUME)\s+[\dIVXLC]+\b", re.M)
_COMMAND = re.compile(r"^\s*(?:\$|#|>>>|%) \S|(?:^|\s)--[a-z][\w-]+|`[^`\n]{1,60}`|::$|^\s*\.\. \w+::")
# A page's chrome: separators and footers in any short line; menu words only in a line of at most
# MENU_WORDS words ("Home", "Log in | Register"), since a manual's sentences use them too (the
# http.cookies pages of the Python docs read as menus when "Cookie handling" counted).
_WEB_CHROME = re.compile(r" [|·»›] |^[|·»›]|\b(?:All rights reserved|Terms of (?:Use|Service))\b|©", re.I)
_MENU_WORD = re.compile(
    r"\b(?:Home|Login|Log in|Sign in|Sign up|Register|Subscribe|Cookies?|Privacy|Copyright|Contact us|"
    r"About us|Share|Tweet|Add to (?:cart|wishlist|basket)|Read more|Next|Previous|Menu|Search)\b",
    re.I,
)
MENU_WORDS = 4


def _web_line(line: str) -> bool:
    return bool(_WEB_CHROME.search(line)) or (len(line.split()) <= MENU_WORDS and bool(_MENU_WORD.search(line)))


@dataclass(frozen=True, slots=True)
class Signals:
    """What the detector measured; `evidence` names the few that decided."""

    n_chars: int
    lines: int
    short_line_frac: float
    short_char_frac: float
    long_line_frac: float
    ended_char_frac: float
    sentence_rate: float
    wrapped_frac: float
    code_line_frac: float
    symbol_rate: float
    heading_frac: float
    command_rate: float
    web_line_frac: float
    chapters: int


def _window(text: str) -> str:
    if len(text) <= WINDOW:
        return text
    cut = text.rfind("\n", WINDOW // 2, WINDOW)  # whole lines when the start has any
    return text[: cut if cut > 0 else WINDOW]


def _wrapped(lines: list[str]) -> list[bool]:
    """Per line: hard-wrapped prose, a line 60-100% as wide as the wrap width (the 90th percentile
    of line lengths, 50-100 characters) that was broken because the next line's first word would
    not fit in it (normalize's test; a menu's lines of similar length do not pass it)."""
    lengths = [len(x) for x in lines]
    if len(lines) < 4:
        return [False] * len(lines)
    width = sorted(lengths)[int(0.9 * (len(lines) - 1))]
    if not 50 <= width <= 100:
        return [False] * len(lines)
    firsts = [len(x.split(maxsplit=1)[0]) for x in lines[1:]] + [width]
    return [0.6 * width <= n <= width and n + 1 + first > width for n, first in zip(lengths, firsts)]


def _ended(lines: list[str], wrapped: list[bool]) -> int:
    """Characters in lines that end a sentence, or go on into the next line's sentence: a line
    of a hard-wrapped block, or one whose next line starts with a small letter (a menu never
    breaks mid-sentence)."""
    nxt = [*lines[1:], ""]
    return sum(len(x) for x, y, w in zip(lines, nxt, wrapped) if w or _ENDED.search(x) or y.lstrip()[:1].islower())


def measure(text: str) -> Signals:
    """The signals of a text's first WINDOW characters (see the module docstring)."""
    window = _window(text)
    raw = [line.rstrip() for line in window.split("\n")]
    # a line followed by another of its paragraph: only such a line can have been wrapped
    inner = sum(1 for x, y in zip(raw, raw[1:]) if x.strip() and y.strip())
    lines = [line for line in raw if line.strip()]
    n = max(len(lines), 1)
    lengths = [len(line) for line in lines]
    wrapped = _wrapped(lines)
    words = max(len(_WORD.findall(window)), 1)
    return Signals(
        n_chars=len(text),
        lines=len(lines),
        short_line_frac=sum(k < 30 for k in lengths) / n,
        short_char_frac=sum(k for k in lengths if k < 30) / max(sum(lengths), 1),
        long_line_frac=sum(k > 200 for k in lengths) / n,
        ended_char_frac=_ended(lines, wrapped) / max(sum(lengths), 1),
        sentence_rate=100 * len(_SENTENCE_END.findall(window)) / words,
        wrapped_frac=sum(wrapped) / max(inner, 1),
        code_line_frac=sum(map(is_code_line, lines)) / n,
        symbol_rate=100 * len(_SYMBOL.findall(window)) / max(len(window), 1),
        heading_frac=sum(bool(_HEADING.match(x)) for x in lines) / n,
        command_rate=100 * sum(bool(_COMMAND.search(x)) for x in lines) / n,
        web_line_frac=sum(_web_line(x) for x in lines if len(x) < 120) / n,
        chapters=len(_CHAPTER.findall(window)),
    )


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def decide(s: Signals) -> tuple[str, tuple[str, ...]]:
    """The kind the signals say, and the names of the signals that decided it."""
    if s.code_line_frac >= CODE_ALONE or (s.code_line_frac >= CODE_LINES and s.symbol_rate >= CODE_SYMBOLS):
        return "code", ("code_line_frac", "symbol_rate")
    manual = s.command_rate >= REF_COMMANDS or (s.heading_frac >= REF_HEADINGS and s.code_line_frac >= REF_CODE)
    if s.ended_char_frac < WEB_ENDED and not manual:
        return "web", ("ended_char_frac", "command_rate", "heading_frac")
    if s.sentence_rate < WEB_SENTENCES and s.ended_char_frac < PROSE_ENDED:
        return "web", ("sentence_rate",)
    if s.web_line_frac >= WEB_LINES:
        return "web", ("web_line_frac",)
    if s.short_char_frac >= WEB_SHORT and not manual:
        return "web", ("short_char_frac", "command_rate", "heading_frac")
    if s.n_chars >= BOOK_CHARS:
        return "books", ("n_chars",)
    if manual:
        return "reference", ("command_rate", "heading_frac", "code_line_frac")
    if s.wrapped_frac >= BOOK_WRAPPED:
        return "books", ("wrapped_frac",)
    if s.chapters >= 2:
        return "books", ("chapters",)
    if s.ended_char_frac < PROSE_ENDED:
        return "reference", ("ended_char_frac",)
    if s.symbol_rate >= REF_SYMBOLS:
        return "reference", ("symbol_rate",)
    return "prose", ("ended_char_frac", "sentence_rate")


def detect_kind(text: str, fmt: str) -> tuple[str, str]:
    """(kind, evidence) of a document from its own text; code input (`fmt` "code") stays code.
    The evidence names the deciding signals and their values: "short_line_frac=0.81, ..."."""
    if fmt == "code":
        return "code", "format=code"
    s = measure(text)
    kind, names = decide(s)
    if kind == "code" and fmt in WEB_FORMATS:
        # A page is not a source file (code rules skip repetition). A page whose code sits among
        # sentences is a manual's (udev rules, a config file, a session shown and explained);
        # a page of code and nothing else is judged as web.
        prose = s.ended_char_frac >= WEB_ENDED and s.sentence_rate >= WEB_SENTENCES and s.code_line_frac < CODE_ALONE
        kind, names = ("reference", (*names, "sentence_rate", "format")) if prose else ("web", (*names, "format"))
    return kind, ", ".join(f"{n}={fmt}" if n == "format" else f"{n}={_fmt(getattr(s, n))}" for n in names)
