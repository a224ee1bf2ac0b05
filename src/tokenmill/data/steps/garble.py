"""Garbled words: how much of a text is rare one-letter variants of its own common words.

OCR damage and typo spam rewrite a text's common words into many rare variants ("the" into
"thc", "tbe", "th0"), while a clean text spells each word one way. The signal needs no dictionary,
no reference and no language model, so it works in any language written with spaces:

  near_miss_word_frac   share of the text's words (lower-cased, surrounding punctuation
                        stripped, 2+ characters) that differ by one substituted character from
                        a word of 3+ characters that occurs at least COMMON times and at least
                        RATIO times as often

A substitution only (no insertion or deletion): a rare plural or inflection of a common word
("file" / "files") is not a variant. A text under MIN_WORDS words measures 0: its counts say
nothing. Two words of one length one substitution apart share one half exactly, so the common
words are indexed by their halves and each distinct word is looked up twice: the cost is linear in
the text's distinct words.

The cut (`quality.max_near_miss_word_frac`, 0.06) was set on clean text only, never on a
corruption: across design collections of benchmarks/frozen/quality_signal.json (5,342 pages and
passages: the Python docs, the Debian handbook in 23 languages, the i386 installation guide, the
Debian history, trafilatura's test pages, the dirty-web benchmark's clean prose and documentation,
and passages of the World English Bible, Austen and Spurgeon) the median is 0.004, the 99th
percentile 0.023 and the largest 0.046 (a Korean installation-guide page; German compounds and
Vietnamese syllables come next). That the signal rises on misspelt text was checked on a generic
one-letter substitution of our own (tests/data/steps/test_garble.py), not on any benchmark's
corruption. The distribution is benchmarks/design_garble_cut.py's, in
benchmarks/results/design_garble_cut.json.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

MIN_WORDS = 100  # fewer words: the signal is 0, not judged
COMMON = 3  # a common word occurs at least this often...
RATIO = 5  # ...and at least this many times as often as its variant
_EDGE_PUNCT = re.compile(r"^\W+|\W+$")


def _key(token: str) -> str:
    """A token lower-cased with its surrounding punctuation (non-word characters) stripped; the
    regex only runs on the few tokens that start or end with one."""
    if (token[0].isalnum() or token[0] == "_") and (token[-1].isalnum() or token[-1] == "_"):
        return token.lower()
    return _EDGE_PUNCT.sub("", token).lower()


def _halves(word: str) -> tuple[tuple[int, int, str], tuple[int, int, str]]:
    """Two words of one length one substitution apart share one of their halves exactly."""
    h = len(word) // 2
    return (len(word), 0, word[:h]), (len(word), 1, word[h:])


def near_miss_word_frac(words: list[str]) -> float:
    """Share of `words` that are rare one-substitution variants of a common word of the same text."""
    counts: Counter[str] = Counter()
    for token, n in Counter(words).items():  # each distinct token is stripped once
        key = _key(token)
        if len(key) >= 2:
            counts[key] += n
    total = sum(counts.values())
    if total < MIN_WORDS:
        return 0.0
    common = {w: n for w, n in counts.items() if n >= COMMON and len(w) >= 3}
    top = max(common.values(), default=0)
    by_half: dict[tuple[int, int, str], list[str]] = defaultdict(list)
    for w in common:
        for half in _halves(w):
            by_half[half].append(w)
    variants = 0
    for v, n in counts.items():
        if len(v) < 3 or RATIO * n > top:
            continue
        if any(
            common[w] >= RATIO * n and sum(a != b for a, b in zip(v, w)) == 1
            for half in _halves(v)
            for w in by_half.get(half, ())
        ):
            variants += n
    return variants / total
