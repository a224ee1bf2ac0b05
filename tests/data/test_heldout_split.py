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


# --------------------------------------------------------------------------- streaming cut
import random  # noqa: E402
import sys  # noqa: E402
import tracemalloc  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

import tokenmill.data.heldout_split as hs  # noqa: E402
from tokenmill.data.canaries import ID_PREFIX  # noqa: E402
from tokenmill.data.heldout_split import CutCounter, bucket_cuts  # noqa: E402


def _cut_set(ids: list[str], fraction: float, min_docs: int, seed: int, batch: int) -> set[str]:
    counter = CutCounter(fraction, min_docs, seed)
    for k in range(0, len(ids), batch):
        counter.add(ids[k: k + batch])
    cut = counter.cut()
    return {d for d in ids if cut.holds(d)}


@pytest.mark.parametrize("trial", range(40))
def test_streaming_cut_holds_exactly_what_heldout_ids_holds(trial):
    """Random buckets (empty to thousands of ids, canaries among them), every regime of the rule:
    the fraction alone, min_docs lifting it, the whole bucket capped at all but one."""
    rng = random.Random(trial)
    n = rng.choice([0, 1, 2, 3, 5, 20, 300, 3000])
    ids = [f"d{rng.getrandbits(40):x}" for _ in range(n)]
    ids += [f"{ID_PREFIX}{k}" for k in range(rng.randint(0, 3))]
    rng.shuffle(ids)
    fraction = rng.choice([0.0, 0.001, 0.05, 0.3, 0.9, 0.999])
    min_docs = rng.choice([0, 1, 2, 7, 50])
    seed = rng.getrandbits(32)
    want = heldout_ids(ids, fraction, min_docs, seed)
    assert _cut_set(ids, fraction, min_docs, seed, batch=rng.choice([1, 7, 1000])) == want


def test_cut_regimes_are_all_reached():
    ids = [f"doc{i}" for i in range(200)]
    assert _cut_set(ids, 0.05, 2, 1, 10) == heldout_ids(ids, 0.05, 2, 1)  # fraction
    assert len(_cut_set(ids, 0.0, 9, 1, 10)) == 9  # min_docs
    assert len(_cut_set(ids, 0.999999, 2, 1, 10)) == 199  # all but one


def test_bucket_cuts_read_ids_in_bounded_batches_without_a_list_of_them(tmp_path, monkeypatch):
    """A bucket of many parts: the pass never reads more than `batch_rows` ids at once and
    never builds the bucket's id list, yet its cut holds out exactly `heldout_ids`'s set."""
    rng = random.Random(0)
    ids = [f"id-{rng.getrandbits(48):x}" for _ in range(6000)]
    for k in range(12):
        out = tmp_path / "curated" / "web"
        out.mkdir(parents=True, exist_ok=True)
        chunk = ids[k * 500:(k + 1) * 500]
        pq.write_table(pa.table({"id": chunk, "text": ["x"] * len(chunk)}), out / f"part-{k:05d}.parquet")
    seen: list[int] = []
    real = hs.part_id_batches
    monkeypatch.setattr(hs, "part_id_batches", lambda part, rows: (seen.append(len(b)) or b for b in real(part, rows)))
    tracemalloc.start()
    cut = bucket_cuts(tmp_path / "curated", 0.01, 80, seed=5, batch_rows=64)["web"]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    id_list = sys.getsizeof(ids) + sum(map(sys.getsizeof, ids))  # what a list of them costs
    assert peak < id_list / 4  # measured: 33 KB against 437 KB
    assert max(seen) <= 64 and sum(seen) == len(ids)
    assert {d for d in ids if cut.holds(d)} == heldout_ids(ids, 0.01, 80, 5)
