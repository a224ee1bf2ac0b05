import numpy as np
import pytest
import torch

from tokenmill.mixture.loader import BatchSampler, MixtureError  # the old name stays importable
from tokenmill.tokens.store import TokenStore


@pytest.fixture()
def store(tiny_run) -> TokenStore:
    return TokenStore(tiny_run.path / "tokens")


def test_batches_are_a_pure_function_of_seed_step_micro(store):
    a = BatchSampler(store, None, seq_len=16, micro_batch=8, seed=5)
    b = BatchSampler(store, None, seq_len=16, micro_batch=8, seed=5)
    x = a.batch(7, 1)
    assert x.shape == (8, 17) and x.dtype == torch.long
    for s, m in [(1, 0), (3, 1), (7, 0)]:  # draw others first: no hidden cursor state
        b.batch(s, m)
    assert torch.equal(b.batch(7, 1), x)
    assert not torch.equal(a.batch(7, 0), x)
    assert not torch.equal(a.batch(8, 1), x)
    assert not torch.equal(BatchSampler(store, None, 16, 8, seed=6).batch(7, 1), x)


def test_default_weights_are_proportional_to_train_tokens(store):
    s = BatchSampler(store, None, seq_len=16, micro_batch=4, seed=0)
    ta, tb = store.n_tokens("a", "train"), store.n_tokens("b", "train")
    assert s.weights == pytest.approx({"a": ta / (ta + tb), "b": tb / (ta + tb)})


@pytest.mark.parametrize("weights", [{"a": 1.0, "b": 3.0}, {"a": 0.9, "b": 0.1}])
def test_bucket_frequencies_follow_the_weights(store, weights):
    s = BatchSampler(store, weights, seq_len=16, micro_batch=64, seed=1)
    rows = [b for step in range(1, 51) for b, _, _ in s.batch_provenance(step, 0)]
    frac_b = rows.count("b") / len(rows)  # 3200 draws: 4 sigma is < 0.03
    assert frac_b == pytest.approx(weights["b"] / sum(weights.values()), abs=0.03)


def test_zero_weight_bucket_is_never_drawn(store):
    s = BatchSampler(store, {"a": 1.0, "b": 0.0}, seq_len=16, micro_batch=32, seed=2)
    assert {b for step in range(1, 11) for b, _, _ in s.batch_provenance(step, 0)} == {"a"}


def test_provenance_maps_back_to_the_real_tokens(store):
    s = BatchSampler(store, None, seq_len=24, micro_batch=16, seed=3)
    shards = {sh.prefix.relative_to(store.root).as_posix(): sh for b in store.buckets for sh in store.shards(b, "train")}
    used = set()
    for step, micro in [(1, 0), (2, 1), (9, 0)]:
        x = s.batch(step, micro).numpy()
        for row, (bucket, name, start) in enumerate(s.batch_provenance(step, micro)):
            sh = shards[name]
            used.add(name)
            assert sh.bucket == bucket and name.startswith(f"{bucket}/train-")
            assert start + 25 <= sh.n_tokens  # the window lies inside one shard
            assert np.array_equal(x[row], np.asarray(sh.tokens[start:start + 25], dtype=np.int64))
            for pos in (0, 11, 24):
                src = s.window_source(step, micro, row, pos)
                assert (src.bucket, src.shard) == (bucket, name)
                doc = sh.doc(src.doc)
                assert doc[src.offset] == x[row, pos]
                assert sh.offsets[src.doc] + src.offset == start + pos
                assert src.doc_id == f"{name.replace('/train-0000', '-train-')}-{src.doc}"  # conftest ids
    assert {"a/train-00000", "a/train-00001", "b/train-00000"} <= used  # every shard is reachable


def test_windows_cross_documents_separated_by_eos(store):
    s = BatchSampler(store, None, seq_len=31, micro_batch=32, seed=4)
    x = s.batch(1, 0)
    assert (x == store.eos_id).any(dim=1).float().mean() > 0.5  # docs are 11-41 tokens long


def test_weights_are_validated_with_clear_errors(store):
    with pytest.raises(MixtureError, match=r"\['web'\].*not in the token store"):
        BatchSampler(store, {"a": 1.0, "web": 1.0}, 16, 4, 0)
    with pytest.raises(MixtureError, match="every weight is 0"):
        BatchSampler(store, {"a": 0.0}, 16, 4, 0)
    with pytest.raises(MixtureError, match=">= 0"):
        BatchSampler(store, {"a": -1.0, "b": 1.0}, 16, 4, 0)
    with pytest.raises(MixtureError, match="seq_len"):
        BatchSampler(store, None, 10_000, 4, 0)


def test_negative_seed_is_accepted_and_deterministic(store):
    a = BatchSampler(store, None, 8, 2, seed=-3).batch(1, 0)
    assert torch.equal(a, BatchSampler(store, None, 8, 2, seed=-3).batch(1, 0))
