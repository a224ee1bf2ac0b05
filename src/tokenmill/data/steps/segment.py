"""Words for the quality rules, the way each language writes them.

Gopher's and C4's rules count whitespace tokens. Chinese and Japanese put no spaces between
words, so a whitespace "word" there is a whole clause or line: a Chinese page measured that way
has a mean word length of 30-60 characters and fails Gopher's 3-10 rule every time. For those
languages a maintained segmenter from the registry splits the text into words first:

- Chinese (`zh`): jieba's dictionary segmentation (the segmenter spaCy's Chinese pipeline and
  most Chinese corpus tools default to), run by jieba-rs through `rjieba` (Rust, no start-up
  cost; ~0.5 ms for a 5,600-character page where Python jieba takes ~16 ms), without jieba's HMM
  for unknown words (whose two implementations disagree; without it they agree word for word);
- Japanese (`ja`): MeCab through fugashi, with the unidic-lite dictionary (both wheels; MeCab is
  C, ~1 M characters/s here).

Everywhere else words stay whitespace tokens, as in Gopher and C4, so English measurements are
exactly those every published threshold and every earlier BENCHMARKS.md figure was taken with
(punctuation attached to a word is stripped only where a rule looks words up, e.g. stop words).

A segmenter's tokens are made to look like whitespace tokens: spaces are dropped and a token
with no letter or digit (a punctuation mark) is glued to the word before it, as "word." is one
whitespace token in English. So the "words with a letter" and "mean word length" rules mean the
same thing in every language. Text is segmented line by line (MeCab's input is a line; a very
long line is cut at CHUNK characters, a cut that can split at most one word per chunk).
"""

from __future__ import annotations

import functools
import re
from typing import Callable

SEGMENTED: dict[str, str] = {"zh": "rjieba", "ja": "fugashi+unidic-lite"}
CHUNK = 4096  # characters per segmenter call on a very long line
_HAS_WORD_CHAR = re.compile(r"\w")


@functools.cache
def _jieba() -> Callable[[str], list[str]]:
    import rjieba

    # Dictionary segmentation without the HMM for unknown words: jieba-rs's output is then
    # identical to Python jieba's (HMM=False; all 60 handbook pages checked) at ~35x its speed.
    return lambda line: rjieba.cut(line, hmm=False)


@functools.cache
def _mecab() -> Callable[[str], list[str]]:
    import fugashi

    tagger = fugashi.Tagger("-Owakati")  # finds the installed unidic-lite dictionary itself
    return lambda line: tagger.parse(line).split(" ")


def _segmenter(language: str | None) -> Callable[[str], list[str]] | None:
    name = SEGMENTED.get(language or "")
    if name is None:
        return None
    return _jieba() if language == "zh" else _mecab()


def glue_punctuation(tokens: list[str]) -> list[str]:
    """Tokens as whitespace words: spaces dropped, a punctuation token glued to the word before
    (or, at the start, to the word after, as an opening quote is in English)."""
    out: list[str] = []
    lead = ""
    for tok in tokens:
        tok = tok.strip()
        if not tok:
            continue
        if not _HAS_WORD_CHAR.search(tok):
            if out:
                out[-1] += tok
            else:
                lead += tok
        else:
            out.append(lead + tok)
            lead = ""
    if lead:
        out.append(lead)
    return out


def words(text: str, language: str | None = None) -> list[str]:
    """The words of a text: segmented for `SEGMENTED` languages, whitespace tokens otherwise."""
    seg = _segmenter(language)
    if seg is None:
        return text.split()
    out: list[str] = []
    for line in text.split("\n"):
        if line.strip():  # one line's tokens are glued among themselves, never onto the line before
            out += glue_punctuation([t for i in range(0, len(line), CHUNK) for t in seg(line[i : i + CHUNK])])
    return out


def segmenter_versions() -> dict[str, str]:
    """Installed versions of the segmenters (part of the quality step's version)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("rjieba", "fugashi", "unidic-lite"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "missing"
    return out
