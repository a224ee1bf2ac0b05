"""A generalizing quality signal, scored on text no quality design reads, under the frozen rule of
benchmarks/frozen/quality_signal.json (written and committed before any signal is designed).

The evaluation set is built here, deterministically, from the frozen recipe and the real corpora (no
download). Each evaluation row (one collection, or one language folder of one) is cut into
documents of 1,500-6,000 characters at blank-line boundaries, ordered by the sha256 of
"<path relative to the corpora root>#<passage number>", and near-copies are left out (a passage
sharing half its word 5-grams with one admitted before). The first `clean_per_row` passages are the
row's clean documents; the passages after them are its held-out part, dealt to the junk kinds in a
fixed order, so no junk document is made of text a clean document holds. Junk kinds, none of them
in benchmarks/dirty_web.py:

  ocr_damage         about one letter in eight replaced by a visually confusable glyph ("m" ->
                     "rn", "l" -> "1", "O" -> "0", "e" -> "c"), a few words broken, a few spaces
                     dropped.
  word_substitution  a share of the words replaced by a random word of the same held-out text's
                     vocabulary with a nearby frequency rank (capitalisation kept).
  markov_chain       an order-2 word Markov chain trained on held-out passages of the row:
                     every three consecutive words occur in the training text, the whole means
                     nothing.
  event_listing      one event-listing page template; only its slots change (names and words
                     taken from the row's held-out text).
  sentence_splice    the sentences of two unrelated held-out passages (different files) interleaved.
  shuffled_words     (quality_signal2.json and 3) each paragraph's words shuffled within it.
  keyboard_typos     (quality_signal3.json) letters mistyped as on a QWERTY keyboard: a neighbouring
                     key, dropped, doubled or swapped with the next letter.

A second judgement (`--frozen benchmarks/frozen/quality_signal2.json`) reads its rows from a set
fetched by `benchmarks/fetch_fresh_docs.sh TARGET text1` (`--fresh TARGET`; its FILES.tsv digest must
be the frozen one): HTML pages rendered to text by render_html, gzipped text read as it is.

The set is one JSONL file (only {"id", "text"} per line: no kind declared) curated by the real
curate (`tokenmill.data.curate.curate`, what `tokenmill curate -o` calls) from a run config the
script writes, in two variants: (a) no reference, (b) `model_quality.reference` set to a JSONL the
script builds from design collections only. It reports documents kept per clean row and per junk
kind (with 95% Wilson intervals), the rules that removed most, the frozen rule's checks, seconds.

    PYTHONPATH=src .venv/bin/python benchmarks/record.py benchmarks/results/quality_signal_baseline.json \\
        --result /tmp/qs.json -- benchmarks/bench_quality_signal.py --corpora /work/real_corpora \\
        --work /tmp/qs-work --json /tmp/qs.json
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import random
import re
import sys
import time
import unicodedata
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

FROZEN = Path(__file__).resolve().parent / "frozen" / "quality_signal.json"
BUCKET = "mixed"
TOP_RULES = 6
Z95 = 1.959964

# --------------------------------------------------------------------------- man pages (roff) to text
_ROFF_CHARS = {
    "em": "\u2014", "en": "\u2013", "lq": "\u201c", "rq": "\u201d", "oq": "\u2018", "cq": "\u2019",
    "aq": "'", "Aq": "'", "Dq": '"', "dq": '"', "bu": "\u2022", "co": "\u00a9", "rg": "\u00ae", "tm": "\u2122", "hy": "-",
    "mi": "-", "pl": "+", "mu": "\u00d7", "de": "\u00b0", "ha": "^", "ti": "~", "rs": "\\", "ga": "`",
    "aa": "\u00b4", "Fo": "\u00ab", "Fc": "\u00bb", "fo": "\u2039", "fc": "\u203a", "at": "@", "sh": "#",
    "Do": "$", "ba": "|", "lh": "<", "rh": ">", "ua": "^", "->": "\u2192", "<-": "\u2190", "<=": "\u2264",
    ">=": "\u2265", "R": "\u00ae", "Tm": "\u2122", "ss": "\u00df", "ae": "\u00e6", "AE": "\u00c6", "--": "\u2014",
    "*W": "\u03a9", "*p": "\u03c0", "L\"": "\u201c", "R\"": "\u201d", "shc": "",
}
_SKIP_BLOCKS = {".TS": ".TE", ".EQ": ".EN", ".de": "..", ".ig": "..", ".PS": ".PE"}
_BREAKS = {"PP", "P", "LP", "sp", "br", "HP", "TP", "TQ", "RS", "RE", "IP", "PD", "in", "ti", "ne", "bp"}
_FONT_ALT = {"BR", "RB", "IR", "RI", "BI", "IB"}
_FONT_ONE = {"B", "I", "SM", "SB", "R"}


_ACCENTS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", ":": "\u0308", ",": "\u0327", "~": "\u0303"}


def _glyph(name: str | None) -> str:
    """A roff special character's text: a named glyph, an accented letter ('e, :o, ,c), u00E9."""
    if not name:
        return ""
    if name in _ROFF_CHARS:
        return _ROFF_CHARS[name]
    if len(name) == 2 and name[0] in _ACCENTS and name[1].isalpha():
        return unicodedata.normalize("NFC", name[1] + _ACCENTS[name[0]])
    if re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name):
        return chr(int(name[1:], 16))
    return ""


def _roff_escapes(line: str) -> str:
    """A roff text line's escapes rendered as the plain text they print."""
    line = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", line)  # font changes
    line = re.sub(r"\\s[+-]?(\d|\(\d\d|\[\d+\])", "", line)  # size changes
    line = re.sub(r"\\\*(\[([^\]]*)\]|\((..)|(.))", lambda m: _glyph(m.group(2) or m.group(3) or m.group(4)), line)
    line = re.sub(r"\\\[([^\]]*)\]", lambda m: _glyph(m.group(1)), line)
    line = re.sub(r"\\\((..)", lambda m: _glyph(m.group(1)), line)
    line = re.sub(r"\\[kwhvlLoXYZnNAbBDRS]('[^']*'|\[[^\]]*\]|\(..|.)", "", line)  # motions, registers
    line = line.replace("\\-", "-").replace("\\e", "\0").replace("\\ ", " ").replace("\\~", " ").replace("\\0", " ")
    line = re.sub(r"\\[&|^%:c)/,!{}]", "", line)
    return re.sub(r"\\(.)", r"\1", line).replace("\0", "\\")


