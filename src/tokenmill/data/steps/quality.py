"""Heuristic quality rules: the length floor, Gopher quality and repetition, C4, FineWeb.

`quality_signals` measures a text once (split into words, lines and paragraphs a single time)
and returns every field of `QUALITY_FIELDS`; the `check_*` functions compare the measurements
with `QualityConfig` and return the first broken rule with its measured value. The `Quality`
step stores the signals on every row (kept or not, every bucket), applies the length floor
(`CurateConfig.min_chars`, rule `min_chars`) to every bucket, and the rule families of the
document's kind (data/steps/text_kinds.py) to the buckets not in `skip_buckets`, in this order, with
the thresholds of its language (data/steps/language_profiles.py; words from data/steps/segment.py) and the
code rules of data/steps/code_quality.py for code. English thresholds are the published ones:

Gopher quality (Rae et al. 2021, §A.1.1): 50-100,000 words, mean word length 3-10, '#' or
  '...' per word <= 0.1, <= 90% bullet lines, <= 30% lines ending in an ellipsis, >= 80% of
  words with a letter, >= 2 of the stop words (the, be, to, of, and, that, have, with).
Gopher repetition (Table A1): duplicate line / paragraph fraction <= 0.30, duplicate line /
  paragraph character fraction <= 0.20; characters of the most frequent 2/3/4-gram
  <= 0.20/0.18/0.16; characters inside duplicated 5..10-grams <= 0.15, 0.14 ... 0.10.
  - words are whitespace tokens; character fractions are over word characters (whitespace
    excluded), so a fully repeated text measures 1.0 whatever its spacing;
  - a duplicate line or paragraph is an occurrence after the first; lines are stripped and
    non-empty, paragraphs are blocks between blank lines;
  - top n-gram: (occurrences x characters) of the most frequent n-gram (ties: the longest),
    0 when no n-gram occurs twice (a unique n-gram is not repetition);
  - duplicated n-grams: every word covered by any occurrence of an n-gram seen at least
    twice, each word counted once however many n-grams overlap it ("taking care not to count
    characters that occur in overlapping n-grams more than once"). RedPajama-V2's signals use
    the same two definitions (on lower-cased, punctuation-free words); datatrove counts only
    the repeats after the first occurrence, skipping n words after each, over all characters
    spaces included: on python3.11-doc pages our 5-gram value is a median 1.4x datatrove's
    (2.4x on the same whitespace words), so the same thresholds reject more here.
  Words are interned to ints once; n-gram ids are built exactly (no hashing) level by level,
  (n-1)-gram id x vocabulary + next word id, and re-ranked with np.unique, only at positions
  whose (n-1)-gram prefix repeats (a repeated n-gram has a repeated prefix), so the sort work
  shrinks quickly with n. Overlap coverage is one np.convolve per n.
C4 (Raffel et al. 2020; tensorflow_datasets c4_utils.clean_page, the reference code): a line
  is kept when no word is over 1000 characters, it ends in . ? ! " ' (not '...', after
  removing [1]-style citations), has >= 3 words, and mentions neither 'javascript' nor a
  cookie/terms/privacy policy. Documents are removed when a kept line holds 'lorem ipsum' or
  '{' (in the reference code these are looked for in the lines that survive the earlier line
  rules, not in the whole page) or when the kept lines have < 5 sentences. Decision: by
  default the line rules only *measure* (c4_kept_line_frac) and feed the document rules; the
  text is not rewritten, because on documentation and tutorial pages they delete every code
  line, heading and list item and glue the prose fragments together. `c4_remove_lines`
  applies C4's cleaning as well (the text becomes the kept lines; the signals still describe
  the text as it came in). Sentences are counted with a regex (terminal punctuation followed
  by a space), not NLTK's punkt: abbreviations such as "e.g." count as a boundary.
FineWeb (Penedo et al. 2024; datatrove FineWebQualityFilter defaults): >= 12% of lines end in
  terminal punctuation, <= 67% of lines have <= 30 characters, <= 1% of the characters (line
  breaks excluded) are in repeated lines, <= 0.3 line breaks per word (words: whitespace
  tokens, where datatrove counts spaCy tokens, punctuation included: our ratio is higher,
  so the rule is slightly stricter). FineWeb's line rules assume a line is a paragraph, as in
  extracted web text: hard-wrapped plain text (Project Gutenberg books) fails min_line_punct_frac
  almost always (108 of 120 Austen chunks): declare such buckets `books` (quality.kinds), which
  unwraps them in normalize and leaves FineWeb's and C4's line rules out.

Speed (one core, 60 python3.11-doc pages after extraction, 17.7k characters / 2.7k words each):
every signal of every family in 1.8 ms per document, the repetition family 1.0 ms; datatrove's
GopherRepetitionFilter alone takes ~40-50 ms on the same texts (spaCy tokenization, string
n-grams), its four filters ~60 ms (benchmarks/bench_curate_vs_datatrove.py).
"""

