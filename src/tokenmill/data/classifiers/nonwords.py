"""Non-words near the reference's words: how much of a text is words the reference LM never saw
that sit one edit away from words it saw often.

OCR damage ("tbe", "rnore", "c1ear") and typing errors ("teh", "recieve", "lettter") turn common
words into strings no dictionary holds, but that are one letter away from a word every dictionary
holds. The reference the user names is that dictionary: the n-gram LM's vocabulary. A clean text
also holds words the reference never saw (names, identifiers, rare or new words), but few of them
are one letter away from a common word; a misspelt text holds many. So:

    nonword_frac = (words of 4+ letters that are not in the LM's vocabulary and are within one
                    edit of one of its COMMON_WORDS most probable words) / (words of 4+ letters)

Only the commonest words count as the misspelt originals: damage hits every word alike, so the
common words' misspellings are always there, while a clean text's near-misses (inflections, old
spellings, identifiers) sit mostly beside rarer words. With the 20,000 commonest, clean design text
reached 0.357 (an archaic Spanish Bible) and a cut above it removed nothing on a held-out set
(BENCHMARKS.md); with the 1,000 commonest its median is 0.006.

Words are the LM's tokens (ngram_lm.tokenize: lower-cased, accents stripped, digits as 0) made of
letters only. One edit is a substitution, a deletion, an insertion or a swap of two neighbouring
letters, found the symmetric-delete way: a word is near a common word when one of them, or one
letter deleted from each, is the same string. (Deleting one letter from each side also matches
a few words two edits apart, such as two substitutions of neighbouring letters; the signal counts
them too.) A text with fewer than MIN_WORDS such words is not measured (None). Cost: one set lookup
per distinct word and per letter of its length.

The cut (model_quality.max_nonword_frac, 0.13) is set on clean text only: the 99.9th percentile of
3,108 clean design texts (0.1205), rounded up; see benchmarks/design_nonword_cut.py.
"""

from __future__ import annotations

import numpy as np

from tokenmill.data.classifiers.ngram_lm import BOS_ID, EOS_ID, UNK_ID, NgramLM

COMMON_WORDS = 1_000  # the near-miss must be near one of the LM's 1,000 most probable words
MIN_LETTERS = 4  # shorter words are not judged: too many short strings are one edit from a word
MIN_WORDS = 100  # fewer judged words: no measurement


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


class NearWords:
    """The reference's vocabulary and the one-deletion index of its common words."""

    def __init__(self, lm: NgramLM, common: int = COMMON_WORDS) -> None:
        special = {UNK_ID, BOS_ID, EOS_ID}
        self.known = frozenset(w for i, w in enumerate(lm.vocab) if i not in special)
        by_probability = np.argsort(-lm.uni_logp.astype(np.float64), kind="stable")
        words = [lm.vocab[i] for i in by_probability if i not in special and lm.vocab[i].isalpha()]
        self.common = frozenset(w for w in words[:common] if len(w) >= MIN_LETTERS - 1)
        self.deleted = frozenset(d for w in self.common for d in _deletions(w))
        # A word longer than this cannot match (each side loses at most one letter): it is never
        # expanded, so a hostile "word" of a million letters costs one length check, not a
        # million deletions of a million letters each.
        self.max_len = max(map(len, self.common), default=0) + 1

    def near_miss(self, word: str) -> bool:
        """Not a known word, and one edit from a common one (see the module docstring)."""
        if word in self.known or len(word) > self.max_len:
            return False
        if word in self.deleted:  # a common word with one letter dropped
            return True
        return any(d in self.common or d in self.deleted for d in _deletions(word))

    def frac(self, tokens: list[str]) -> float | None:
        """nonword_frac of a tokenized text; None with fewer than MIN_WORDS judged words."""
        counts: dict[str, int] = {}
        for t in tokens:
            if len(t) >= MIN_LETTERS and t.isalpha():
                counts[t] = counts.get(t, 0) + 1
        total = sum(counts.values())
        if total < MIN_WORDS:
            return None
        return sum(n for w, n in counts.items() if self.near_miss(w)) / total