def _request_text(name: str, args: str) -> str | None:
    """The printed text of a font or heading request's arguments (None: a request that prints nothing)."""
    parts = [p[1:-1] if len(p) > 1 and p.startswith('"') and p.endswith('"') else p for p in re.findall(r'"[^"]*"|\S+', args)]
    if name in _FONT_ALT:
        return "".join(parts)
    if name in _FONT_ONE or name in ("SH", "SS", "IP", "TP", "UR", "MT"):
        return " ".join(parts) if name not in ("IP",) else (parts[0] if parts else "")
    return None


def render_roff(src: str) -> str:
    """A man page's roff source as plain text: filled paragraphs joined into lines, headings on
    their own, no-fill (.nf) examples line by line, tables and macro definitions left out. A
    `.so` redirect renders as empty text."""
    if re.match(r"\s*\.so\s", src):
        return ""
    paras: list[tuple[bool, list[str]]] = [(True, [])]
    fill, skip_until, tag = True, None, False
    for raw in re.sub(r"(?<!\\)\\\n", "", src).splitlines():
        head = raw.split(None, 1)[0] if raw.strip() else ""
        if skip_until is not None:
            skip_until = None if head == skip_until else skip_until
            continue
        if head in _SKIP_BLOCKS:
            skip_until = _SKIP_BLOCKS[head]
            continue
        if raw.startswith((".\\\"", "'\\\"")) or raw.strip() in (".", "'"):
            continue
        if raw.startswith((".", "'")):
            name = raw[1:].split(None, 1)[0] if raw[1:].strip() else ""
            if name in ("nf", "EX", "fi", "EE"):
                fill = name in ("fi", "EE")
            if name in ("nf", "EX", "fi", "EE", "SH", "SS") or name in _BREAKS:
                paras.append((fill, []))
            text = _request_text(name, raw[1 + len(name):].strip())
            if text:
                paras[-1][1].append(_roff_escapes(text))
            if name in ("SH", "SS"):
                paras.append((fill, []))
            tag = name == "TP"
            continue
        if not raw.strip():
            paras.append((fill, []))
        else:
            paras[-1][1].append(_roff_escapes(raw))
            if tag:  # a .TP tag stands on its own line
                paras.append((fill, []))
                tag = False
    out = []
    for filled, lines in paras:
        text = " ".join(" ".join(lines).split()) if filled else "\n".join(x.rstrip() for x in lines).strip("\n")
        if text.strip():
            out.append(text)
    return "\n\n".join(out)


# --------------------------------------------------------------------------- HTML pages to text
_HTML_BLOCKS = {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "pre", "table", "tr", "blockquote",
                "ul", "ol", "dl", "section", "article", "figure", "caption"}
_HTML_SKIP = {"script", "style", "head", "title"}
_HTML_NAV = {"navheader", "navfooter"}  # DocBook's navigation rows (previous / up / next)


