import numpy as np

from tokenmill.mixture.stream import BucketStream


def epoch_tokens(stream: BucketStream, shards, e: int) -> np.ndarray:
    """Independent: the docs of epoch e in permutation order, read shard by shard."""
    perm, _ = stream.epoch(e)
    docs = [(sh, i) for sh in shards for i in range(sh.n_docs)]
    return np.concatenate([docs[d][0].doc(docs[d][1]) for d in perm]).astype(np.int64)


def test_each_epoch_is_a_seeded_permutation_of_every_document(crafted):
    shards = crafted.shards("x", "train")
    s = BucketStream("x", shards, seed=3)
    assert s.n_docs == 65 and s.n_tokens == crafted.n_tokens("x", "train")
    perms = [s.epoch(e)[0] for e in range(3)]
    for p in perms:
        assert sorted(p.tolist()) == list(range(65))
    assert not np.array_equal(perms[0], perms[1])
    again = BucketStream("x", shards, seed=3)
    assert all(np.array_equal(again.epoch(e)[0], perms[e]) for e in (2, 0, 1))  # any order of first use
    assert not np.array_equal(BucketStream("x", shards, seed=4).epoch(0)[0], perms[0])
    assert not np.array_equal(BucketStream("z", shards, seed=3).epoch(0)[0], perms[0])  # the bucket is in the seed


def test_windows_read_the_concatenated_epochs_across_the_epoch_boundary(crafted):
    shards = crafted.shards("x", "train")
    s = BucketStream("x", shards, seed=1)
    stream = np.concatenate([epoch_tokens(s, shards, e) for e in range(3)])
    n = s.n_tokens
    for start, length in [(0, 33), (n - 10, 40), (2 * n - 1, 2), (5, n + 20), (n, 1)]:
        pieces = s.pieces(start, length)
        out = np.full(length, -1, np.int64)
        s.read(pieces, out)
        assert np.array_equal(out, stream[start:start + length])
        assert [p.row_start for p in pieces] == list(np.cumsum([0] + [p.end - p.start for p in pieces[:-1]]))
        for p in pieces:  # a piece is a span of one document of one epoch
            si, doc = s.locate(p.doc)
            assert np.array_equal(shards[si].doc(doc)[p.start:p.end], out[p.row_start:p.row_start + p.end - p.start])
            assert p.epoch == (start + p.row_start) // n


def test_capped_tokens_and_doc_at_follow_the_permutations(crafted):
    shards = crafted.shards("y", "train")
    s = BucketStream("y", shards, seed=9)
    lens = np.diff(shards[0].offsets)
    docs = [s.doc_at(k) for k in range(95)]
    assert [e for e, _ in docs] == [k // 30 for k in range(95)]
    assert [d for _, d in docs[30:60]] == s.epoch(1)[0].tolist()
    for k0, k1, cap in [(0, 30, 100), (3, 95, 12), (29, 31, 5), (60, 60, 5)]:
        assert s.capped_tokens(k0, k1, cap) == sum(min(int(lens[d]), cap) for _, d in docs[k0:k1])
