"""The training loss per data bucket, from the batch's lineage.

Every row of a micro-batch is one sample of one bucket's stream (mixture/loader.py), so the
per-token NLL the step already computes (`token_nll_batch`, before its `.sum()`) splits by row:
Σ NLL and the number of counted targets per bucket, accumulated over the step's micro-batches,
summed over the data-parallel ranks, and divided once. The result is each bucket's token-weighted
mean loss over the global batch: the same number whatever the number of ranks or micro-batches.
It reads detached values only, so the loss and the gradients are bit for bit the same with it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def bucket_means(sums: list[float], counts: list[float], buckets: list[str]) -> dict[str, float]:
    """{bucket: Σ NLL / counted targets} for every bucket with a counted target."""
    return {b: s / c for b, s, c in zip(buckets, sums, counts) if c > 0}


class BucketLoss:
    """Per-bucket [Σ NLL, counted targets] of one optimizer step (float64, on the NLL's device)."""

    def __init__(self, buckets: list[str]):
        self.buckets = sorted(buckets)
        self.index = {b: i for i, b in enumerate(self.buckets)}
        self.totals: torch.Tensor | None = None

    def indices(self, row_buckets: list[str], device: torch.device) -> torch.Tensor:
        """The bucket index of each row, built on the host before the forward and sent without
        blocking (pinned on CUDA): built after it, between forward and backward, its copy would
        wait for the forward to finish."""
        idx = torch.tensor([self.index[b] for b in row_buckets], dtype=torch.long)
        if device.type == "cuda":
            return idx.pin_memory().to(device, non_blocking=True)
        return idx.to(device)

    def add(self, nll: torch.Tensor, loss_mask: torch.Tensor | None, row_buckets: list[str] | torch.Tensor) -> None:
        """Add one micro-batch: nll [B, T] (0 where not counted), loss_mask bool [B, T] (None:
        all count), row_buckets the bucket of each of its B rows (names, or `indices` of them)."""
        nll = nll.detach()
        rows = nll.double().sum(dim=1)
        counted = torch.full_like(rows, nll.shape[1]) if loss_mask is None else loss_mask.to(rows.device).sum(dim=1).double()
        idx = row_buckets if isinstance(row_buckets, torch.Tensor) else self.indices(row_buckets, rows.device)
        if self.totals is None:
            self.totals = torch.zeros(2, len(self.buckets), dtype=torch.float64, device=rows.device)
        self.totals[0].index_add_(0, idx, rows)
        self.totals[1].index_add_(0, idx, counted)

    def take(self) -> torch.Tensor:
        """The step's [Σ NLL, counted] per bucket, left on the device; the next step starts afresh."""
        totals = self.totals if self.totals is not None else torch.zeros(2, len(self.buckets), dtype=torch.float64)
        self.totals = None
        return totals

    def means(self, flat: list[float]) -> dict[str, float]:
        """`result`'s dict from the host values of a `take()` (sums, then counts)."""
        n = len(self.buckets)
        return bucket_means(flat[:n], flat[n:], self.buckets)

    def result(self, group: Any = None, distributed: bool = False) -> dict[str, float]:
        """{bucket: mean token NLL} of the step over every data-parallel rank of `group` (an
        all-reduce of the sums and counts when `distributed`), then start the next step."""
        totals = self.take()
        if distributed:
            device = totals.device if dist.get_backend(group) == "nccl" else torch.device("cpu")
            totals = totals.to(device)
            dist.all_reduce(totals, op=dist.ReduceOp.SUM, group=group)
        sums, counts = totals.cpu().tolist()
        return bucket_means(sums, counts, self.buckets)
