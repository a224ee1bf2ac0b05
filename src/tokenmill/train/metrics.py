"""Per-step training health signals beyond the loss (docs/training.md "Early-warning signals").

- gradient norm per layer group: a global norm hides which layer is drifting (the LM head or the
  last block usually is: monitor ||g|| per parameter group, not just the global norm);
- update/parameter ratio ||Δθ|| / ||θ||: the effective step size; ~1e-3 is healthy for AdamW,
  far above means the LR is too high for the current state;
- the embedding's top-to-second singular value ratio: a ratio that grows without bound means the
  embedding rows collapse toward one direction (representation collapse);
- process memory: peak bytes allocated (CUDA) or resident (CPU).

All work on plain modules and on DDP/FSDP2-wrapped ones (DTensor shards are reduced to the full
value), and draw from no random generator, so measuring never changes training.
"""

from __future__ import annotations

import re
import resource
import sys
from collections import OrderedDict
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _strip(name: str) -> str:
    """Parameter name without wrapper prefixes (DDP `module.`, torch.compile `_orig_mod.`)."""
    for prefix in ("module.", "_orig_mod."):
        while name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace("._orig_mod.", ".").replace("._checkpoint_wrapped_module.", ".")


def layer_group(name: str) -> str:
    """'layers.3.attn.q.weight' -> 'layers.3'; 'embed_tokens.weight' -> 'embed_tokens'."""
    name = _strip(name)
    m = _LAYER.search(name)
    return f"layers.{m.group(1)}" if m else name.split(".", 1)[0]


def _local_sq(t: torch.Tensor) -> torch.Tensor:
    """Σ t² as a float64 scalar; a sharded DTensor yields the full (all ranks) sum."""
    sq = t.detach().float().pow(2).sum()
    if hasattr(sq, "full_tensor"):
        sq = sq.full_tensor()
    return sq.double()


def _sq_norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Σ t² of each tensor, as one float64 vector. Plain tensors in one fused pass without
    temporaries (torch._foreach_norm), then one stack and one square for all of them: a kernel or
    two per tensor would be hundreds of launches per step, which on a GPU cost more than the pass
    itself (measured: the per-step metrics were 7% of a compiled H100 step). Sharded DTensors go
    through `_local_sq`, which sums over all ranks."""
    if not tensors:
        return torch.zeros(0, dtype=torch.float64)
    if any(hasattr(t, "full_tensor") for t in tensors):
        return torch.stack([_local_sq(t) for t in tensors])
    return torch.stack(torch._foreach_norm([t.detach() for t in tensors])).double().square()


def grad_sq_norms(model: nn.Module) -> tuple[list[str], torch.Tensor]:
    """The names of the parameters with a gradient and Σ g² of each, left on the device."""
    named = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
    return [n for n, _ in named], _sq_norms([g for _, g in named])


def group_sums(names: list[str], sqs: list[float]) -> OrderedDict[str, float]:
    """{layer group: Σ g² of its parameters}, from `grad_sq_norms` read on the host."""
    sums: OrderedDict[str, float] = OrderedDict()
    for name, sq in zip(names, sqs):
        g = layer_group(name)
        sums[g] = sums.get(g, 0.0) + sq
    return sums


def grad_norms_by_group(model: nn.Module, across: Any = None) -> dict[str, float]:
    """{layer group: L2 norm of its gradients}, groups in model order; tied weights counted once.
    `across`: the process group of a pipeline's stages, each holding some groups (a collective)."""
    names, sq_t = grad_sq_norms(model)
    sums = group_sums(names, sq_t.cpu().tolist() if names else [])  # one device sync
    if across is not None:
        gathered: list[Any] = [None] * dist.get_world_size(across)
        dist.all_gather_object(gathered, dict(sums), group=across)
        sums = OrderedDict()
        for part in gathered:  # stage order is model order; a tied group appears twice, equal
            for g, v in part.items():
                sums.setdefault(g, v)
    return {g: v**0.5 for g, v in sums.items()}


class UpdateRatio:
    """||θ_after - θ_before|| / ||θ_before|| over all parameters, for one optimizer step.

    Keeps one copy of the parameters between `before()` and `after()` (the price of measuring the
    actual update, whatever the optimizer did: clipping, weight decay, Adam's normalisation).
    `keep_buffer` holds that copy from one measured step to the next (measuring every step: no
    fresh allocation and page faults each step; the copy is alive during the step either way);
    `after()` turns it into the update in place, so it needs no other temporary."""

    def __init__(self, model: nn.Module, keep_buffer: bool = False, across: Any = None, skip: set[int] | None = None):
        """across: the pipeline's stage group (the sums run over every stage's parameters);
        skip: ids of parameters another stage already counts (a tied copy)."""
        self.params = [p for p in model.parameters() if p.requires_grad and id(p) not in (skip or set())]
        self.across = across
        self.keep_buffer = keep_buffer
        self._buffer: list[torch.Tensor] | None = None
        self._armed = False

    def before(self) -> None:
        current = [p.detach() for p in self.params]
        if self._buffer is None or any(hasattr(t, "full_tensor") for t in current):
            self._buffer = [t.clone() for t in current]
        else:
            torch._foreach_copy_(self._buffer, current)
        self._armed = True

    def sums(self) -> torch.Tensor:
        """[||Δθ||², ||θ_before||²] of this process's parameters, left on the device."""
        assert self._armed and self._buffer is not None, "before() was not called"
        den_t = _sq_norms(self._buffer).sum()
        if any(hasattr(t, "full_tensor") for t in self._buffer):
            diffs = [b - p.detach() for p, b in zip(self.params, self._buffer)]
        else:
            torch._foreach_sub_(self._buffer, [p.detach() for p in self.params])  # θ_before - θ_after
            diffs = self._buffer
        out = torch.stack([_sq_norms(diffs).sum(), den_t])
        self._armed = False
        if not self.keep_buffer:
            self._buffer = None
        return out

    @staticmethod
    def ratio(num: float, den: float) -> float:
        """||Δθ|| / ||θ_before|| from the two sums."""
        return float(num**0.5 / den**0.5) if den > 0 else 0.0

    def after(self) -> float:
        num, den = self.sums().tolist()  # one device sync for both
        if self.across is not None:
            dev = self.params[0].device if dist.get_backend(self.across) == "nccl" else torch.device("cpu")
            t = torch.tensor([num, den], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.across)
            num, den = float(t[0]), float(t[1])
        return self.ratio(num, den)


def embedding_spectrum(weight: torch.Tensor) -> dict[str, float]:
    """{"sv1", "sv2", "sv_ratio"}: the two largest singular values of the embedding matrix."""
    w = weight.detach()
    if hasattr(w, "full_tensor"):
        w = w.full_tensor()
    s = torch.linalg.svdvals(w.float().cpu())
    s1, s2 = float(s[0]), float(s[1]) if s.numel() > 1 else 0.0
    return {"sv1": s1, "sv2": s2, "sv_ratio": s1 / s2 if s2 > 0 else float("inf")}


def memory_bytes(device: torch.device) -> dict[str, int]:
    """{"peak": bytes}: CUDA max allocated since the last call (reset), else the process's peak RSS."""
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
        torch.cuda.reset_peak_memory_stats(device)
        return {"peak": peak, "allocated": int(torch.cuda.memory_allocated(device))}
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = rss_peak if sys.platform == "darwin" else rss_peak * 1024  # Linux reports KiB
    rss = _current_rss()
    # The kernel updates its high-water mark lazily, so the current RSS can be the larger one.
    return {"peak": max(int(peak), rss), "rss": rss}


def _current_rss() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0
