"""Global gradient-norm clipping over parameters that live on different device meshes.

One process, DDP and FSDP2 alone: torch's `clip_grad_norm_` (every gradient a plain tensor, or
every one a DTensor on the same mesh). Tensor- and pipeline-parallel runs mix plain replicated
gradients with DTensors sharded over the tp mesh (and, composed with FSDP2, over a 2-D mesh),
which torch's function refuses to stack; and a pipeline stage holds only its own layers, so the
global norm also sums over the stages. Here each group of gradients with the same mesh and
placements gets its own norm (a DTensor norm is the full tensor's norm, reduced over its mesh),
the groups' squares are summed, then summed over `across` (the pipeline's stage group), and
every gradient is scaled by the same coefficient, max_norm / (norm + 1e-6) when below 1, as
torch's function computes it.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist


def _group_key(g: torch.Tensor) -> Any:
    spec = getattr(g, "_spec", None)
    return None if spec is None else (spec.mesh, tuple(spec.placements))


def total_grad_norm(grads: list[torch.Tensor], across: Any = None) -> torch.Tensor:
    """L2 norm of all `grads` together (fp32 scalar, plain tensor), summed over the process
    group `across` too when given (stages of a pipeline: each holds different parameters)."""
    groups: dict[Any, list[torch.Tensor]] = {}
    for g in grads:
        groups.setdefault(_group_key(g), []).append(g)
    sq = torch.zeros((), dtype=torch.float32)
    for members in groups.values():
        norm = torch.nn.utils.get_total_norm(members, 2.0)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        sq = sq + norm.detach().float().cpu() ** 2
    if across is not None:
        dev = grads[0].device if grads and not hasattr(grads[0], "full_tensor") else torch.device("cpu")
        if dist.get_backend(across) == "nccl":
            dev = torch.device("cuda", torch.cuda.current_device())
        t = sq.to(dev)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=across)
        sq = t.cpu()
    return sq.sqrt()


def clip_on_device(params: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """`clip_gradients` of a one-process or DDP run with the pre-clip norm left on the device
    (torch's clip reads nothing on the host: the coefficient is clamped on the device)."""
    return torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], max_norm).detach()


def clip_gradients(
    params: Iterable[torch.nn.Parameter],
    max_norm: float,
    mixed: bool = False,
    across: Any = None,
    counted_elsewhere: set[int] | None = None,
) -> float:
    """Clip the global gradient norm of `params` to `max_norm` (inf: measure only); returns the
    pre-clip norm. `mixed` (tensor/pipeline parallel runs) takes the grouped path above;
    otherwise torch's own function, so single-process and data-parallel runs are unchanged.
    `counted_elsewhere`: ids of parameters scaled here but whose norm another stage counts."""
    params = [p for p in params if p.grad is not None]
    if not mixed and across is None:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm).item())
    skip = counted_elsewhere or set()
    grads = [p.grad for p in params]
    norm = float(total_grad_norm([p.grad for p in params if id(p) not in skip], across))  # type: ignore[misc]
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)  # type: ignore[union-attr]
    return norm