from __future__ import annotations

import itertools
import re
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenmill.data.steps import segment
from tokenmill.data.steps.code_quality import check_code, code_signals
from tokenmill.data.steps.garble import near_miss_word_frac
from tokenmill.data.config import QualityConfig, QualityKind
from tokenmill.data.document import QUALITY_FIELDS, Doc, Rejection, format_value
from tokenmill.data.steps.language_profiles import GOPHER_STOP_WORDS, LanguageRules, load_profiles, rules_for
from tokenmill.data.step import DocStep
from tokenmill.data.steps.kind_detect import is_code_line
from tokenmill.data.steps.text_kinds import assign_kind, families

VERSION = "7+" + "+".join(
    f"{k}-{v}" for k, v in segment.segmenter_versions().items()
)  # 4: per-document kinds, the reference family; 5: stub floors for web only, manuals repeat labels; 6: garble;
# 7: manuals' repetition shares at REFERENCE_MAX_DUP_CHAR_FRAC

STOP_WORDS: frozenset[str] = frozenset(GOPHER_STOP_WORDS)
BULLETS: tuple[str, ...] = ("•", "●", "○", "◦", "▪", "‣", "⁃", "-", "*")
ELLIPSES: tuple[str, ...] = ("...", "…")
_PUNCT = string.punctuation + "“”‘’«»…" + "。、，！？；：「」『』（）《》【】・"
TOP_NGRAMS: tuple[int, ...] = (2, 3, 4)
DUP_NGRAMS: tuple[int, ...] = tuple(range(5, 11))
# A manual page is removed for repetition when more than half of its characters repeat its own
# paragraphs or text lines (Gopher's web limit is a fifth). See kind_thresholds.
REFERENCE_MAX_DUP_CHAR_FRAC = 0.5

# Sentence terminals for FineWeb's line rule: Unicode Sentence_Terminal characters of the major
# scripts (datatrove lists all 159; the rest are historic or rare scripts).
TERMINAL_PUNCT: tuple[str, ...] = tuple(
    ".!?"  # Latin, Greek, Cyrillic
    "\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702"  # Armenian, Arabic, Urdu, Syriac
    "\u0964\u0965\u104a\u104b\u1362\u1367\u1368"  # Devanagari, Myanmar, Ethiopic
    "\u166e\u17d4\u17d5\u1803\u1809"  # Canadian syllabics, Khmer, Mongolian
    "\u203c\u203d\u2047\u2048\u2049"  # double marks
    "\u3002\ufe12\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61"  # CJK and full-width forms
)
# C4 reference code: END_MARKS and ELLIPSIS, citations, policy phrases.
C4_END_MARKS: tuple[str, ...] = (".", "?", "!", '"', "'")
# Every other language: C4's marks, every script's sentence terminals, and closing quotes.
C4_END_MARKS_ANY: tuple[str, ...] = (*C4_END_MARKS, *TERMINAL_PUNCT, "」", "』", "”", "’", "»", ")", "）")
C4_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
# A line can pass the end-mark rule only if it ends with a mark or a citation's "]".
_C4_SCREEN: tuple[str, ...] = (*C4_END_MARKS, "]")
_C4_SCREEN_ANY: tuple[str, ...] = (*C4_END_MARKS_ANY, "]")
C4_POLICY: tuple[str, ...] = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
# Inside a line, a sentence ends at terminal punctuation (maybe closed by quotes or brackets)
# followed by a space or tab.
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=[^\S\n])")
# Scripts that put no space after a full stop (CJK): a terminal followed by more of the line.
_SENTENCE_END_CJK = re.compile(r"[。！？｡]+[」』”’)）]*(?=[^\n])")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# A whitespace token with no letter in it: a run of non-word characters, digits, underscores.
_NO_LETTER_WORD = re.compile(r"(?<!\S)(?:[^\w\s]|[\d_])+(?!\S)")


# --------------------------------------------------------------------------- splitting
@dataclass(frozen=True, slots=True)
class Parts:
    """A text split once, shared by every rule family."""

    text: str
    words: list[str]  # whitespace tokens, or a segmenter's words (data/steps/segment.py)
    lines: list[str]  # stripped, non-empty
    paragraphs: list[str]  # stripped, non-empty blocks between blank lines
    vocab: list[str]  # distinct words, in order of first occurrence
    index: dict[str, int]  # vocab[index[w]] == w
    ids: np.ndarray  # words[i] == vocab[ids[i]]
    word_counts: np.ndarray  # occurrences of each vocab entry
    line_words: dict[str, int] | None = None  # words per line where words are not whitespace tokens


