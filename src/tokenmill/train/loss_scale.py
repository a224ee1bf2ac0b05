"""Dynamic loss scaling for train.dtype=float16.

fp16 has bf16's precision and more, but five exponent bits: gradients below ~6e-8 flush to zero.
The loss is multiplied by a scale S before backward, so every gradient autocast computes in fp16 is
S times larger; the fp32 master gradients are divided by S again before anything reads them (the
clip, the gradient-norm metrics, the guard, the optimizer). A step whose unscaled gradients hold an
inf or NaN overflowed at this scale: it is skipped (the guard's `overflow` verdict, not a spike)
and S backs off; after `growth_interval` clean steps S grows. This is torch.amp.GradScaler's rule,
and the update is its kernel (`torch._amp_update_scale_`), but the state lives here for three
reasons: the scale is a device tensor that the deferred host-reads mode multiplies and updates
without reading it (train/host_reads.py); "overflowed" is decided from the global pre-clip gradient
norm, which the clip already all-reduces over DDP, FSDP2 and tensor-parallel ranks, so every rank
sees an inf found on any rank without another collective (GradScaler's per-rank `found_inf` would
need ShardedGradScaler's extra all-reduce); and its state goes into state.json, JSON-exact
(S is a power of two), so a resumed run scales exactly as the uninterrupted one.

A scale at `min_scale` that still overflows `max_overflows_at_floor` steps in a row is not a
transient: the model's gradients do not fit fp16 at all, and the run stops with that message.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch

from tokenmill.train.config import LossScaleConfig
from tokenmill.train.errors import TrainError


class LossScaler:
    """The loss scale S (a device scalar), its growth counter, and the overflow bookkeeping."""

    def __init__(self, cfg: LossScaleConfig, device: torch.device):
        self.cfg = cfg
        self.scale = torch.full((), float(cfg.init_scale), dtype=torch.float32, device=device)
        self.growth_tracker = torch.zeros((), dtype=torch.int32, device=device)
        self.overflows = 0  # steps skipped for overflow, the whole run
        self.in_a_row = 0  # overflowing steps in a row at the floor scale

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss backward runs on: loss × S."""
        return loss * self.scale

    @torch.no_grad()
    def unscale(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Divide every gradient by S in place (exact: S is a power of two). A DTensor's local part
        is scaled: a scalar factor commutes with its sharding and with a pending (Partial) sum."""
        grads = [p.grad for p in params if p.grad is not None]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        if local:
            torch._foreach_mul_(local, self.scale.reciprocal())

    @torch.no_grad()
    def update(self, found_inf: torch.Tensor) -> None:
        """S after a step: × backoff_factor on overflow (found_inf != 0), × growth_factor after
        growth_interval clean steps; never below min_scale. No host read."""
        cfg = self.cfg
        torch._amp_update_scale_(
            self.scale,
            self.growth_tracker,
            found_inf.to(self.scale.device, torch.float32),
            cfg.growth_factor,
            cfg.backoff_factor,
            cfg.growth_interval,
        )
        self.scale.clamp_(min=cfg.min_scale)

    def note(self, step: int, overflow: bool, scale: float) -> None:
        """Count the host's verdict on step `step` (`scale`: the S it ran at); stop the run when
        max_overflows_at_floor steps in a row overflowed with the scale at its floor."""
        self.overflows += int(overflow)
        self.in_a_row = self.in_a_row + 1 if overflow and scale <= self.cfg.min_scale else 0
        if self.in_a_row >= self.cfg.max_overflows_at_floor:
            raise TrainError(
                f"fp16 loss scale collapsed: {self.in_a_row} overflowing steps in a row up to step {step} with the "
                f"scale at its floor train.loss_scale.min_scale={self.cfg.min_scale:g}; the gradients do not fit "
                f"float16 at any scale: use train.dtype=bfloat16 or float32, or lower train.lr"
            )

    def state_dict(self) -> dict[str, Any]:
        return {
            "scale": float(self.scale),
            "growth_tracker": int(self.growth_tracker),
            "overflows": self.overflows,
            "in_a_row": self.in_a_row,
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not state:  # a checkpoint of a bf16/fp32 run resumed in fp16: start from init_scale
            return
        self.scale.fill_(float(state["scale"]))
        self.growth_tracker.fill_(int(state["growth_tracker"]))
        self.overflows, self.in_a_row = int(state["overflows"]), int(state["in_a_row"])


def build_scaler(dtype: torch.dtype, cfg: LossScaleConfig, device: torch.device) -> LossScaler | None:
    """A scaler for fp16 autocast; None for bf16 and fp32 (their range needs none)."""
    return LossScaler(cfg, device) if dtype == torch.float16 else None


def after_step(scaler: LossScaler | None, loss: float, grad_norm: float) -> bool:
    """A step judged on the host (immediate reads, `tokenmill replay`): S updated from its global
    gradient norm (backed off on any non-finite one); whether it was an overflow."""
    if scaler is None:
        return False
    scaler.update(torch.tensor(0.0 if math.isfinite(grad_norm) else 1.0))
    return is_overflow(scaler, loss, grad_norm)


def is_overflow(scaler: LossScaler | None, loss: float, grad_norm: float) -> bool:
    """A scaled step overflowed: the loss is finite but its gradients are not. A non-finite loss is
    not an overflow (scaling cannot cause it): the guard's `nonfinite` skip, a real fault."""
    return scaler is not None and math.isfinite(loss) and not math.isfinite(grad_norm)
