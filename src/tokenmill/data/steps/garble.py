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
nothing. Found with a masked-position index of the common words (one entry per position), so
the cost is linear in the text's distinct words times their length.

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
_MASK = "\0"


def near_miss_word_frac(words: list[str]) -> float:
    """Share of `words` that are rare one-substitution variants of a common word of the same text."""
    keys = [k for k in (_EDGE_PUNCT.sub("", w).lower() for w in words) if len(k) >= 2]
    if len(keys) < MIN_WORDS:
        return 0.0
    counts = Counter(keys)
    common = {w: n for w, n in counts.items() if n >= COMMON and len(w) >= 3}
    masked: dict[str, list[str]] = defaultdict(list)
    for w in common:
        for i in range(len(w)):
            masked[w[:i] + _MASK + w[i + 1 :]].append(w)
    variants = 0
    for v, n in counts.items():
        if len(v) < 3:
            continue
        for i in range(len(v)):
            found = masked.get(v[:i] + _MASK + v[i + 1 :])
            if found and any(common[w] >= RATIO * n for w in found):
                variants += n
                break
    return variants / len(keys)