def split_text(text: str, language: str | None = None) -> Parts:
    lines = list(filter(None, map(str.strip, text.split("\n"))))  # C-level map/filter
    line_words: dict[str, int] | None = None
    if language in segment.SEGMENTED:
        per_line = [segment.words(line, language) for line in lines]
        words = [w for ws in per_line for w in ws]
        line_words = {line: len(ws) for line, ws in zip(lines, per_line)}
    else:
        words = text.split()
    paras = list(filter(None, map(str.strip, _PARAGRAPH_BREAK.split(text))))
    # Interned once (C-level dict and map): per-word work below runs on distinct words only.
    index = dict(zip(dict.fromkeys(words), itertools.count()))
    ids = np.fromiter(map(index.__getitem__, words), dtype=np.int64, count=len(words))
    return Parts(text, words, lines, paras, list(index), index, ids, np.bincount(ids, minlength=len(index)), line_words)


def stop_word_key(word: str) -> str:
    """A word as the stop-word rule compares it: lower case, surrounding punctuation stripped."""
    return word.lower().strip(_PUNCT)


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


# --------------------------------------------------------------------------- Gopher quality
def gopher_signals(p: Parts, stop_words: frozenset[str] = STOP_WORDS) -> dict[str, float | int]:
    """The Gopher quality measurements (on the words of `split_text`)."""
    text, words, lines = p.text, p.words, p.lines
    n_words, n_lines = len(words), len(lines)
    hashes = _ratio(text.count("#"), n_words)
    ellipses = _ratio(text.count("...") + text.count("…"), n_words)
    # Letters and stop words are looked for in the distinct words only (a third of the text).
    joined = " ".join(p.vocab)
    no_letter = int(p.word_counts[[p.index[w] for w in _NO_LETTER_WORD.findall(joined)]].sum())
    distinct = set(map(stop_word_key, p.vocab))
    return {
        "n_chars": len(text),
        "n_lines": n_lines,
        "n_words": n_words,
        "mean_word_len": _ratio(sum(map(len, words)), n_words),
        "hash_word_ratio": hashes,
        "ellipsis_word_ratio": ellipses,
        # Gopher's rule is "> 0.1 for either the hash symbol or the ellipsis": keep the worse.
        "symbol_word_ratio": max(hashes, ellipses),
        "bullet_line_frac": _ratio(sum(line.startswith(BULLETS) for line in lines), n_lines),
        "ellipsis_line_frac": _ratio(sum(line.endswith(ELLIPSES) for line in lines), n_lines),
        "alpha_word_frac": _ratio(n_words - no_letter, n_words),
        "n_stop_words": len(stop_words & distinct),
    }


# --------------------------------------------------------------------------- Gopher repetition
TEXT_LINE_WORDS = 4  # a shorter line is a label ("Examples", "Added in: v15.0.0"), not text


def _dup_fracs(units: list[str]) -> tuple[float, float]:
    """(share of units repeating an earlier one, share of their characters in such repeats)."""
    if not units:
        return 0.0, 0.0
    unique = set(units)
    total_chars = sum(map(len, units))
    dup_chars = total_chars - sum(map(len, unique))
    return (len(units) - len(unique)) / len(units), _ratio(dup_chars, total_chars)


def ngram_counts(ids: np.ndarray, word_counts: np.ndarray, n_max: int) -> list[np.ndarray]:
    """counts[n][i]: occurrences in the text of the n-gram starting at word i (n = 1..n_max;
    counts[0] unused), from interned word ids. Exact: n-gram ids are dense ranks, never hashes."""
    m = len(ids)
    vocab = max(len(word_counts), 1)
    counts: list[np.ndarray] = [np.zeros(0, np.int64), word_counts[ids]]
    gid = ids  # dense id of the (n-1)-gram at each position; valid where it repeats
    for n in range(2, n_max + 1):
        size = m - n + 1
        if size <= 0:
            counts.append(np.zeros(0, np.int64))
            continue
        cnt = np.ones(size, np.int64)
        cand = np.flatnonzero(counts[n - 1][:size] >= 2)  # only a repeated prefix can repeat
        next_gid = np.full(size, -1, np.int64)
        if cand.size:
            keys = gid[cand] * vocab + ids[cand + n - 1]
            _, inverse, uniq_counts = np.unique(keys, return_inverse=True, return_counts=True)
            cnt[cand] = uniq_counts[inverse]
            next_gid[cand] = inverse
        counts.append(cnt)
        gid = next_gid
    return counts


