import numpy as np
import pytest

from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.sample import BucketSample, SampleConfigError, bucket_budgets, select_documents


def test_budgets_proportional_by_default():
    got = bucket_budgets({"a": 3000, "b": 1000}, TokenizerConfig(sample_bytes=2000))
    assert got == {"a": 1500, "b": 500}
    assert bucket_budgets({"a": 30, "b": 10}, TokenizerConfig(sample_bytes=2000)) == {"a": 30, "b": 10}


def test_budgets_per_bucket_capped_and_checked():
    cfg = TokenizerConfig(bucket_bytes={"a": 100, "b": 10_000})
    assert bucket_budgets({"a": 3000, "b": 1000, "c": 50}, cfg) == {"a": 100, "b": 1000, "c": 0}
    with pytest.raises(SampleConfigError, match="'z'"):
        bucket_budgets({"a": 1}, TokenizerConfig(bucket_bytes={"z": 5}))


def _ids(n: int) -> list[str]:
    return [f"doc-{i}" for i in range(n)]


def test_selection_seeded_within_budget_and_near_it():
    sizes = np.random.default_rng(0).integers(10, 500, size=1000)
    ids = _ids(1000)
    a = select_documents(ids, sizes, 20_000, seed=1, bucket="web")
    assert np.array_equal(a, select_documents(ids, sizes, 20_000, seed=1, bucket="web"))
    assert not np.array_equal(a, select_documents(ids, sizes, 20_000, seed=2, bucket="web"))
    assert not np.array_equal(a, select_documents(ids, sizes, 20_000, seed=1, bucket="code"))
    taken = int(sizes[a].sum())
    assert 20_000 - sizes.min() < taken <= 20_000
    assert select_documents(ids, sizes, int(sizes.sum()), seed=1, bucket="web").all()
    assert not select_documents(ids, sizes, 0, seed=1, bucket="web").any()


def test_selection_does_not_depend_on_document_order():
    sizes = np.random.default_rng(1).integers(10, 500, size=300)
    ids = _ids(300)
    order = np.random.default_rng(2).permutation(300)
    a = select_documents(ids, sizes, 9_000, seed=1, bucket="web")
    b = select_documents([ids[i] for i in order], sizes[order], 9_000, seed=1, bucket="web")
    assert {ids[i] for i in np.flatnonzero(a)} == {ids[order[i]] for i in np.flatnonzero(b)}


def test_one_huge_document_does_not_starve_the_sample():
    sizes = np.array([10_000] + [10] * 100)
    keep = select_documents(_ids(101), sizes, 500, seed=0, bucket="b")
    assert not keep[0] and int(sizes[keep].sum()) == 500


@pytest.mark.parametrize("budget", [0, 7, 3_000, 40_000, 10**9])
def test_bucket_sample_on_disk_chooses_what_select_documents_chooses(tmp_path, budget):
    """Batches in any order, a few documents per partition: the same documents as the rule in
    memory, the greedy stops reading partitions once nothing fits, and empty texts never count."""
    rng = np.random.default_rng(budget)
    sizes = rng.integers(0, 400, size=2000) * (rng.random(2000) < 0.97)  # some empty
    sizes[5] = 10**6  # one that never fits
    ids = _ids(2000)
    want = select_documents(ids, sizes, budget, seed=3, bucket="web")
    sample = BucketSample(tmp_path, "web", 3, n_docs=2000, per_partition=50)
    assert sample.spill.n == 40
    read = []
    real = sample.spill.read
    sample.spill.read = lambda p: (read.append(p), real(p))[1]
    order = rng.permutation(2000)
    for k in range(0, 2000, 37):
        batch = order[k: k + 37]
        sample.add([ids[i] for i in batch], sizes[batch])
    sample.choose(budget)
    got = np.zeros(2000, dtype=bool)
    for k in range(0, 2000, 64):
        got[k: k + 64] = sample.chosen(ids[k: k + 64], sizes[k: k + 64])
    assert np.array_equal(got, want)
    assert (sample.docs, sample.bytes) == (int(want.sum()), int(sizes[want].sum()))
    assert (sample.train_docs, sample.train_bytes) == (2000, int(sizes.sum()))
    assert read == list(range(len(read)))  # in priority order
    if budget <= 3_000:
        assert len(read) < 10  # a small sample reads the first partitions only
