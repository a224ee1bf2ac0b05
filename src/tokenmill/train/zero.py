"""ZeRO-1: the optimizer state sharded over the data-parallel ranks, parameters and gradients not.

Every parameter gets one owner among the dp ranks (whole tensors, greedily by size, so the ranks
hold about equal shares of AdamW's m and v); a rank's optimizer keeps only the parameters it owns
(the groups stay, their lists shrink), steps them after the usual gradient all-reduce (DDP's, or
a pipeline stage's flat one), then every owner broadcasts its updated parameters to the other dp
ranks. Whole tensors rather than flat slices: the optimizer state stays keyed by parameter name,
so checkpoints (DCP, each rank writing the state it owns) load into any other layout, and Muon,
which needs whole matrices, still runs. The cost is balance: a rank's share is within one tensor
of 1/dp (`owned_state_bytes` measures it).

ZeRO-2 and ZeRO-3 are FSDP2 (train/distributed.py `fully_shard_blocks`), not this module.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

ATTR = "zero_partition"  # on the optimizer: the owners of its whole model's parameters


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def owners(model: nn.Module, n_ranks: int) -> dict[str, int]:
    """{parameter name: owning dp rank}: largest first onto the least loaded rank, ties by name,
    so every rank (and every tp rank of a stage) computes the same partition."""
    sizes = sorted(((_local(p).numel(), name) for name, p in model.named_parameters()), key=lambda x: (-x[0], x[1]))
    load, out = [0] * n_ranks, {}
    for numel, name in sizes:
        r = min(range(n_ranks), key=lambda i: (load[i], i))
        out[name] = r
        load[r] += numel
    return out


def partition_optimizer(optimizer: torch.optim.Optimizer, model: nn.Module, group: Any, dp_rank: int, dp: int) -> None:
    """Keep in `optimizer` only the parameters this dp rank owns (before its first step); remember
    every parameter's owner (as a global rank of `group`) for `broadcast_updates`."""
    owner_of = owners(model, dp)
    name_of = {id(p): n for n, p in model.named_parameters()}
    whole = [list(g["params"]) for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["params"][:] = [p for p in g["params"] if owner_of[name_of[id(p)]] == dp_rank]  # in place: Muon shares the lists
    srcs = {r: dist.get_global_rank(group, r) if group is not None else r for r in range(dp)}
    pairs = [(p, srcs[owner_of[n]]) for n, p in model.named_parameters()]
    setattr(optimizer, ATTR, {"group": group, "params": pairs, "whole": whole})
    params = list(model.parameters())

    def zero_grad(set_to_none: bool = True) -> None:
        # every gradient, not only the owned ones: the others still enter the global norm (clipping)
        for p in params:
            if p.grad is not None:
                p.grad = None if set_to_none else p.grad.zero_()

    optimizer.zero_grad = zero_grad  # type: ignore[method-assign]


@contextmanager
def whole_groups(optimizer: Any) -> Iterator[None]:
    """The optimizer's groups with all their parameters while DCP saves or loads its state (a no-op
    unless partitioned): the checkpoint's groups then list every parameter whatever rank wrote
    them (DCP keeps one rank's copy, and rebuilds any layout's groups from it by name), and a load
    fills the state of every parameter by name, after which this rank drops what it does not own."""
    part = getattr(optimizer, ATTR, None)
    if part is None:
        yield
        return
    owned = [list(g["params"]) for g in optimizer.param_groups]
    for g, whole in zip(optimizer.param_groups, part["whole"]):
        g["params"][:] = whole
    try:
        yield
    finally:
        for g, mine in zip(optimizer.param_groups, owned):  # load_state_dict made new group dicts, same lists
            g["params"][:] = mine
        keep = {id(p) for mine in owned for p in mine}
        for p in [p for p in optimizer.state if id(p) not in keep]:
            del optimizer.state[p]


def is_partitioned(optimizer: Any) -> bool:
    return getattr(optimizer, ATTR, None) is not None


def broadcast_updates(optimizer: torch.optim.Optimizer) -> None:
    """Every parameter from its owner to the other dp ranks (after the step, or a skipped step:
    the owner's values, whatever they are, become everyone's). A no-op unless partitioned."""
    part = getattr(optimizer, ATTR, None)
    if part is None:
        return
    with torch.no_grad():
        works = [dist.broadcast(_local(p).data, src=src, group=part["group"], async_op=True) for p, src in part["params"]]
        for w in works:
            w.wait()


def owned_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer state tensors this rank holds (local shards of DTensors)."""
    return sum(
        _local(v).numel() * v.element_size()
        for s in optimizer.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.dim() > 0
    )


def grad_bytes(model: nn.Module) -> int:
    """Bytes of the gradients this rank holds (local shards of DTensors)."""
    return sum(_local(p.grad).numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