def text_lines(lines: list[str]) -> list[str]:
    """The lines that are text: at least TEXT_LINE_WORDS words and not code (kind_detect's code line;
    the lines here are stripped, so its indentation test never fires and a keyword or an ending decides)."""
    return [x for x in lines if len(x.split()) >= TEXT_LINE_WORDS and not is_code_line(x)]


def repetition_signals(p: Parts) -> dict[str, float]:
    """The Gopher repetition measurements (see the module docstring for the definitions)."""
    dup_line, dup_line_chars = _dup_fracs(p.lines)
    dup_para, dup_para_chars = _dup_fracs(p.paragraphs)
    out: dict[str, float] = {
        "dup_line_frac": dup_line,
        "dup_para_frac": dup_para,
        "dup_line_char_frac": dup_line_chars,
        "dup_para_char_frac": dup_para_chars,
        # No repeated line, no repeated text line: the code-line test runs only where lines repeat.
        "dup_text_line_char_frac": _dup_fracs(text_lines(p.lines))[1] if dup_line else 0.0,
    }
    words = p.words
    lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    total = int(lens.sum())
    cum = np.concatenate(([0], np.cumsum(lens)))
    counts = ngram_counts(p.ids, p.word_counts, max(DUP_NGRAMS))
    for n in TOP_NGRAMS:
        c = counts[n]
        top = int(c.max()) if c.size else 0
        if top < 2:
            out[f"top_{n}gram_char_frac"] = 0.0
            continue
        window_chars = cum[n:] - cum[:-n]
        out[f"top_{n}gram_char_frac"] = top * int(window_chars[c == top].max()) / total
    for n in DUP_NGRAMS:
        starts = (counts[n] >= 2).astype(np.int32)
        if not starts.any():
            out[f"dup_{n}gram_char_frac"] = 0.0
            continue
        # Word j is covered when an n-gram starting at j-n+1 .. j repeats: a length-n box sum.
        covered = np.convolve(starts, np.ones(n, np.int32))[: len(words)] > 0
        out[f"dup_{n}gram_char_frac"] = int(lens[covered].sum()) / total
    return out


BOOK_UNIT_WORDS = 5000  # a chapter-sized unit of a book, for the repetition rules


def book_units(text: str, unit_words: int = BOOK_UNIT_WORDS) -> list[str]:
    """A long text cut at paragraph breaks into units of at least unit_words words (the last
    unit takes the remainder; a text shorter than two units is one unit)."""
    units: list[str] = []
    current: list[str] = []
    n = 0
    for para in _PARAGRAPH_BREAK.split(text):
        current.append(para)
        n += len(para.split())
        if n >= unit_words:
            units.append("\n\n".join(current))
            current, n = [], 0
    if current:
        if units and n < unit_words // 2:
            units[-1] += "\n\n" + "\n\n".join(current)  # a short tail joins the last unit
        else:
            units.append("\n\n".join(current))
    return units or [text]


def book_repetition_signals(text: str, language: str | None = None, parts: Parts | None = None) -> dict[str, float]:
    """The repetition signals of a book: each one's median over its chapter-sized units.

    Repeated n-grams accumulate with length: a 100,000-word book repeats more 5-grams by chance
    than the web page Gopher's thresholds were set on (Genesis, KJV: 0.171 whole, a median 0.117
    over 5,000-word units; the limit is 0.15). The median unit says whether the book repeats
    itself the way a spam page does, whatever its length. `parts`: the whole text already split
    (used as is when the book is a single unit, so it is not segmented twice)."""
    units = book_units(text)
    if len(units) == 1:
        return repetition_signals(parts if parts is not None else split_text(text, language))
    per_unit = [repetition_signals(split_text(u, language)) for u in units]
    return {k: float(np.median([u[k] for u in per_unit])) for k in per_unit[0]}


# --------------------------------------------------------------------------- C4
@dataclass(frozen=True, slots=True)
class C4Lines:
    """What C4's line rules do to a text's lines."""

    kept: list[str]
    sentences: int
    lorem_ipsum: int  # lines that pass the length and punctuation rules and say 'lorem ipsum'
    curly_bracket: int  # ... and hold '{' (not already dropped for 'javascript')
    javascript: int
    policy: int


