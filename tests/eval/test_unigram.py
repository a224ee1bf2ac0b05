import math

import numpy as np

from tokenmill.eval.unigram import unigram_logprobs, unigram_nll
from tokenmill.tokens.store import TokenStore


def test_logprobs_are_smoothed_counts(tokenized_run):
    store = TokenStore(tokenized_run.sub("tokens"))
    logp = unigram_logprobs(store, "prose")
    assert logp.shape == (store.vocab_size,)
    assert math.isclose(np.exp(logp).sum(), 1.0, rel_tol=1e-9)
    counts = np.zeros(store.vocab_size)
    for s in store.shards("prose", "train"):
        for i in range(s.n_docs):
            for t in s.doc(i):
                counts[t] += 1
    expected = np.log((counts + 1) / (counts.sum() + store.vocab_size))
    assert np.allclose(logp, expected)
    assert np.isfinite(logp).all()


def test_nll_sums_negative_logprobs():
    logp = np.log(np.array([0.5, 0.25, 0.25]))
    assert math.isclose(unigram_nll(logp, np.array([0, 1, 1])), math.log(2) + 2 * math.log(4))
