"""Mixture weights by regression over a few proxy runs (RegMix, Liu et al. 2024) with a data
mixing law as the regression (Ye et al. 2024, "Data Mixing Laws").

A handful of small proxy models are trained on sampled mixtures r (points of the simplex over the
buckets). Their held-out loss on each bucket i is fitted by the data mixing law

    L_i(r) = c_i + k_i · exp(Σ_j t_ij r_j)

(k + 2 parameters per bucket: the irreducible part c_i, a scale k_i and how much each bucket's
share moves bucket i's loss, t_ij < 0 when bucket j helps i). The mixture that minimises the
objective — the mean of the fitted per-bucket losses — is then found over the simplex: the best of
many random candidates, polished by SLSQP. Leave-one-out errors of the fits say how far the
law can be trusted on these points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, minimize


def sample_mixtures(k: int, n: int, seed: int, min_weight: float, anchors: list[np.ndarray]) -> np.ndarray:
    """`anchors` (e.g. uniform and token-proportional) then n − len(anchors) Dirichlet(1) draws,
    every weight at least `min_weight` (a bucket with no share says nothing about its slope)."""
    if min_weight * k >= 1:
        raise ValueError(f"min_weight {min_weight} × {k} buckets leaves no room to sample")
    rng = np.random.default_rng(seed)
    out = [np.asarray(a, dtype=np.float64) / np.sum(a) for a in anchors][:n]
    while len(out) < n:
        out.append(min_weight + (1 - k * min_weight) * rng.dirichlet(np.ones(k)))
    return np.stack(out)


def law(params: np.ndarray, r: np.ndarray) -> np.ndarray:
    """L(r) = c + exp(log_k + r · t) for each row of r; params = (c, log_k, t_1..t_k)."""
    c, log_k, t = params[0], params[1], params[2:]
    return c + np.exp(log_k + r @ t)


@dataclass
class LawFit:
    params: np.ndarray
    rmse: float  # on the points it was fitted on
    loo_errors: list[float]  # leave-one-out prediction error at each point (NaN: too few points)

    def predict(self, r: np.ndarray) -> np.ndarray:
        return law(self.params, np.atleast_2d(r))


def _fit_once(r: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares from a few starts (the law is not convex in its parameters); the best fit."""
    k = r.shape[1]
    lo = float(y.min())
    best, best_cost = None, math.inf
    for c0 in (0.5 * lo, 0.9 * lo, 0.99 * lo):
        x0 = np.concatenate([[c0, math.log(max(float(y.mean()) - c0, 1e-3))], np.zeros(k)])
        res = least_squares(lambda p: law(p, r) - y, x0, bounds=([0.0, -20.0] + [-50.0] * k, [lo, 20.0] + [50.0] * k))
        if res.cost < best_cost:
            best, best_cost = res.x, res.cost
    assert best is not None
    return best


def fit_law(r: np.ndarray, y: np.ndarray) -> LawFit:
    """Fit one bucket's law to (mixtures, losses) and its leave-one-out errors."""
    params = _fit_once(r, y)
    rmse = float(np.sqrt(np.mean((law(params, r) - y) ** 2)))
    loo = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        if keep.sum() < r.shape[1] + 2:
            loo.append(float("nan"))
            continue
        p = _fit_once(r[keep], y[keep])
        loo.append(float(law(p, r[i : i + 1])[0] - y[i]))
    return LawFit(params, rmse, loo)


def best_mixture(
    fits: list[LawFit], k: int, seed: int, candidates: int, min_weight: float, upper: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """The mixture minimising the mean predicted loss over buckets, within min_weight ≤ r_i ≤ upper_i
    (upper: e.g. the share at which a bucket would be repeated more than a few epochs)."""
    hi = np.ones(k) if upper is None else np.minimum(np.asarray(upper, dtype=np.float64), 1.0)
    if hi.sum() < 1.0 or (hi < min_weight).any():
        raise ValueError(
            f"no mixture fits the bounds: at most {np.round(hi, 4).tolist()} per bucket "
            f"(sum {hi.sum():.3f} < 1, or below min_weight {min_weight})"
        )

    def objective(r: np.ndarray) -> np.ndarray:
        return np.mean([f.predict(r) for f in fits], axis=0)

    rng = np.random.default_rng(seed)
    pool = min_weight + (1 - k * min_weight) * rng.dirichlet(np.ones(k), size=candidates)
    pool = pool[(pool <= hi + 1e-12).all(axis=1)]
    if len(pool) == 0:
        raise ValueError(
            f"none of {candidates} random mixtures lies under the bounds {np.round(hi, 4).tolist()}; raise regmix.candidates"
        )
    start = pool[int(np.argmin(objective(pool)))]
    res = minimize(
        lambda r: float(objective(r)[0]),
        start,
        method="SLSQP",
        bounds=list(zip([min_weight] * k, hi)),
        constraints=[{"type": "eq", "fun": lambda r: np.sum(r) - 1.0}],
    )
    ok = res.success and abs(res.x.sum() - 1) < 1e-6 and (res.x <= hi + 1e-9).all() and (res.x >= min_weight - 1e-9).all()
    r = res.x if ok and float(objective(res.x)[0]) <= float(objective(start)[0]) else start
    r = np.clip(r, min_weight, hi)
    r /= r.sum()
    return r, float(objective(r)[0])