def c4_lines(
    lines: list[str], min_words: int, max_word_len: int, english: bool = True, line_words: dict[str, int] | None = None
) -> C4Lines:
    """C4's line rules on stripped non-empty lines. The three that only drop a line (long
    word, end mark, word count) are tested cheapest first; the counted ones in reference order.
    `english=False`: every script's sentence terminals end a line and a sentence; `line_words`:
    words per line for segmented languages (whitespace tokens otherwise)."""
    kept: list[str] = []
    lorem = curly = javascript = policy = 0
    marks, screen = (C4_END_MARKS, _C4_SCREEN) if english else (C4_END_MARKS_ANY, _C4_SCREEN_ANY)
    # Most lines fail the end-mark rule; a comprehension screens them out at C speed first.
    ends = [(o, C4_CITATION.sub("", o) if "[" in o else o) for o in lines if o.endswith(screen)]
    for original, line in ends:
        if not line.endswith(marks) or line.endswith("..."):
            continue
        words = original.split()  # the reference counts words before removing citations
        n_words = line_words[original] if line_words is not None else len(words)
        if n_words < min_words or (len(original) > max_word_len and max(map(len, words)) > max_word_len):
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            lorem += 1
        if "javascript" in lower:
            javascript += 1
            continue
        if "{" in line:
            curly += 1
        if any(phrase in lower for phrase in C4_POLICY):
            policy += 1
            continue
        kept.append(line)
    # A kept line ends a sentence; each terminal mark followed by a space inside it ends another.
    joined = "\n".join(kept)
    sentences = len(kept) + len(_SENTENCE_END.findall(joined))
    if not english:
        sentences += len(_SENTENCE_END_CJK.findall(joined))
    return C4Lines(kept, sentences, lorem, curly, javascript, policy)


def c4_signals(c4: C4Lines, n_lines: int) -> dict[str, float | int]:
    return {
        "c4_kept_line_frac": _ratio(len(c4.kept), n_lines),
        "c4_sentences": c4.sentences,
        "c4_lorem_ipsum_lines": c4.lorem_ipsum,
        "c4_curly_bracket_lines": c4.curly_bracket,
        "c4_javascript_lines": c4.javascript,
        "c4_policy_lines": c4.policy,
    }


# --------------------------------------------------------------------------- FineWeb
def fineweb_signals(p: Parts, short_line_chars: int) -> dict[str, float]:
    lines = p.lines
    n = len(lines)
    repeated = sum(map(len, lines)) - sum(map(len, set(lines)))
    return {
        "line_punct_frac": _ratio(sum(line.endswith(TERMINAL_PUNCT) for line in lines), n),
        "short_line_frac": _ratio(sum(len(line) <= short_line_chars for line in lines), n),
        "char_dup_frac": _ratio(repeated, len(p.text) - p.text.count("\n")),
        "newline_word_ratio": _ratio(p.text.count("\n"), len(p.words)),
    }


# --------------------------------------------------------------------------- all signals
def measure(
    text: str,
    cfg: QualityConfig | None = None,
    language: str | None = None,
    rules: LanguageRules | None = None,
    book: bool = False,
) -> tuple[dict[str, float | int], C4Lines]:
    """Every signal of QUALITY_FIELDS, and C4's line decisions (for `c4_remove_lines`). With
    `rules` (data/steps/language_profiles.py) the text is measured the way its language needs: words
    segmented, that language's stop words and line lengths, every script's sentence ends;
    `language` alone only segments. `book`: repetition signals are medians over chapter-sized
    units (`book_repetition_signals`)."""
    cfg = rules.cfg if rules is not None else cfg or QualityConfig()
    if rules is not None:
        language = rules.language
    parts = split_text(text, language)
    english = rules.english_c4 if rules is not None else True
    c4 = c4_lines(parts.lines, cfg.c4_min_words_per_line, cfg.c4_max_word_len, english, parts.line_words)
    stop = rules.stop_words if rules is not None else STOP_WORDS
    repetition = book_repetition_signals(text, language, parts) if book else repetition_signals(parts)
    signals = {
        **gopher_signals(parts, stop),
        **repetition,
        **c4_signals(c4, len(parts.lines)),
        **fineweb_signals(parts, cfg.short_line_chars),
        "near_miss_word_frac": near_miss_word_frac(parts.words),
        **code_signals(text),
    }
    assert signals.keys() == QUALITY_FIELDS.keys()  # the Parquet schema is the contract
    return signals, c4


def quality_signals(text: str, cfg: QualityConfig | None = None) -> dict[str, float | int]:
    """Every measurement of a text, keyed as QUALITY_FIELDS."""
    return measure(text, cfg)[0]


# --------------------------------------------------------------------------- rules
def _reject(rule: str, signal: str, value: float | int, op: str, limit: float | int, family: str) -> Rejection:
    shown = format_value(value)
    return Rejection("quality", rule, shown, f"{signal} {shown} {op} {limit} ({family} rule {rule})")