class _PageText(HTMLParser):
    """The visible text of a page: a blank line around every block element, whitespace collapsed
    outside <pre>; scripts, styles, the head and DocBook's navigation rows left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.stack: list[tuple[str, bool]] = []  # (tag, skipped) of the open elements
        self.pre = 0

    def _skipping(self) -> bool:
        return any(skip for _, skip in self.stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"br", "img", "meta", "link", "hr", "input"}:
            if tag == "br" and not self._skipping():
                self.out.append("\n")
            return
        classes = set((dict(attrs).get("class") or "").split())
        self.stack.append((tag, tag in _HTML_SKIP or bool(classes & _HTML_NAV)))
        if tag in _HTML_BLOCKS and not self._skipping():
            self.out.append("\n\n")
        self.pre += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _ in self.stack):
            return
        while self.stack:
            t, _ = self.stack.pop()
            self.pre -= t == "pre"
            if t == tag:
                break
        if tag in _HTML_BLOCKS and not self._skipping():
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping():
            self.out.append(data if self.pre else re.sub(r"\s+", " ", data))


def render_html(src: str) -> str:
    """A page's text, one block a paragraph (blank-line separated), lines stripped."""
    parser = _PageText()
    parser.feed(src)
    parser.close()
    lines = [line.strip() for line in "".join(parser.out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# --------------------------------------------------------------------------- passages
def read_text(path: Path, render: str, encoding: str = "utf-8") -> str:
    """A file's text as a user would feed it: as written (gunzipped when it ends in .gz), a man
    page's roff rendered, or an HTML page's visible text. A row may name its files' encoding
    (quality_signal2.json names none, so FocaLinux's Latin-1 was decoded as UTF-8: see BENCHMARKS)."""
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode(encoding, errors="replace")
    return render_roff(text) if render == "roff" else render_html(text) if render == "html" else text


def cut_passages(text: str, lo: int, hi: int) -> list[str]:
    """Consecutive blank-line separated blocks joined into passages of lo..hi characters; a block
    longer than hi is split at line boundaries first (a line longer than hi is left out)."""
    blocks: list[str] = []
    for block in (b.strip("\n") for b in re.split(r"\n[ \t]*\n", text)):
        if not block.strip():
            continue
        if len(block) <= hi:
            blocks.append(block)
            continue
        part: list[str] = []
        for line in block.split("\n"):
            if sum(len(x) + 1 for x in part) + len(line) > hi and part:
                blocks.append("\n".join(part))
                part = []
            if len(line) <= hi:
                part.append(line)
        if part:
            blocks.append("\n".join(part))
    out, buf = [], []
    for block in blocks:
        if buf and sum(len(x) + 2 for x in buf) + len(block) > hi:
            if sum(len(x) + 2 for x in buf) - 2 >= lo:
                out.append("\n\n".join(buf))
            buf = []
        buf.append(block)
    if buf and sum(len(x) + 2 for x in buf) - 2 >= lo:
        out.append("\n\n".join(buf))
    return out


def _sha(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


class Distinct:
    """Admits a text only when it shares under `max_share` of its word 5-grams with every text
    admitted before (an inverted index of 5-gram digests)."""

    def __init__(self, max_share: float) -> None:
        self.max_share = max_share
        self.index: dict[str, list[int]] = {}
        self.n = 0

    def admit(self, text: str) -> bool:
        words = text.split()
        grams = {" ".join(words[i:i + 5]) for i in range(max(0, len(words) - 4))}
        shared: Counter[int] = Counter(j for g in grams for j in self.index.get(g, ()))
        if grams and shared and max(shared.values()) >= self.max_share * len(grams):
            return False
        for g in grams:
            self.index.setdefault(g, []).append(self.n)
        self.n += 1
        return True


def row_passages(corpora: Path, spec: dict[str, Any], cutting: dict[str, Any]) -> list[tuple[str, str]]:
    """(id, text) of every passage of a row, ascending sha256 of the id ("<relative path>#<k>"),
    near-copies of an earlier passage left out."""
    found: list[tuple[str, str]] = []
    for f in sorted(f for g in spec["globs"] for f in (corpora / spec["path"]).glob(g)):
        if f.is_file():
            rel = str(f.relative_to(corpora))
            text = read_text(f, spec["render"], spec.get("encoding", "utf-8"))
            for k, p in enumerate(cut_passages(text, cutting["min_chars"], cutting["max_chars"])):
                found.append((f"{rel}#{k}", p))
    found.sort(key=lambda x: _sha(x[0]))
    distinct = Distinct(cutting["near_copy_share"])
    return [(i, t) for i, t in found if distinct.admit(t)]


# --------------------------------------------------------------------------- junk kinds
OCR_CONFUSABLE: dict[str, tuple[str, ...]] = {
    "a": ("o", "e"), "b": ("h", "6"), "c": ("e", "o"), "d": ("cl",), "e": ("c", "o"), "f": ("t",), "g": ("q", "9"),
    "h": ("b", "li"), "i": ("l", "1", "j"), "j": ("i",), "k": ("lc",), "l": ("1", "I", "i"), "m": ("rn", "nn"),
    "n": ("ri", "u"), "o": ("0", "c"), "p": ("o",), "q": ("g",), "r": ("n", "t"), "s": ("5",), "t": ("f", "l"),
    "u": ("v", "n"), "v": ("u", "y"), "w": ("vv",), "x": ("k",), "y": ("v",), "z": ("2",),
    "A": ("4",), "B": ("8", "R"), "C": ("G", "("), "D": ("O",), "E": ("F",), "F": ("P",), "G": ("C", "6"), "H": ("II",),
    "I": ("l", "1"), "J": ("I",), "K": ("X",), "L": ("I",), "M": ("IVI",), "N": ("H",), "O": ("0", "Q"), "P": ("F",),
    "Q": ("O",), "R": ("B",), "S": ("5",), "T": ("I",), "U": ("V",), "V": ("U",), "W": ("VV",), "X": ("K",), "Y": ("V",),
    "Z": ("2",), "á": ("a",), "é": ("e",), "í": ("i", "f"), "ó": ("o",), "ú": ("u",), "ñ": ("n",), "ü": ("u",),
    "Á": ("A",), "É": ("E",), "Í": ("I",), "Ó": ("O",), "Ú": ("U",), "Ñ": ("N",),
}


def ocr_pieces(text: str, rng: random.Random, rate: float) -> list[str]:
    """Each character's output: a letter with a confusable glyph is replaced by one with
    probability `rate`; every other character stays."""
    return [rng.choice(OCR_CONFUSABLE[c]) if c in OCR_CONFUSABLE and rng.random() < rate else c for c in text]


def ocr_damage(text: str, rng: random.Random, p: dict[str, Any]) -> str:
    """OCR damage: confusable glyphs at `letter_rate`, then a word of 6+ letters broken by a space
    with probability `break_rate`, then a space between two words dropped with `drop_rate`."""
    out = "".join(ocr_pieces(text, rng, p["letter_rate"]))
    out = re.sub(r"\w{6,}", lambda m: (lambda w, k: w[:k] + " " + w[k:])(m.group(0), rng.randint(2, len(m.group(0)) - 2))
                 if rng.random() < p["break_rate"] else m.group(0), out)
    return re.sub(r"(?<=\S) (?=\S)", lambda m: "" if rng.random() < p["drop_rate"] else " ", out)


_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def vocabulary(texts: list[str]) -> list[str]:
    """Lower-cased words of the texts by descending count (ties: alphabetical)."""
    counts = Counter(w.lower() for t in texts for w in _WORD.findall(t))
    return [w for w, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))]


def _same_case(new: str, old: str) -> str:
    if len(old) > 1 and old.isupper():
        return new.upper()
    return new[:1].upper() + new[1:] if old[:1].isupper() else new


def substitute_words(text: str, rng: random.Random, vocab: list[str], share: float, window: int) -> str:
    """round(share x words) words, chosen at random, each replaced by a random other word of the
    vocabulary whose frequency rank is within `window` of its own (its case pattern kept)."""
    rank = {w: i for i, w in enumerate(vocab)}
    spans = [m.span() for m in _WORD.finditer(text) if m.group(0).lower() in rank]
    chosen = set(rng.sample(range(len(spans)), round(share * len(spans))))
    out, last = [], 0
    for k, (a, b) in enumerate(spans):
        if k not in chosen:
            continue
        old = text[a:b]
        r = rank[old.lower()]
        lo, hi = max(0, r - window), min(len(vocab) - 1, r + window)
        if hi == lo:
            continue
        j = rng.randrange(lo, hi)
        j = j + 1 if j >= r else j  # never the word itself
        out += [text[last:a], _same_case(vocab[j], old)]
        last = b
    return "".join(out) + text[last:]


def markov_tokens(text: str) -> list[str]:
    """Words and line breaks ("\\n" inside a paragraph, "\\n\\n" between paragraphs) as tokens."""
    return re.findall(r"\n[ \t]*\n|\n|[^\s]+", re.sub(r"\n[ \t]*\n(\s*\n)*", "\n\n", text.replace("\r", "")))


def markov_render(tokens: list[str]) -> str:
    out = ""
    for t in tokens:
        out = out.rstrip(" ") + t if t.startswith("\n") else out + t + " "
    return out.strip()


def markov_text(train: list[str], rng: random.Random, order: int, target_chars: int) -> str:
    """An order-`order` word Markov chain over the training tokens, read as a cycle (the last
    tokens lead on to the first, so the chain never stops), started after a sentence end and run
    until `target_chars` characters: every order+1 consecutive tokens occur in the cycle."""
    n = len(train)
    nxt: dict[tuple[str, ...], list[str]] = {}
    for i in range(n):
        nxt.setdefault(tuple(train[(i + k) % n] for k in range(order)), []).append(train[(i + order) % n])
    starts = [i for i in range(n) if train[i - 1].endswith((".", "!", "?", "\n\n"))] or [0]
    i = rng.choice(starts)
    out = [train[(i + k) % n] for k in range(order)]
    size = sum(len(t) + 1 for t in out)
    while size < target_chars:
        out.append(rng.choice(nxt[tuple(out[-order:])]))
        size += len(out[-1]) + 1
    return markov_render(out)


_SPLIT = re.compile(r"(?<=[.!?;:])\s+(?=\S)")


def splice(a: str, b: str, max_chars: int) -> str:
    """The sentences of a and b taken in turn (a's first), a paragraph break after every fourth,
    until either runs out or the next would pass max_chars."""
    sa, sb = [s for s in _SPLIT.split(a) if s.strip()], [s for s in _SPLIT.split(b) if s.strip()]
    out: list[str] = []
    for k in range(2 * min(len(sa), len(sb))):
        s = " ".join((sa if k % 2 == 0 else sb)[k // 2].split())
        if sum(len(x) + 1 for x in out) + len(s) > max_chars:
            break
        out.append(s)
    return "\n\n".join(" ".join(out[i:i + 4]) for i in range(0, len(out), 4))


EVENT_TEMPLATE = """{venue} presents: {title}

{weekday} {day} {month} {year} | Doors {doors} | Show {start}
{venue}, {number} {street} Street, {city}

Tickets: ${price} in advance, ${door_price} at the door. Ages {ages}.
Buy tickets | Add to calendar | Share this event

About this event
{performer} and {performer2} bring their new show "{title}" to {city} for one night only. Expect an evening of {word1}, {word2} and {word3}, with special guest {guest}. Seating is unreserved; please arrive early to find a seat.

Venue information
{venue} is at {number} {street} Street, {city}. The nearest station is {station}. Parking is available on {street2} Road from 6 pm.
Accessibility: step-free access, accessible toilets and a hearing loop are available. Please contact the box office before you arrive if you need assistance.

Refund policy
Tickets are non-refundable except when an event is cancelled or rescheduled. Doors open one hour before the show. Set times are subject to change.

Also at {venue}
{upcoming1} | {upcoming2} | {upcoming3}

Sign up for our newsletter to hear about new events first.
(c) {year} {venue}. All rights reserved. Privacy | Terms | Contact"""


def slot_words(texts: list[str]) -> tuple[list[str], list[str]]:
    """(names, words) of the texts: capitalised words seen only capitalised and never first in a
    line or sentence, and lower-case words of 4-12 letters; each sorted, no repeats."""
    lower = {w for t in texts for w in _WORD.findall(t) if w.islower()}
    names, after_end = set(), re.compile(r"(?:^|[.!?:]\s+|\n\s*)$")
    for t in texts:
        for m in re.finditer(r"\b[A-ZÁÉÍÓÚÑ][a-záéíóúñ]{2,}\b", t):
            if m.group(0).lower() not in lower and not after_end.search(t[max(0, m.start() - 3):m.start()]):
                names.add(m.group(0))
    words = sorted(w for w in lower if w.isalpha() and 4 <= len(w) <= 12)
    return sorted(names), words


def event_slots(rng: random.Random, names: list[str], words: list[str]) -> dict[str, str]:
    """One page's slot values: names and words of the row, numbers and dates at random."""
    w, n = (lambda: rng.choice(words)), (lambda: rng.choice(names))
    price = rng.randint(8, 60)
    return {
        "venue": f"The {n()} {rng.choice(('Hall', 'Theatre', 'Room', 'Arts Centre', 'Club'))}",
        "title": f"{w().capitalize()} and {w().capitalize()}", "weekday": rng.choice(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")),
        "day": str(rng.randint(1, 28)), "month": rng.choice(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")),
        "year": str(rng.randint(2024, 2027)), "doors": f"{rng.randint(6, 8)}:{rng.choice(('00', '30'))} pm",
        "start": f"{rng.randint(7, 9)}:{rng.choice(('00', '30'))} pm", "number": str(rng.randint(1, 250)),
        "street": n(), "city": n(), "price": f"{price}.00", "door_price": f"{price + rng.choice((3, 5, 8))}.00",
        "ages": rng.choice(("14+", "16+", "18+", "all ages")), "performer": n(), "performer2": n(),
        "word1": w(), "word2": w(), "word3": w(), "guest": n(), "station": f"{n()} {rng.choice(('Central', 'Square', 'Park'))}",
        "street2": n(), "upcoming1": f"{w().capitalize()} Night", "upcoming2": f"{n()} Live", "upcoming3": f"The {w().capitalize()} Show",
    }


def event_listing(rng: random.Random, names: list[str], words: list[str]) -> str:
    return EVENT_TEMPLATE.format(**event_slots(rng, names, words))


# --------------------------------------------------------------------------- the set
def shuffle_words(text: str, rng: random.Random) -> str:
    """Each paragraph's words (whitespace-separated, punctuation attached) shuffled within the
    paragraph; every line keeps its number of words, so the layout is the passage's own."""
    out = []
    for para in text.split("\n\n"):
        lines = [line.split() for line in para.split("\n")]
        pool = [w for line in lines for w in line]
        rng.shuffle(pool)
        words = iter(pool)
        out.append("\n".join(" ".join(next(words) for _ in line) for line in lines))
    return "\n\n".join(out)


_QWERTY = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def _neighbours(c: str) -> str:
    """The letters beside c on a QWERTY keyboard: left and right on its row, and on the rows above and
    below the keys at the same index and one to the left (the rows are taken as not staggered, so
    for "g" that is f, h, r, t, v, b; as quality_signal3.json and quality_signal4.json were built)."""
    for r, row in enumerate(_QWERTY):
        if c in row:
            i = row.index(c)
            near = row[max(0, i - 1) : i] + row[i + 1 : i + 2]
            for other in (r - 1, r + 1):
                if 0 <= other < len(_QWERTY):
                    near += _QWERTY[other][max(0, i - 1) : i + 1]
            return near
    return ""


def keyboard_typos(text: str, rng: random.Random, rate: float) -> str:
    """Each ASCII letter, with probability rate, mistyped: a neighbouring key instead (case kept),
    dropped, doubled, or swapped with the letter after it (one of the four at random)."""
    out: list[str] = []
    chars = list(text)
    i = 0
    while i < len(chars):
        c = chars[i]
        if c.isascii() and c.isalpha() and rng.random() < rate:
            kind = rng.randrange(4)
            near = _neighbours(c.lower())
            if kind == 0 and near:
                n = rng.choice(near)
                out.append(n.upper() if c.isupper() else n)
            elif kind == 1:
                pass
            elif kind == 2:
                out.append(c + c)
            elif i + 1 < len(chars) and chars[i + 1].isalpha():
                out.append(chars[i + 1] + c)
                i += 1
            else:
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


EXTRA_KINDS = ("shuffled_words", "keyboard_typos")  # kinds a judgement may list after the first five, dealt in this order


def _rng(seed: int, *parts: object) -> random.Random:
    """A generator seeded by a string of the parts (Python hashes a str seed with sha512: stable)."""
    return random.Random(":".join(map(str, (seed, *parts))))


def row_junk(row: str, held: list[tuple[str, str]], ev: dict[str, Any]) -> list[dict[str, Any]]:
    """The junk documents of one row, made from its held-out passages dealt in the frozen order."""
    k, kinds, seed = ev["junk_per_row_per_kind"], ev["junk_kinds"], ev["seed"]
    need = 4 * k + kinds["markov_chain"]["train_passages"]
    extras = [x for x in EXTRA_KINDS if x in kinds]
    if len(held) < need + k * len(extras):
        raise ValueError(f"{row}: {len(held)} held-out passages, the recipe needs {need + k * len(extras)}")
    ocr, sub, spl, train = held[:k], held[k:2 * k], held[2 * k:4 * k], held[4 * k:need]
    vocab = vocabulary([t for _, t in sub])
    train_tokens = [tok for _, t in train for tok in markov_tokens(t) + ["\n\n"]]
    names, words = slot_words([t for _, t in train])
    out = []
    for i in range(k):
        mk = kinds["markov_chain"]
        other = next(j for j in range(k, 2 * k) if spl[(i + j) % (2 * k)][0].split("#")[0] != spl[i][0].split("#")[0])
        made = {
            "ocr_damage": (ocr_damage(ocr[i][1], _rng(seed, row, "ocr", i), kinds["ocr_damage"]), [ocr[i][0]]),
            "word_substitution": (substitute_words(sub[i][1], _rng(seed, row, "sub", i), vocab, kinds["word_substitution"]["share"],
                                                   kinds["word_substitution"]["rank_window"]), [sub[i][0]]),
            "markov_chain": (markov_text(train_tokens, _rng(seed, row, "markov", i), mk["order"], len(train[i % len(train)][1])),
                             ["training passages"]),
            "event_listing": (event_listing(_rng(seed, row, "event", i), names, words), ["template"]),
            "sentence_splice": (splice(spl[i][1], spl[(i + other) % (2 * k)][1], kinds["sentence_splice"]["max_chars"]),
                                [spl[i][0], spl[(i + other) % (2 * k)][0]]),
        }
        for j, extra in enumerate(extras):  # kinds listed after the five: a block each, after markov's passages
            src = held[need + j * k + i]
            if extra == "shuffled_words":
                made[extra] = (shuffle_words(src[1], _rng(seed, row, "shuffle", i)), [src[0]])
            else:
                made[extra] = (keyboard_typos(src[1], _rng(seed, row, "typos", i), kinds[extra]["rate"]), [src[0]])
        for kind, (text, src) in made.items():
            out.append({"id": f"{kind}/{row}/{i:03d}", "text": text, "kind": kind, "row": row, "from": src})
    return out


def build_set(corpora: Path, ev: dict[str, Any], fresh: Path | None = None) -> list[dict[str, Any]]:
    """Every evaluation document with its label: clean per row, then junk per row and kind. A row
    whose spec says "root": "fresh" is read from the fetched set (`fresh`), any other from the corpora."""
    docs: list[dict[str, Any]] = []
    for row, spec in ev["rows"].items():
        root = corpora if spec.get("root", "corpora") == "corpora" else fresh
        if root is None:
            raise SystemExit(f"{row}: the row is read from a fetched set; give it with --fresh")
        passages = row_passages(root, spec, ev["cutting"])
        c = ev["clean_per_row"]
        if len(passages) < c:
            raise ValueError(f"{row}: {len(passages)} passages, the recipe needs {c} clean ones")
        docs += [{"id": f"clean/{row}/{i:03d}", "text": t, "kind": "clean", "row": row, "from": [pid]}
                 for i, (pid, t) in enumerate(passages[:c])]
        docs += row_junk(row, passages[c:], ev)
    return docs


# --------------------------------------------------------------------------- the reference (variant b)
def build_reference(corpora: Path, spec: dict[str, Any], cutting: dict[str, Any], dest: Path) -> dict[str, Any]:
    """The variant (b) reference, from design collections only: per collection, the first `take`
    items by ascending sha256 of their id (an HTML page's relative path, whose extracted text has at
    least min_chars; a text file's passage "<relative path>#<k>", cut like the evaluation rows)."""
    from tokenmill.data.steps.extract import extract

    dest.parent.mkdir(parents=True, exist_ok=True)
    chosen: dict[str, int] = {}
    with dest.open("w", encoding="utf-8") as fh:
        for coll in spec["collections"]:
            base = corpora / coll["path"]
            files = sorted(p for p in base.glob(coll["glob"]) if p.is_file()
                           and not any(p.name.startswith(x) for x in coll.get("exclude_name_prefix", [])))
            if coll["format"] == "text":
                items = [(f"{f.relative_to(corpora)}#{k}", t) for f in files
                         for k, t in enumerate(cut_passages(read_text(f, "text"), cutting["min_chars"], cutting["max_chars"]))]
            else:
                items = [(str(f.relative_to(corpora)), f) for f in files]
            taken = 0
            for _, item in sorted(items, key=lambda x: _sha(x[0])):
                if coll["take"] is not None and taken >= coll["take"]:
                    break
                text = item if isinstance(item, str) else extract(item.read_text(encoding="utf-8", errors="replace"))[0]
                if text and len(text.strip()) >= spec["min_chars"]:
                    fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                    taken += 1
            chosen[coll["path"]] = taken
    return {"path": str(dest), "items": chosen, "sha256": hashlib.sha256(dest.read_bytes()).hexdigest()}


# --------------------------------------------------------------------------- curate and measure
def run_config(data: Path, guards: dict[str, Any], reference: Path | None) -> dict[str, Any]:
    """The run config: one JSONL source, one bucket, no kind declared, defaults but the guards."""
    curate: dict[str, Any] = {"sources": [{"kind": "files", "path": str(data), "format": "jsonl", "bucket": BUCKET}], **guards}
    if reference is not None:
        curate["model_quality"] = {"reference": str(reference)}
    return {"name": "quality_signal", "curate": curate}


def curate_set(config: dict[str, Any], folder: Path) -> Path:
    """Write the run config and curate it in-process, as `tokenmill curate -o` does."""
    from tokenmill.config import load_config
    from tokenmill.data.curate import curate

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    cfg = load_config(path)
    out = folder / "curated"
    curate(cfg.curate, out, base_dir=folder, progress=False, seed=cfg.seed, overwrite=True)
    return out


def _row_id(row: dict[str, Any]) -> str:
    """The record's own id: the row id when tokenmill took it, else metadata.id."""
    try:
        meta = json.loads(row.get("metadata") or "{}")
    except json.JSONDecodeError:
        meta = {}
    return str(meta.get("id") or row["id"])


def outcomes(curated: Path) -> tuple[set[str], dict[str, str], dict[str, bool]]:
    """(ids kept, {id: "step/rule" that removed it}, {id: judged by the perplexity gate}) from
    curate's output folder (a document the model_quality step never saw is missing from the last)."""
    import pyarrow.parquet as pq

    cols = ["id", "metadata", "model_quality"]
    kept: set[str] = set()
    judged: dict[str, bool] = {}
    for part in sorted(curated.glob(f"{BUCKET}/*.parquet")):
        for r in pq.read_table(part, columns=cols).to_pylist():
            kept.add(_row_id(r))
            if r["model_quality"]:
                judged[_row_id(r)] = bool(r["model_quality"].get("perplexity_judged"))
    removed: dict[str, str] = {}
    for part in sorted((curated / "_rejected").glob("*.parquet")):
        for r in pq.read_table(part, columns=[*cols, "step", "rule"]).to_pylist():
            removed.setdefault(_row_id(r), f"{r['step']}/{r['rule']}")
            if r["model_quality"]:
                judged[_row_id(r)] = bool(r["model_quality"].get("perplexity_judged"))
    return kept, removed, judged


def wilson(k: int, n: int) -> list[float] | None:
    """The 95% Wilson score interval of k successes in n."""
    if n == 0:
        return None
    p, z2 = k / n, Z95 * Z95
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def tally(docs: list[dict[str, Any]], kept: set[str], removed: dict[str, str], judged: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """Kept per group ("clean/<row>" per clean row, "<kind>" per junk kind, and "<kind>/<row>"
    shown), each with its Wilson interval, the rules that removed most of it and how many of its
    documents the perplexity gate judged (not only scored)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        keys = [f"clean/{d['row']}"] if d["kind"] == "clean" else [d["kind"], f"{d['kind']}/{d['row']}"]
        for key in keys:
            groups.setdefault(key, []).append(d)
    out = {}
    for key, members in groups.items():
        k = sum(d["id"] in kept for d in members)
        rules = Counter(removed.get(d["id"], "missing from the output") for d in members if d["id"] not in kept)
        out[key] = {"docs": len(members), "kept": k, "keep_rate": round(k / len(members), 4), "wilson95": wilson(k, len(members)),
                    "removed_by": [{"rule": r, "docs": n} for r, n in rules.most_common(TOP_RULES)],
                    "perplexity_judged": sum(judged.get(d["id"], False) for d in members)}
    return out


def verdict(rule: dict[str, Any], rows: list[str], kinds: list[str], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each check of the frozen decision rule in each variant scored: its value and whether it holds."""
    checks = []
    for variant, groups in results.items():
        for row in rows:
            rate = groups[f"clean/{row}"]["keep_rate"]
            checks.append({"variant": variant, "check": f"clean/{row}: kept >= {rule['clean_keep_at_least']}",
                           "value": rate, "holds": rate >= rule["clean_keep_at_least"]})
        for kind in kinds:
            rate = groups[kind]["keep_rate"]
            checks.append({"variant": variant, "check": f"{kind}: kept <= {rule['junk_keep_at_most']}",
                           "value": rate, "holds": rate <= rule["junk_keep_at_most"]})
    return {"checks": checks, "all_hold": bool(checks) and all(c["holds"] for c in checks)}


def check_digest(fresh: Path | None, expected: str) -> None:
    """Refuse a fetched set whose FILES.tsv is not the frozen one (a different package version)."""
    if fresh is None:
        raise SystemExit("this judgement reads a fetched set: give it with --fresh (benchmarks/fetch_fresh_docs.sh)")
    digest = hashlib.sha256((fresh / "FILES.tsv").read_bytes()).hexdigest()
    if digest != expected:
        raise SystemExit(f"{fresh / 'FILES.tsv'}: sha256 {digest}, the frozen set's is {expected}")


def write_set(docs: list[dict[str, Any]], dest: Path) -> str:
    """The curate input: {"id", "text"} per line, nothing else (no kind, no label); its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"id": d["id"], "text": d["text"]}, ensure_ascii=False) + "\n")
    return hashlib.sha256(dest.read_bytes()).hexdigest()


def score_variant(docs: list[dict[str, Any]], data: Path, frozen: dict[str, Any], reference: Path | None,
                  folder: Path) -> dict[str, Any]:
    """Curate the set in one variant; kept per group, the run's top rules, seconds."""
    started = time.perf_counter()
    curated = curate_set(run_config(data, frozen["configuration"]["run_guards"], reference), folder)
    kept, removed, judged = outcomes(curated)
    return {"groups": tally(docs, kept, removed, judged), "removed_by": Counter(removed.values()).most_common(TOP_RULES * 2),
            "seconds": round(time.perf_counter() - started, 1)}


def print_variant(variant: str, r: dict[str, Any]) -> None:
    for key, g in r["groups"].items():
        if key.count("/") == 1 and not key.startswith("clean/"):
            continue  # per-row junk is in the JSON
        top = "; ".join(f"{x['rule']} {x['docs']}" for x in g["removed_by"][:3])
        print(f"{variant:14s} {key:32s} {g['kept']:4d}/{g['docs']:4d} kept ({g['keep_rate']:.3f}, 95% {g['wilson95']}) judged {g['perplexity_judged']:3d}  {top}", flush=True)
    print(f"{variant:14s} {r['seconds']} s; removed by: {r['removed_by']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True, help="the real corpora root (holds books/, reference/, web_html/)")
    ap.add_argument("--work", type=Path, required=True, help="the set, the reference and one folder per variant are written here")
    ap.add_argument("--variant", choices=["a_no_reference", "b_reference"], action="append", help="default: both")
    ap.add_argument("--json", type=Path, help="write the result here")
    ap.add_argument("--frozen", type=Path, default=FROZEN, help="the frozen judgement (default: quality_signal.json)")
    ap.add_argument("--fresh", type=Path, help="a set fetched by fetch_fresh_docs.sh, for rows read from it")
    args = ap.parse_args()
    args.corpora, args.work, frozen_path = args.corpora.resolve(), args.work.resolve(), args.frozen.resolve()
    frozen = json.loads(frozen_path.read_text())
    if "files_sha256" in frozen:
        check_digest(args.fresh, frozen["files_sha256"])
    ev = frozen["evaluation"]
    started = time.perf_counter()
    docs = build_set(args.corpora, ev, args.fresh.resolve() if args.fresh else None)
    data = args.work / "set.jsonl"
    result: dict[str, Any] = {"frozen": str(frozen_path.relative_to(FROZEN.parents[2])), "set_sha256": write_set(docs, data),
                              "set_seconds": round(time.perf_counter() - started, 1),
                              "documents": dict(Counter(d["kind"] for d in docs)), "variants": {}}
    print(f"set: {len(docs)} documents {result['documents']} ({result['set_seconds']} s) sha256 {result['set_sha256'][:16]}", flush=True)
    for variant in args.variant or ["a_no_reference", "b_reference"]:
        reference = None
        if variant == "b_reference":
            ref = build_reference(args.corpora, frozen["reference"], ev["cutting"], args.work / "reference" / "reference.jsonl")
            result["reference"] = ref
            reference = Path(ref["path"])
        result["variants"][variant] = score_variant(docs, data, frozen, reference, args.work / variant)
        print_variant(variant, result["variants"][variant])
    kinds = list(ev["junk_kinds"])
    result["verdict"] = verdict(frozen["decision_rule"], list(ev["rows"]), kinds,
                                {v: r["groups"] for v, r in result["variants"].items()})
    result["seconds"] = round(time.perf_counter() - started, 1)
    for c in result["verdict"]["checks"]:
        print(f"{'holds' if c['holds'] else 'FAILS':6s} {c['variant']:14s} {c['check']}: {c['value']}")
    print(f"all hold: {result['verdict']['all_hold']}  ({result['seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
