"""DoReMi's weight update (Xie et al. 2023) and its proxy training on a real token store."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tokenmill.config import ModelConfig, TrainConfig
from tokenmill.decisions.doremi import BucketBatches, run_doremi, update_weights
from tokenmill.tokens.store import TokenStore

from tests.conftest import TINY_VOCAB, write_tiny_store


def test_the_update_is_exponentiated_gradient_then_smoothing():
    alpha, lam = np.asarray([0.5, 0.3, 0.2]), np.asarray([0.4, 0.0, 1.0])
    new = update_weights(alpha, lam, step_size=1.0, smoothing=0.1)
    raw = alpha * np.exp(lam)  # the paper's α'_t = α_{t-1} exp(η λ_t), normalised, then mixed with uniform
    assert new == pytest.approx(0.9 * raw / raw.sum() + 0.1 / 3, rel=1e-12)
    assert new.sum() == pytest.approx(1.0)
    # no excess anywhere: only the smoothing moves the weights, toward uniform
    still = update_weights(alpha, np.zeros(3), 1.0, 0.1)
    assert still == pytest.approx(0.9 * alpha + 0.1 / 3)
    # a huge excess does not overflow, and the floor c/k holds
    big = update_weights(alpha, np.asarray([1e4, 0.0, 0.0]), 1.0, 0.03)
    assert np.isfinite(big).all() and big.min() >= 0.01 - 1e-15


def _setup(tmp_path):
    write_tiny_store(tmp_path / "tokens")
    store = TokenStore(tmp_path / "tokens")
    mcfg = ModelConfig(vocab_size=TINY_VOCAB, d_model=32, n_layers=1, n_heads=2, max_seq_len=32)
    tc = TrainConfig(seq_len=32, micro_batch=4, lr=0.01, device="cpu", dtype="float32", threads=1)
    return store, mcfg, tc


def test_each_step_reads_one_micro_batch_of_every_bucket(tmp_path):
    store, _, _ = _setup(tmp_path)
    data = BucketBatches(store, ["a", "b"], seq_len=32, rows=4, steps=5, seed=3)
    got = data.batches(2)
    assert [b for b, _ in got] == ["a", "b"]
    a_ids, b_ids = set(got[0][1].tokens.unique().tolist()), set(got[1][1].tokens.unique().tolist())
    assert a_ids <= set(range(3, 23)) | {0} and b_ids <= set(range(23, 64)) | {0}  # each bucket's own tokens


def test_doremi_logs_the_weights_its_excess_losses_imply_and_averages_them(tmp_path):
    store, mcfg, tc = _setup(tmp_path)
    kw = dict(store=store, buckets=["a", "b"], mcfg=mcfg, tc=tc, steps=12, rows=4, seq_len=32, seed=5,
              reference_weights={"a": 0.5, "b": 0.5}, step_size=1.0, smoothing=1e-3, device=torch.device("cpu"),
              log_every=1)
    res = run_doremi(**kw)
    proxy = res.proxy
    assert proxy.steps == list(range(1, 13)) and res.reference.steps == list(range(1, 13))
    # independent recomputation: the update applied to the logged excess losses gives the logged weights
    alpha = np.full(2, 0.5)
    replay = []
    for lam in proxy.excess:
        assert min(lam) >= 0.0  # clipped at 0 per token, so never negative
        alpha = update_weights(alpha, np.asarray(lam), 1.0, 1e-3)
        replay.append(alpha)
    assert np.asarray(proxy.weights) == pytest.approx(np.asarray(replay), rel=1e-12)
    # ᾱ is their average, a point of the simplex
    assert [res.weights["a"], res.weights["b"]] == pytest.approx(np.mean(replay, axis=0).tolist(), rel=1e-12)
    assert sum(res.weights.values()) == pytest.approx(1.0)
    # the reference model learns both (learnable) buckets: its loss falls from about ln(vocab)
    first, last = res.reference.loss[0], res.reference.loss[-1]
    assert all(f > 0.8 * math.log(TINY_VOCAB) for f in first) and all(x < f for x, f in zip(last, first))
    # same seed, same weights: the loaders and both models are seeded
    again = run_doremi(**kw)
    assert again.weights == res.weights