def _below(s: dict, signal: str, limit: float, family: str, rule: str | None = None) -> Rejection | None:
    return _reject(rule or f"min_{signal}", signal, s[signal], "<", limit, family) if s[signal] < limit else None


def _above(s: dict, signal: str, limit: float, family: str, rule: str | None = None) -> Rejection | None:
    return _reject(rule or f"max_{signal}", signal, s[signal], ">", limit, family) if s[signal] > limit else None


def _first(*checks: Rejection | None) -> Rejection | None:
    return next((c for c in checks if c is not None), None)


def check_min_chars(n_chars: int, min_chars: int) -> Rejection | None:
    """The length floor applies to every bucket: an almost empty document teaches nothing."""
    if n_chars < min_chars:
        return _reject("min_chars", "n_chars", n_chars, "<", min_chars, "length")
    return None


def check_gopher(s: dict[str, float | int], cfg: QualityConfig) -> Rejection | None:
    """The first Gopher quality rule the signals break, in the paper's order."""
    return _first(*gopher_checks(s, cfg))


def gopher_checks(s: dict[str, float | int], cfg: QualityConfig) -> list[Rejection | None]:
    g = "gopher"
    return [
        _below(s, "n_words", cfg.min_words, g, "min_words"),
        _above(s, "n_words", cfg.max_words, g, "max_words"),
        _below(s, "mean_word_len", cfg.min_mean_word_len, g),
        _above(s, "mean_word_len", cfg.max_mean_word_len, g),
        _above(s, "symbol_word_ratio", cfg.max_symbol_word_ratio, g),
        _above(s, "bullet_line_frac", cfg.max_bullet_line_frac, g),
        _above(s, "ellipsis_line_frac", cfg.max_ellipsis_line_frac, g),
        _below(s, "alpha_word_frac", cfg.min_alpha_word_frac, g),
        _below(s, "n_stop_words", cfg.min_stop_words, g, "min_stop_words"),
    ]


def check_repetition(s: dict[str, float | int], cfg: QualityConfig) -> Rejection | None:
    """The first Gopher repetition rule broken, in Table A1's order."""
    return _first(*repetition_checks(s, cfg))


def repetition_checks(s: dict[str, float | int], cfg: QualityConfig) -> list[Rejection | None]:
    g = "gopher_repetition"
    return [
        _above(s, "dup_line_frac", cfg.max_dup_line_frac, g),
        _above(s, "dup_para_frac", cfg.max_dup_para_frac, g),
        _above(s, "dup_line_char_frac", cfg.max_dup_line_char_frac, g),
        _above(s, "dup_para_char_frac", cfg.max_dup_para_char_frac, g),
        _above(s, "dup_text_line_char_frac", cfg.max_dup_text_line_char_frac, g),
        *(_above(s, f"top_{n}gram_char_frac", lim, g) for n, lim in sorted(cfg.max_top_ngram_char_frac.items())),
        *(_above(s, f"dup_{n}gram_char_frac", lim, g) for n, lim in sorted(cfg.max_dup_ngram_char_frac.items())),
    ]


def check_c4(s: dict[str, float | int], cfg: QualityConfig) -> Rejection | None:
    """C4's document rules: lorem ipsum, curly bracket, too few sentences in the kept lines."""
    return _first(*c4_checks(s, cfg))


def c4_checks(s: dict[str, float | int], cfg: QualityConfig) -> list[Rejection | None]:
    g = "c4"
    return [
        _above(s, "c4_lorem_ipsum_lines", 0, g, "c4_lorem_ipsum"),
        _above(s, "c4_curly_bracket_lines", 0, g, "c4_curly_bracket") if cfg.c4_curly_bracket else None,
        _below(s, "c4_sentences", cfg.c4_min_sentences, g, "c4_min_sentences"),
    ]


def check_fineweb(s: dict[str, float | int], cfg: QualityConfig) -> Rejection | None:
    return _first(*fineweb_checks(s, cfg))


def fineweb_checks(s: dict[str, float | int], cfg: QualityConfig) -> list[Rejection | None]:
    g = "fineweb"
    return [
        _below(s, "line_punct_frac", cfg.min_line_punct_frac, g),
        _above(s, "short_line_frac", cfg.max_short_line_frac, g),
        _above(s, "char_dup_frac", cfg.max_char_dup_frac, g),
        _above(s, "newline_word_ratio", cfg.max_newline_word_ratio, g),
    ]


