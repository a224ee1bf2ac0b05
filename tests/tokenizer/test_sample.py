import numpy as np
import pytest

from tokenmill.config import TokenizerConfig
from tokenmill.tokenizer.sample import SampleConfigError, bucket_budgets, select_documents


def test_budgets_proportional_by_default():
    got = bucket_budgets({"a": 3000, "b": 1000}, TokenizerConfig(sample_bytes=2000))
    assert got == {"a": 1500, "b": 500}
    assert bucket_budgets({"a": 30, "b": 10}, TokenizerConfig(sample_bytes=2000)) == {"a": 30, "b": 10}


def test_budgets_per_bucket_capped_and_checked():
    cfg = TokenizerConfig(bucket_bytes={"a": 100, "b": 10_000})
    assert bucket_budgets({"a": 3000, "b": 1000, "c": 50}, cfg) == {"a": 100, "b": 1000, "c": 0}
    with pytest.raises(SampleConfigError, match="'z'"):
        bucket_budgets({"a": 1}, TokenizerConfig(bucket_bytes={"z": 5}))


def test_selection_seeded_within_budget_and_near_it():
    sizes = np.random.default_rng(0).integers(10, 500, size=1000)
    a = select_documents(sizes, 20_000, seed=1, bucket="web")
    assert np.array_equal(a, select_documents(sizes, 20_000, seed=1, bucket="web"))
    assert not np.array_equal(a, select_documents(sizes, 20_000, seed=2, bucket="web"))
    assert not np.array_equal(a, select_documents(sizes, 20_000, seed=1, bucket="code"))
    taken = int(sizes[a].sum())
    assert 20_000 - sizes.min() < taken <= 20_000
    assert select_documents(sizes, int(sizes.sum()), seed=1, bucket="web").all()
    assert not select_documents(sizes, 0, seed=1, bucket="web").any()


def test_one_huge_document_does_not_starve_the_sample():
    sizes = np.array([10_000] + [10] * 100)
    keep = select_documents(sizes, 500, seed=0, bucket="b")
    assert not keep[0] and int(sizes[keep].sum()) == 500
