"""Which rank is slow: per-rank batch-read and forward seconds, gathered cheaply, judged robustly.

In a synchronous data-parallel step every rank's wall time is the slowest rank's (the others wait
in the gradient all-reduce), so a straggler is invisible in step times. What differs is the work
a rank does before its first collective: reading its batches and its forward passes (no
collective in a one-process or DDP forward). Each rank sums those seconds over an interval of
`rank_stats_every` steps; at the interval's end they ride on the step-end stop-flag all-reduce
(MAX over a vector in which each rank fills only its own two slots), so no collective is added.

Heterogeneous hardware (same-SKU GPUs differ by a few percent and slow ranks straggle) and slow
storage both show up: a rank whose read + forward seconds exceed the ranks' median by
`slow_rank_margin` for `slow_rank_patience` intervals in a row is named once per episode in a
`slow_rank` event (its host, its share of read vs forward time).

Limits, stated: with FSDP, tensor or pipeline parallelism the forward itself holds collectives
(all-gathers, activations between stages), so a fast rank's forward includes waiting for the slow
one and the forward times even out; there only the read time separates ranks.
Memory: two floats and a streak counter per rank, on every rank.
"""

from __future__ import annotations

import socket
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

FULL_LISTS_UP_TO = 64  # ranks; above this the event names the slowest few instead of every rank


@dataclass
class RankClock:
    """This rank's batch-read and forward seconds since the last gather."""

    read_s: float = 0.0
    forward_s: float = 0.0
    steps: int = 0

    def add(self, read_s: float, forward_s: float) -> None:
        self.read_s += read_s
        self.forward_s += forward_s
        self.steps += 1

    def take(self) -> tuple[float, float]:
        """Per-step means since the last take, and a fresh interval."""
        n = max(self.steps, 1)
        out = (self.read_s / n, self.forward_s / n)
        self.read_s = self.forward_s = 0.0
        self.steps = 0
        return out


def step_end_agreement(ctx: Any, stop_code: int, clock: RankClock | None) -> tuple[int, list[tuple[float, float]] | None]:
    """(the highest stop code of any rank, every rank's (read, forward) per-step seconds or None).

    One all-reduce (MAX) per step, which the trainer needed anyway for the stop flags; with a
    clock, 2 more floats per rank ride along. Outside a process group: this process's values."""
    mine = clock.take() if clock is not None else None
    if not ctx.distributed:
        return stop_code, [mine] if mine is not None else None
    import torch.distributed as dist

    from tokenmill.train.distributed import _comm_device

    world = ctx.world_size
    t = torch.zeros(1 + (2 * world if mine is not None else 0), dtype=torch.float64)
    t[0] = float(stop_code)
    if mine is not None:
        t[1 + 2 * ctx.rank], t[2 + 2 * ctx.rank] = mine
    t = t.to(_comm_device(ctx))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    values = t.cpu().tolist()
    per_rank = [(values[1 + 2 * r], values[2 + 2 * r]) for r in range(world)] if mine is not None else None
    return int(values[0]), per_rank


def rank_hosts(ctx: Any) -> list[str]:
    """Every rank's host name (one all_gather_object at start: a slow rank is named with its machine)."""
    host = socket.gethostname()
    if not ctx.distributed:
        return [host]
    import torch.distributed as dist

    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, host)
    return [str(h) for h in out]


@dataclass
class SlowRanks:
    """Judges each gathered interval; remembers only a streak count per rank."""

    margin: float
    patience: int
    hosts: list[str] = field(default_factory=list)
    streak: dict[int, int] = field(default_factory=dict)

    def judge(self, step: int, per_rank: list[tuple[float, float]]) -> list[tuple[str, dict[str, Any]]]:
        """The events of the interval ending at `step`: `rank_times` (always, with 2+ ranks) and a
        `slow_rank` for each rank whose slow streak just reached `patience`."""
        if len(per_rank) < 2:
            return []
        local = [r + f for r, f in per_rank]
        median = statistics.median(local)
        out: list[tuple[str, dict[str, Any]]] = []
        order = sorted(range(len(local)), key=lambda r: -local[r])
        summary: dict[str, Any] = {
            "step": step,
            "median_s": median,
            "max_s": local[order[0]],
            "slowest": [{"rank": r, "seconds": local[r]} for r in order[:4]],
        }
        if len(per_rank) <= FULL_LISTS_UP_TO:
            summary.update(read_s=[r for r, _ in per_rank], forward_s=[f for _, f in per_rank])
        out.append(("rank_times", summary))
        for rank, seconds in enumerate(local):
            slow = median > 0 and seconds > median * (1 + self.margin)
            self.streak[rank] = self.streak.get(rank, 0) + 1 if slow else 0
            if slow and self.streak[rank] == self.patience:
                read, fwd = per_rank[rank]
                med_read = statistics.median(r for r, _ in per_rank)
                out.append(
                    (
                        "slow_rank",
                        {
                            "step": step,
                            "rank": rank,
                            "host": self.hosts[rank] if rank < len(self.hosts) else None,
                            "seconds": seconds,
                            "median_s": median,
                            "ratio": seconds / median,
                            "read_s": read,
                            "forward_s": fwd,
                            "intervals": self.patience,
                            "cause": "batch reads" if read - med_read > (seconds - median) / 2 else "compute",
                        },
                    )
                )
        return out
