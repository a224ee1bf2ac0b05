"""A test of word order: does each word's previous word predict it better than nearby words do?

Natural text, in any language and on any topic the reference LM knows, has word order: the word
before a word predicts it better than the words around it. Word salad (a page's words in random
order, keyword stuffing) does not. The test compares, for every pair (v, w) of consecutive words
of a document, the bigram log probability log p(w | v) with the mean of log p(w | u) over previous
words u drawn from pairs near it (within `window` pairs, either side), and asks whether the mean
of these paired differences is above zero:

    d_i = log p(w_i | v_i) - mean_k log p(w_i | v_{i + o_ik}),   o_ik uniform in +-1..window
    gain = mean(d),  z = gain / (sd(d) / sqrt(n))

The next word is the same on both sides of d_i, so its unigram frequency cancels and the topic
and language of the document cancel too: the null is made of the document's own words, drawn near
the pair because a topic drifts through a document. Under the hypothesis that the order carries
no information (words in random order), gain is about 0 and z about standard normal, so a
one-sided level alpha fixes the cut with no corruption to calibrate it on: z below the normal's
1 - alpha quantile is "no evidence of word order". The d_i are not independent (neighbouring
pairs share words), so the level is approximate; what a level gives on held-out reference passages
is recorded in the step's manifest.

Only words (tokens with a letter) among the LM's most probable `judged` ones are paired, so that
a punctuation mark (which stays after the word it followed when words are moved around) and a
word the reference rarely uses (whose bigrams are mostly unseen) say nothing either way. Pairs do
not cross a line end. The draws are seeded by the document's word ids: the same text always
gets the same z.
"""

from __future__ import annotations

import math
import re
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from tokenmill.data.classifiers.ngram_lm import BOS_ID, EOS_ID, UNK_ID, NgramLM, frame

WINDOW = 20  # previous words of the null are drawn from pairs at most this far away
DRAWS = 4  # null previous words per pair (their mean is the pair's baseline)
_LETTER = re.compile(r"[^\W\d_]")


class OrderTest(NamedTuple):
    gain: float  # mean paired log-probability gain of the true previous word, nats per pair
    z: float  # gain over its standard error
    pairs: int  # consecutive judged word pairs the test used


def judged_words(lm: NgramLM, k: int) -> np.ndarray:
    """bool [V]: the LM's k most probable words that contain a letter (no punctuation, digits only,
    <unk>, <s> or </s>)."""
    words = np.array([bool(_LETTER.search(w)) for w in lm.vocab])
    words[[UNK_ID, BOS_ID, EOS_ID]] = False
    by_probability = np.argsort(-lm.uni_logp.astype(np.float64), kind="stable")  # ties by id
    keep = np.zeros(len(lm.vocab), bool)
    keep[by_probability[words[by_probability]][:k]] = True
    return keep


def _null_sources(n: int, rng: np.random.Generator) -> np.ndarray:
    """[DRAWS, n]: for each pair, DRAWS other pairs within WINDOW (an offset past an end is
    reflected; with n <= WINDOW a reflected offset may still leave the range and is clipped)."""
    i = np.arange(n)
    off = rng.integers(1, WINDOW + 1, (DRAWS, n)) * rng.choice(np.array([-1, 1]), (DRAWS, n))
    j = i + off
    j = np.where((j < 0) | (j >= n), i - off, j)
    return np.clip(j, 0, n - 1)


def order_test(lm: NgramLM, tokens: list[str], judged: np.ndarray, min_pairs: int) -> OrderTest | None:
    """The test on a tokenized document (ngram_lm.tokenize); None with fewer than min_pairs pairs."""
    seq, _ = frame(lm.encode(tokens))
    if seq.size < 2:
        return None
    at = np.flatnonzero(judged[seq[1:]] & judged[seq[:-1]]) + 1
    n = int(at.size)
    if n < max(min_pairs, 2):  # one pair has no spread to test against
        return None
    prev, nxt = seq[at - 1], seq[at]
    rng = np.random.default_rng([n, int(seq.sum())])
    sources = _null_sources(n, rng).ravel()
    null_lp = lm.pair_logprobs(prev[sources], np.tile(nxt, DRAWS))
    d = lm.pair_logprobs(prev, nxt) - null_lp.reshape(DRAWS, n).mean(axis=0)
    gain, sd = float(d.mean()), float(d.std(ddof=1))
    z = gain / (sd / math.sqrt(n)) if sd > 0 else (math.copysign(1e9, gain) if gain else 0.0)
    return OrderTest(gain, z, n)


def critical_z(alpha: float) -> float:
    """The standard normal's 1 - alpha quantile: the one-sided test's cut."""
    return NormalDist().inv_cdf(1.0 - alpha)
