"""The per-bucket training loss: equal to a per-row recomputation, consistent with the step's
loss, the same summed over data-parallel ranks as on one process, and each row's bucket is the
one its lineage names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tokenmill.mixture.config import MixtureConfig
from tokenmill.mixture.loader import Loader
from tokenmill.tokens.store import TokenStore
from tokenmill.train.bucket_loss import BucketLoss, bucket_means

from tests.conftest import write_tiny_store


def micro_batches(seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, list[str]]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for rows in (["a", "b", "a", "c"], ["b", "b", "a", "a"]):
        mask = torch.rand(4, 16, generator=g) > 0.2
        nll = torch.rand(4, 16, generator=g) * 5 * mask  # 0 where not counted, like token_nll_batch
        out.append((nll, mask, rows))
    return out


def expected(batches) -> dict[str, float]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for nll, mask, rows in batches:
        for r, b in enumerate(rows):
            for t in range(nll.shape[1]):
                if mask[r, t]:
                    sums[b] = sums.get(b, 0.0) + float(nll[r, t])
                    counts[b] = counts.get(b, 0) + 1
    return {b: sums[b] / counts[b] for b in sums}


def test_equals_a_per_token_recomputation_and_averages_to_the_step_loss():
    batches = micro_batches()
    acc = BucketLoss(["c", "a", "b", "unused"])
    for nll, mask, rows in batches:
        acc.add(nll, mask, rows)
    got = acc.result()
    want = expected(batches)
    assert got.keys() == want.keys() == {"a", "b", "c"}  # a bucket without tokens is left out
    assert all(got[b] == pytest.approx(want[b], rel=1e-12) for b in want)
    # the token-weighted mean of the bucket means is the step's loss Σ NLL / Σ counted
    counted = {b: sum(int(m[r].sum()) for _, m, rows in batches for r, x in enumerate(rows) if x == b) for b in got}
    step_loss = sum(float(n.double().sum()) for n, _, _ in batches) / sum(int(m.sum()) for _, m, _ in batches)
    assert sum(got[b] * counted[b] for b in got) / sum(counted.values()) == pytest.approx(step_loss, rel=1e-12)
    assert acc.result() == {}  # result() starts the next step


def test_no_mask_counts_every_target():
    nll = torch.arange(8.0).view(2, 4)
    acc = BucketLoss(["x", "y"])
    acc.add(nll, None, ["y", "x"])
    assert acc.result() == {"x": (4 + 5 + 6 + 7) / 4, "y": (0 + 1 + 2 + 3) / 4}
    assert bucket_means([1.0, 0.0], [2.0, 0.0], ["p", "q"]) == {"p": 0.5}


def _rank(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        acc = BucketLoss(["a", "b", "c"])
        nll, mask, rows = micro_batches()[rank]  # rank r computes micro-batch r of the global batch
        acc.add(nll, mask, rows)
        got = acc.result(group=None, distributed=True)
        if rank == 0:
            torch.save(got, out)
    finally:
        dist.destroy_process_group()


def test_two_ranks_reduce_sums_and_counts_to_the_one_process_result(tmp_path: Path):
    out = tmp_path / "got.pt"
    mp.spawn(_rank, args=(2, f"file://{tmp_path / 'store'}", str(out)), nprocs=2, join=True)
    got, want = torch.load(out), expected(micro_batches())
    assert got.keys() == want.keys() and all(got[b] == pytest.approx(want[b], rel=1e-12) for b in want)


@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1)])
def test_row_buckets_are_the_lineage_buckets(tmp_path: Path, world_size: int, rank: int):
    write_tiny_store(tmp_path / "tokens")
    loader = Loader(TokenStore(tmp_path / "tokens"), MixtureConfig(weights={"a": 1.0, "b": 1.0}), 32, 8, 2, 30,
                    seed=11, world_size=world_size, rank=rank)
    seen = set()
    for step in (1, 7, 30):
        for micro in (0, 1):
            buckets = loader.row_buckets(step, micro)
            assert buckets == [src.bucket for src in loader.provenance(step, micro)]
            assert all(span.bucket == b for src, b in zip(loader.provenance(step, micro), buckets) for span in src.spans)
            seen |= set(buckets)
            rebuilt, served = loader.rebuild(step, micro), loader.batch(step, micro)
            assert torch.equal(rebuilt.tokens, served.tokens) and torch.equal(rebuilt.loss_mask, served.loss_mask)
    assert seen == {"a", "b"}