def check_garble(s: dict[str, float | int], cfg: QualityConfig) -> Rejection | None:
    """Garbled words (data/steps/garble.py): many rare one-letter variants of the text's own words."""
    return _above(s, "near_miss_word_frac", cfg.max_near_miss_word_frac, "garble")


def check_code_rules(s: dict[str, float | int], cfg: QualityConfig) -> Rejection | None:
    return check_code(s, cfg.code_max_line_len, cfg.code_max_mean_line_len, cfg.code_min_alnum_frac, cfg.code_autogenerated)


CHECKS = (
    ("gopher", check_gopher),
    ("gopher_repetition", check_repetition),
    ("c4", check_c4),
    ("fineweb", check_fineweb),
    ("garble", check_garble),
    ("code", check_code_rules),
)


def check_rules(s: dict[str, float | int], cfg: QualityConfig, apply: frozenset[str] | None = None) -> Rejection | None:
    """The first rule broken among the families in `apply` (default: the prose families the
    config enables: Gopher, repetition, C4, FineWeb), in that order."""
    apply = families("web", cfg) if apply is None else apply
    for name, check in CHECKS:
        if name in apply and (rejection := check(s, cfg)) is not None:
            return rejection
    return None


def failed_rules(s: dict[str, float | int], cfg: QualityConfig, apply: frozenset[str]) -> list[str]:
    """Every rule of the prose families in `apply` the signals break (not just the first): what
    a relaxed or tightened family would change, measured (benchmarks/bench_kind_detect.py)."""
    lists = {"gopher": gopher_checks, "gopher_repetition": repetition_checks, "c4": c4_checks, "fineweb": fineweb_checks}
    return [r.rule for name, checks in lists.items() if name in apply for r in checks(s, cfg) if r is not None]


def kind_thresholds(kind: QualityKind, cfg: QualityConfig) -> QualityConfig:
    """The thresholds a kind is judged with: the language's (`cfg`) with what the kind changes."""
    update: dict[str, object] = {}
    if kind == "books":
        # A novel is longer than Gopher's 100,000 words. Duplicated 5-10-grams measure
        # formulaic style in long-form text ("And the LORD spake unto Moses, saying"),
        # not spam: the median 5,000-word unit of Numbers (KJV) covers 0.22 against
        # Austen's 0.005 (benchmarks/bench_quality_languages.py); duplicate lines and
        # paragraphs and the top n-grams still catch a book pasted twice or padded.
        update.update({"max_words": 2**62, "max_dup_ngram_char_frac": {}})
    if kind == "prose":
        # The same formulaic style in passages of scripture and sermons: of 200 design passages
        # of the World English Bible (1,500-6,000 characters), 19 broke max_dup_5gram_char_frac
        # ("and the LORD said to Moses"). Duplicate lines, paragraphs and the top n-grams still
        # judge repetition; web pages keep the duplicated n-gram rules.
        update.update({"max_dup_ngram_char_frac": {}})
    if kind == "reference":
        # Manuals show code (C4's curly bracket) and repeat their own labels, commands
        # and phrasing ("Return the ...", a signature per method): of 1,054 real manual
        # pages and sections, FineWeb's duplicated-line rule breaks 51% and Gopher's
        # duplicated 5-gram rule 19% (benchmarks/bench_kind_detect.py, `manual_rules`).
        update.update({"c4_curly_bracket": False, "max_dup_ngram_char_frac": {}})
        # They also repeat short labels ("Changed in version 3.3.", "Example:", a prompt):
        # a third of an API page's lines by count, a tenth by characters. The count rules
        # are off; their character twins (max_dup_line/para_char_frac) still judge.
        update.update({"max_dup_line_frac": 1.0, "max_dup_para_frac": 1.0})
        # Gopher's '#' / '...' per word rule finds hashtags and truncated snippets. In a
        # manual '#' is a root prompt, a comment, an #include or a heading, and '...' is
        # Python's continuation prompt: the installation guide's cross-install page (a
        # shell session) measures 0.107 in every language. The rule is off for manuals.
        update.update({"max_symbol_word_ratio": 1e9})
        # Gopher's words-with-a-letter floor (80%) finds symbol and number soup. A manual
        # numbers its sections ("5.1.3. Booting from USB"), versions and table cells: the
        # contents pages of the installation guide measure 0.57-0.80 (a Chinese title is two or
        # three words beside its number). The rule is off for manuals; the length floor, the
        # stop words and the repetition rules still judge them.
        update.update({"min_alpha_word_frac": 0.0})
        # Gopher's most-frequent-n-gram shares (2-4 words) find a phrase stuffed into a page. A
        # reference page describes the columns of a table or the arguments of a call in one
        # phrasing ("Name of the database that contains the ..."): 19 of PostgreSQL's 1,169 pages
        # (information-schema views, catalogs, SPI calls) measure over the limits, 0.16-0.20 for
        # 4-grams. They are off for manuals, as the duplicated 5-10-gram rules already were; the
        # duplicated line and paragraph character shares still judge repetition.
        update.update({"max_top_ngram_char_frac": {}})
        # Their duplicated-line character share counts text lines only: an API page's examples repeat
        # their imports and closing brackets ("});" 66 times on Node.js's events page) and its entries
        # their labels ("source", "Run", "History"). Measured on the spent fresh sets, counting text
        # lines (not code, 4+ words) keeps 6 of the 13 Node.js pages and 13 of the 30 rustdoc pages the
        # share removed; of the dirty-web junk judged as a manual, every repeated-paragraph page still fails.
        # Gopher's limits on those shares (a fifth of the characters) were set on web pages. A reference
        # page repeats whole sentences by design: each entry restates what it shares with its siblings
        # (Maxima's QUADPACK entries each describe epsrel, epsabs and limit; rustdoc's trait methods say
        # "Performs the << operation." 92 times on i64's page), and each example reloads its package.
        # A manual is judged repetitive when more than half of it repeats itself: above the 99.9th
        # percentile of 6,816 design manual pages over the length floor (paragraphs 0.37, text lines 0.46;
        # 5 pages are over, rustdoc's fn primitive, the same 76 impls, at 0.64 the most), and below
        # every repeated-paragraph page of the dirty-web design corpus (0.75 and up: four or more copies).
        limit = REFERENCE_MAX_DUP_CHAR_FRAC
        update.update({"max_dup_line_char_frac": 1.0, "max_dup_text_line_char_frac": max(cfg.max_dup_line_char_frac, limit)})
        update.update({"max_dup_para_char_frac": max(cfg.max_dup_para_char_frac, limit)})
    if kind != "web" and kind != "code":
        # Gopher's 50-word and C4's five-sentence floors remove web stubs. A manual's
        # section, a chapter's opening paragraph or a short note of sentences is complete
        # at 35 words and two sentences (of 2,921 handbook and 1,008 installation-guide
        # pages, 3 and 4-7 per language were such sections); the length floor
        # (`min_chars`) still applies.
        update.update({"min_words": 0, "c4_min_sentences": 0})
    return cfg.model_copy(update=update) if update else cfg


