"""What each rank actually holds of the model after the parallel wrappers ran (DDP, FSDP2,
tensor and pipeline parallelism): every parameter's global shape, this rank's local shape and
its DTensor placements, and every rank's count of local elements.

Logged once in `train_start` (`sharding`), so a plan that was silently not applied shows
(placements empty, every rank holding the whole model) instead of only matching losses, which
an unsharded run matches too. Blocks are alike: their parameters are reported once, as
`layers.*.<name>`, from the first block this rank holds.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

_LAYER = re.compile(r"^layers\.\d+\.")


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def parameter_layout(model: nn.Module) -> dict[str, dict[str, Any]]:
    """{name: {"global": shape, "local": shape, "placements": [str]}} of this rank's parameters
    (a plain tensor: placements [], local == global); block parameters once, as layers.*.name."""
    out: dict[str, dict[str, Any]] = {}
    for name, p in model.named_parameters():
        key = _LAYER.sub("layers.*.", name)
        if key in out:
            continue
        out[key] = {
            "global": list(p.shape),
            "local": list(_local(p).shape),
            "placements": [repr(x) for x in getattr(p, "placements", ())],
        }
    return out


def local_numel(model: nn.Module) -> int:
    """Elements of the parameters this rank stores."""
    return sum(_local(p).numel() for p in model.parameters())


def numel_by_rank(model: nn.Module, group: Any = None, device: torch.device | None = None) -> list[int]:
    """Every rank's `local_numel` (a collective over `group`; one entry without a process group)."""
    n = local_numel(model)
    if not (dist.is_available() and dist.is_initialized()):
        return [n]
    dev = device if device is not None and dist.get_backend(group) == "nccl" else torch.device("cpu")
    mine = torch.tensor([n], dtype=torch.int64, device=dev)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    return [int(t.item()) for t in every]


def sharding_report(model: nn.Module, device: torch.device | None = None) -> dict[str, Any]:
    """The `train_start` field: parameter layout (this rank) and local elements of every rank."""
    return {"params": parameter_layout(model), "numel_by_rank": numel_by_rank(model, device=device)}
