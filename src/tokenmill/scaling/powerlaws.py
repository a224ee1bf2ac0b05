"""Single-variable power laws (Kaplan et al. 2020 style) and the log-log line they rest on.

Fitted by `tokenmill scaling fit`, exactly:

- `PowerLaw` y = k·x^p: least squares of log y on log x (used for N*(C), D*(C) of the IsoFLOP
  minima and for FLOPs per token vs N).
- `ComputeFrontier` L(C) = E_c + (C_c/C)^α_C: fitted to the IsoFLOP minima (C = the budget's
  compute, L = the parabola's minimum loss), least squares on log L, E_c ≥ 0, α_C ≥ 0. Kaplan's
  L(C_min) has no offset; the offset E_c is the irreducible loss the frontier tends to, which a
  small-scale sweep needs to extrapolate without undershooting.
- `SizeLaw` L(N) = (N_c/N)^α_N: fitted, as a log-log line, to the best (lowest) loss reached at
  each model size N among the sweep runs. In a sweep that is the loss at that size's largest
  budget, not Kaplan's converged L(N), so α_N describes this sweep, not infinite data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence, Union

import numpy as np
from scipy.optimize import least_squares

from tokenmill.errors import UserError

# Numbers the fits take: a list or a numpy array (each goes through np.asarray first).
Floats = Union[Sequence[float], np.ndarray]


class PowerLawError(UserError, ValueError):
    """Too few or non-positive points for a power law; the message says which."""


def _positive(xs: Floats, ys: Floats, need: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise PowerLawError(f"{what}: x and y must be 1-D and of the same length")
    if np.any(x <= 0) or np.any(y <= 0) or not np.all(np.isfinite(x * y)):
        raise PowerLawError(f"{what}: every x and y must be positive and finite")
    if np.unique(x).size < need:
        raise PowerLawError(f"{what}: needs at least {need} distinct x values, got {np.unique(x).size}")
    return x, y


@dataclass(frozen=True)
class PowerLaw:
    """y = coefficient · x^exponent."""

    coefficient: float
    exponent: float

    def __call__(self, x: Any) -> Any:
        out = self.coefficient * np.asarray(x, dtype=float) ** self.exponent
        return float(out) if out.ndim == 0 else out

    def to_dict(self) -> dict[str, float]:
        return {"coefficient": self.coefficient, "exponent": self.exponent}


def fit_power_law(xs: Floats, ys: Floats) -> PowerLaw:
    """Least squares of log y on log x."""
    x, y = _positive(xs, ys, 2, "power law")
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    if not -700.0 < intercept < 700.0:  # two nearly equal x values: the line is vertical, exp() overflows
        raise PowerLawError(
            f"power law: the points do not determine a line (log-intercept {intercept:.3g}; "
            f"x from {x.min():.3g} to {x.max():.3g})"
        )
    return PowerLaw(math.exp(float(intercept)), float(slope))


@dataclass(frozen=True)
class ComputeFrontier:
    """L(C) = E_c + (C_c/C)^α_C."""

    E_c: float
    C_c: float
    alpha_c: float

    def __call__(self, compute: Any) -> Any:
        out = self.E_c + (self.C_c / np.asarray(compute, dtype=float)) ** self.alpha_c
        return float(out) if out.ndim == 0 else out

    def to_dict(self) -> dict[str, float]:
        return {"E_c": self.E_c, "C_c": self.C_c, "alpha_c": self.alpha_c}


def fit_compute_frontier(compute: Sequence[float], losses: Sequence[float]) -> ComputeFrontier:
    """E_c + (C_c/C)^α_C by least squares on log L, from a few offsets below the lowest loss."""
    c, l = _positive(compute, losses, 3, "L(C) frontier")
    log_c, log_l = np.log(c), np.log(l)

    def residuals(p: np.ndarray) -> np.ndarray:
        e_c, log_cc, alpha = p
        return np.log(e_c + np.exp(alpha * (log_cc - log_c))) - log_l

    best = None
    for frac in (0.0, 0.5, 0.8, 0.95):
        e0 = frac * float(l.min())
        # The rest of the start from a log-log line through (C, L − E_c).
        slope, intercept = np.polyfit(log_c, np.log(l - e0), 1)
        alpha0 = max(-float(slope), 1e-3)
        start = np.array([e0, float(intercept) / alpha0, alpha0])  # (C_c/C)^α = exp(α·log C_c − α·log C)
        res = least_squares(
            residuals,
            start,
            bounds=([0.0, -np.inf, 0.0], [float(l.min()), np.inf, np.inf]),
            x_scale="jac",
            xtol=1e-14,
            ftol=1e-14,
            gtol=1e-14,
            max_nfev=5000,
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    e_c, log_cc, alpha = (float(v) for v in best.x)
    return ComputeFrontier(e_c, math.exp(log_cc), alpha)


@dataclass(frozen=True)
class SizeLaw:
    """L(N) = (N_c/N)^α_N."""

    N_c: float
    alpha_n: float

    def __call__(self, params: Any) -> Any:
        out = (self.N_c / np.asarray(params, dtype=float)) ** self.alpha_n
        return float(out) if out.ndim == 0 else out

    def to_dict(self) -> dict[str, float]:
        return {"N_c": self.N_c, "alpha_n": self.alpha_n}


def best_loss_per_size(params: Sequence[float], losses: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The lowest loss at each distinct N, N ascending."""
    n, l = np.asarray(params, dtype=float), np.asarray(losses, dtype=float)
    sizes = np.unique(n)
    return sizes, np.array([l[n == s].min() for s in sizes])


def fit_size_law(params: Sequence[float], losses: Sequence[float]) -> SizeLaw:
    """(N_c/N)^α_N on the best loss per size: log L = α_N·log N_c − α_N·log N."""
    sizes, best = best_loss_per_size(params, losses)
    law = fit_power_law(sizes, best)
    alpha = -law.exponent
    if alpha < 1e-6:  # N_c = coefficient^(1/α) is meaningless (and overflows) without a falling loss
        raise PowerLawError(f"L(N): the best loss per size does not fall with N (log-log slope {-alpha:+.3g})")
    log_n_c = math.log(law.coefficient) / alpha
    if log_n_c > 700:  # exp would overflow: the loss barely falls with N in these runs
        raise PowerLawError(f"L(N): the best loss falls too slowly with N for a size law (exponent {-alpha:.3g})")
    return SizeLaw(math.exp(log_n_c), alpha)