# --------------------------------------------------------------------------- the step
class Quality(DocStep):
    """Signals on every document; the length floor everywhere; each kind's rule families
    (data/steps/text_kinds.py) with each language's thresholds (data/steps/language_profiles.py).

    `applies` is True for every document (signals are compared across buckets in the report);
    the skip buckets only turn the rule families off.
    """

    name = "quality"
    version = VERSION

    def setup(self, work_dir: Path | None) -> None:
        qcfg = self.cfg.quality
        self._profiles = load_profiles(qcfg.language_profiles) if qcfg.language_rules else {}
        self._judges: dict[tuple[str | None, str], Judge] = {}

    def judge(self, language: str | None, kind: QualityKind) -> Judge:
        """How documents of one language and kind are measured and judged (built once each)."""
        if not hasattr(self, "_judges"):
            self.setup(None)
        key = (language, kind)
        if key not in self._judges:
            qcfg = self.cfg.quality
            rules = rules_for(language if kind != "code" else None, qcfg, self._profiles)
            cfg = kind_thresholds(kind, rules.cfg)
            self._judges[key] = Judge(rules, cfg, families(kind, qcfg), kind == "books")
        return self._judges[key]

    def process(self, doc: Doc) -> Rejection | None:
        qcfg = self.cfg.quality
        text = doc.text or ""
        judge = self.judge(doc.language, assign_kind(doc, qcfg))  # normalize's, or decided here
        doc.quality, c4 = measure(text, rules=judge.rules, book=judge.book)
        min_chars = judge.rules.min_chars(self.cfg.min_chars)
        rejection = check_min_chars(len(text), min_chars)
        if rejection is not None or doc.bucket in qcfg.skip_buckets:
            return rejection
        rejection = check_rules(doc.quality, judge.cfg, judge.apply)
        if rejection is None and "c4" in judge.apply and qcfg.c4_remove_lines:
            doc.text = "\n".join(c4.kept)
            rejection = check_min_chars(len(doc.text), min_chars)
        return rejection


@dataclass(frozen=True, slots=True)
class Judge:
    """The rules one (language, kind) gets: how to measure, the thresholds, the families."""

    rules: LanguageRules
    cfg: QualityConfig
    apply: frozenset[str]
    book: bool = False  # repetition judged on chapter-sized units
