"""When the host reads the step's numbers (train.host_reads), and the device-side skip.

A GPU step is a queue of kernels; every `.item()`, `.tolist()` or `float(tensor)` in it makes the
host wait for the queue to drain, and the GPU then idles while the host computes the next launch.
Measured on an H100 (issue 43): seven such reads per step, 2.4-2.9 ms of a 66 ms step for the
metrics alone. `immediate` (the CPU's default, where a read costs nothing) reads each number where
it is needed, as before. `deferred` (CUDA's default) keeps the step's loss, gradient norm, bucket
losses, per-group norms, update ratio and noise-scale measurement on the device, packs them into
one float64 vector (`PackedRead`), copies it to pinned host memory without blocking, and reads it
once, after the next step's forward and backward are queued: the host judges step k while the GPU
computes step k+1. The guard's skip decision cannot wait for that read, so it is taken on the
device (`device_skip` from the guard's thresholds, `apply_unless`); the host replays the same
decision on the read values a step later, and a rollback, which needs the host, discards the
queued next step and goes back exactly as an immediate run does.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from tokenmill.train.errors import TrainError
from tokenmill.train.guard import SkipLimits

HostReads = Literal["immediate", "deferred"]


def resolve_host_reads(setting: str, device: torch.device, distributed: bool) -> HostReads:
    """train.host_reads for this process: auto is deferred on CUDA, immediate elsewhere and under
    torchrun (the step's collectives and cross-rank checks read their values per step)."""
    if setting == "auto":
        return "deferred" if device.type == "cuda" and not distributed else "immediate"
    if setting == "deferred" and distributed:
        raise TrainError("train.host_reads=deferred runs one process only; use auto or immediate under torchrun")
    return "deferred" if setting == "deferred" else "immediate"


class PackedRead:
    """Values of one step, concatenated into one float64 vector on the device, then copied to the
    host in one transfer: on CUDA non-blocking into pinned memory behind an event (`read` waits for
    that event only, not for the work queued after it); elsewhere the vector itself."""

    def __init__(self, parts: dict[str, torch.Tensor]):
        self.sizes = {k: int(v.numel()) for k, v in parts.items()}
        packed = torch.cat([v.detach().reshape(-1).double() for v in parts.values()])
        self.event: Any = None
        if packed.device.type == "cuda":
            self.host = torch.empty(packed.shape, dtype=torch.float64, pin_memory=True)
            self.host.copy_(packed, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = packed

    def read(self) -> dict[str, list[float]]:
        """{name: its values}: the step's one host read."""
        if self.event is not None:
            self.event.synchronize()
        flat, out, at = self.host.tolist(), {}, 0
        for name, n in self.sizes.items():
            out[name] = flat[at : at + n]
            at += n
        return out


def device_skip(loss: torch.Tensor, grad_norm: torch.Tensor, limits: SkipLimits) -> torch.Tensor:
    """`limits.skips(loss, grad_norm)` as a bool tensor on the device, compared in float64 so that
    it decides exactly as the host does on the same values read as Python floats."""
    loss64, norm64 = loss.detach().double(), grad_norm.detach().double()
    finite = torch.isfinite(loss64) & torch.isfinite(norm64)
    grad_spike = norm64 > limits.grad
    rebaselines = (loss64 <= limits.calm) & limits.rebaseline
    return ~finite | (grad_spike & ~rebaselines) | (~grad_spike & (loss64 > limits.loss))


def apply_unless(optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
    """optimizer.step() unless `skip` (a device bool), with no host read: a fused AdamW takes it as
    the loss scaler's `found_inf` (its kernel leaves parameters and moments alone and takes the step
    count back); any other optimizer steps, then every parameter and state tensor it touched is put
    back with torch.where (a copy of them per step: the CPU test path and non-fused optimizers)."""
    if all(g.get("fused") for g in optimizer.param_groups) and getattr(optimizer, "_step_supports_amp_scaling", False):
        optimizer.found_inf = skip.float()  # type: ignore[attr-defined]
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf  # type: ignore[attr-defined]
        return
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    had_state = {id(p) for p in params if optimizer.state.get(p)}
    before = [(p.detach().clone(), {k: v.clone() for k, v in optimizer.state[p].items() if torch.is_tensor(v)}) for p in params]
    optimizer.step()
    for p, (old, old_state) in zip(params, before):
        p.detach().copy_(torch.where(skip, old, p.detach()))
        state = optimizer.state[p]
        for k, v in old_state.items():
            state[k].copy_(torch.where(skip, v, state[k]))
        if id(p) not in had_state:
            # a first step skipped: the state the optimizer just created holds zero moments and step
            # 0 after the where above (it would create exactly that at its next step)
            for k, v in state.items():
                if torch.is_tensor(v):
                    v.copy_(torch.where(skip, torch.zeros_like(v), v))
