from tokenmill.data.heldout_split import heldout_ids, split_score


def test_score_is_uniform_and_stable():
    ids = [f"doc{i}" for i in range(20000)]
    scores = [split_score(i, 7) for i in ids]
    assert all(0.0 <= s < 1.0 for s in scores)
    assert abs(sum(scores) / len(scores) - 0.5) < 0.01
    assert split_score("doc3", 7) == split_score("doc3", 7) != split_score("doc3", 8)


def test_heldout_fraction_minimum_and_order_independence():
    ids = [f"doc{i}" for i in range(5000)]
    held = heldout_ids(ids, 0.05, 2, seed=1)
    assert 200 < len(held) < 300
    assert held == heldout_ids(list(reversed(ids)), 0.05, 2, seed=1)
    assert len(heldout_ids(ids[:3], 0.0, 2, seed=1)) == 2


def test_never_holds_out_whole_bucket():
    assert heldout_ids(["a"], 0.5, 2, seed=1) == set()
    assert len(heldout_ids(["a", "b"], 0.99, 5, seed=1)) == 1
