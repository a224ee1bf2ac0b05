"""The gradient noise scale B_simple, measured while training (McCandlish et al. 2018, App. A.1).

A batch of B tokens gives a gradient estimate G_B with E|G_B|² = |G|² + tr(Σ)/B, where G is the
true gradient and Σ the per-token gradient covariance. Two batch sizes of the same step give two
equations and so unbiased estimates of both unknowns:

    |G|²   ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr(Σ)  ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

and B_simple = tr(Σ)/|G|², the batch at which the gradient's noise equals its signal: the
critical batch B_crit ≈ B_simple, where the steps-vs-examples trade-off bends
(S/S_min − 1)(E/E_min − 1) = 1. Here B_small is the first micro-batch of the step (its gradient
is the accumulation buffer after one backward, rescaled to a mean over its own targets) and
B_big the whole global batch (the pre-clip gradient the trainer already measures), so the
measurement costs one pass over the gradients per step and needs grad_accum ≥ 2. Each estimate
alone is noisy, often negative: the paper smooths numerator and denominator separately (an
exponential moving average each, bias-corrected like Adam's moments) before dividing, as here.
Batch sizes are counted in loss targets (tokens), so B_simple is in tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn


def grad_sq_norm(params: Iterable[nn.Parameter]) -> float:
    """Σ |p.grad|² over the parameters that have a gradient (one fused pass)."""
    grads = [p.grad.detach() for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.nn.utils.get_total_norm(grads, 2.0).double() ** 2)


def unbiased_estimates(small_sq: float, b_small: float, big_sq: float, b_big: float) -> tuple[float, float]:
    """(|G|², tr Σ) from the squared norms of mean gradients over b_small and b_big targets."""
    if not b_big > b_small > 0:
        raise ValueError(f"need b_big > b_small > 0, got b_small={b_small}, b_big={b_big}")
    g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


@dataclass
class SmallBatch:
    """The first micro-batch's measurement of one step: |G_small|² and its target count."""

    sq: float
    targets: int


class NoiseScale:
    """Bias-corrected EMAs of |G|² and tr Σ; B_simple is their ratio. Part of the training state
    (state.json "noise_scale"), so a resumed run logs the same estimates as an unbroken one."""

    def __init__(self, decay: float = 0.99):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"noise scale EMA decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.g2 = 0.0
        self.trace = 0.0
        self.count = 0

    def update(self, small: SmallBatch, big_sq: float, b_big: int) -> dict[str, float | None]:
        """Fold in one step; returns the step's raw estimates and the smoothed B_simple (tokens)."""
        if not 0 < small.targets < b_big:
            return {"noise_g2": None, "noise_trace": None, "b_simple": self.b_simple}
        g2, trace = unbiased_estimates(small.sq, small.targets, big_sq, b_big)
        if not (math.isfinite(g2) and math.isfinite(trace)):
            return {"noise_g2": None, "noise_trace": None, "b_simple": self.b_simple}
        self.g2 = self.decay * self.g2 + (1 - self.decay) * g2
        self.trace = self.decay * self.trace + (1 - self.decay) * trace
        self.count += 1
        return {"noise_g2": g2, "noise_trace": trace, "b_simple": self.b_simple}

    @property
    def b_simple(self) -> float | None:
        """tr Σ / |G|² of the smoothed values; None until |G|² is positive (early, or pure noise)."""
        if self.count == 0 or self.g2 <= 0:
            return None
        # the bias corrections 1 − decay^count cancel in the ratio
        return self.trace / self.g2

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "g2": self.g2, "trace": self.trace, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.g2 = float(state.get("g2", 0.0))
        self.trace = float(state.get("trace", 0.0))
        self.count = int(state.get("count", 0))


def unavailable_reason(grad_accum: int, objective: str, model_parallel: bool, fsdp: bool, every: int) -> str | None:
    """Why this run cannot measure the noise scale (None: it can)."""
    if every <= 0:
        return "train.noise_scale_every is 0"
    if grad_accum < 2:
        return (
            "it needs two batch sizes in one step: train.grad_accum >= 2 (or a global batch of at "
            "least two micro-batches per rank)"
        )
    if objective != "clm":
        return f"objective {objective!r}: its per-micro-batch target count is not known before the batch is built"
    if model_parallel or fsdp:
        return "tensor/pipeline/FSDP layouts hold no unsharded per-micro-batch gradient to measure"
    return None


class NoiseProbe:
    """Catches the first micro-batch's gradient of each step inside `step_loss`.

    After the first backward the accumulation buffer holds ∇(Σ NLL over that micro-batch) / N,
    N the global batch's target count; times N / n_1 it is the mean gradient over the micro-batch's
    own n_1 targets. Under DDP the first micro-batch runs without gradient sync, so the buffer
    is this rank's alone; the ranks' measurements are averaged afterwards (`average_over`)."""

    def __init__(self, on_device: bool = False) -> None:
        self.small: SmallBatch | None = None
        self.b_big = 0
        # on_device (train.host_reads deferred): |g|² stays a device tensor (`pending`) until `settle`
        self.on_device, self._targets = on_device, 0
        self.pending: torch.Tensor | None = None

    def reset(self) -> None:
        self.small, self.b_big = None, 0

    def measure(self, params: Iterable[nn.Parameter], micro_targets: int, global_targets: int) -> None:
        if self.on_device:
            self.pending = self.measure_on_device(params, micro_targets, global_targets)
            return
        scale = global_targets / micro_targets if micro_targets > 0 else 0.0
        self.small = SmallBatch(sq=grad_sq_norm(params) * scale * scale, targets=micro_targets)
        self.b_big = global_targets

    def measure_on_device(self, params: Iterable[nn.Parameter], micro_targets: int, global_targets: int) -> torch.Tensor:
        """`measure` with |g|² left on the device (returned); `settle` takes its host value later."""
        grads = [p.grad.detach() for p in params if p.grad is not None]
        sq = torch.nn.utils.get_total_norm(grads, 2.0).double() ** 2 if grads else torch.zeros((), dtype=torch.float64)
        self.small, self.b_big, self._targets = None, global_targets, micro_targets
        return sq

    def settle(self, sq: float) -> None:
        """The first micro-batch's measurement from the host value of `measure_on_device`'s tensor,
        scaled exactly as `measure` scales it."""
        micro, total = self._targets, self.b_big
        scale = total / micro if micro > 0 else 0.0
        self.small = SmallBatch(sq=sq * scale * scale, targets=micro)

    def average_over(self, reduce_sum: Any, ranks: int) -> None:
        """Mean of |G_small|² and of n_1 over `ranks` data-parallel ranks (`reduce_sum`: Σ over them)."""
        if self.small is None or ranks <= 1:  # every rank measured (or none did): same branch on all
            return
        self.small = SmallBatch(
            sq=reduce_sum(self.small.sq) / ranks, targets=round(reduce_sum(float(self.small.targets)) / ranks)
        )
