"""L(N, D) = E + A/N^α + B/D^β fitted as Chinchilla's approach 3, with bootstrap intervals.

Hoffmann et al. 2022, appendix D.2: with a = log A, b = log B, e = log E, minimise over the runs

    Σ_i Huber_δ( LSE(a − α·log N_i, b − β·log D_i, e) − log L_i ),   δ = 1e-3,

by L-BFGS from a grid of initialisations (α, β ∈ {0, 0.5, …, 2}, e ∈ {−1, −0.5, …, 1},
a, b ∈ {0, 5, …, 25}; 4 500 points). Here the whole grid is *scored* in one vectorised pass and
the quasi-Newton search starts only from the `starts` best points (16 by default): the grid still
chooses the basin, the optimiser never wastes time on starts that are far worse. The optimiser is
SLSQP (scipy; a BFGS-updated quasi-Newton method that honours bounds, analytic gradient), not
L-BFGS-B: with 5 parameters the limited-memory variant saves nothing, and scipy's L-BFGS-B calls
threaded OpenBLAS kernels per iteration that ran ~40× slower on a loaded 2-core machine. Unlike
the paper, α and β are bounded to [0, 4] (the grid spans [0, 2]) and a, b, e to at most 700:
bootstrap resamples of a small sweep otherwise reach step-function fits (α ≈ 50, A ≈ e^800) that
overflow and predict nothing. The objective is divided by δ² before it reaches the optimiser: raw
Huber values are ~1e-6, and a stopping test relative to max(|f|, 1) made the original fit stop
early (Besiroglu et al. 2024, "Chinchilla scaling: a replication attempt").

N is the non-embedding parameter count and D the training tokens of each run
(scaling/results.py). Compute-optimal allocation under C = 6·N·D (their eq. 4):

    N_opt(C) = G·(C/6)^a,  D_opt(C) = G⁻¹·(C/6)^b,  a = β/(α+β),  b = α/(α+β),
    G = (α·A / (β·B))^(1/(α+β)).

Real runs' exact compute is not 6·N·D with non-embedding N (the output projection and attention
add to it), so `frontier` finds the compute-optimal loss numerically along C = f(N)·D, with f the
FLOPs per token as a function of N measured from the runs themselves (a power law in N).

Bootstrap: resample the sweep runs with replacement (seeded), refit each resample from the full
fit's optimum plus the `bootstrap_starts − 1` best grid points of the resample, and report the
5–95 % quantiles of every parameter and of any prediction.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from pydantic import Field, field_validator
from scipy.optimize import minimize, minimize_scalar

from tokenmill.config_base import Strict
from tokenmill.errors import UserError
from tokenmill.scaling.powerlaws import Floats, PowerLaw, fit_power_law
from tokenmill.scaling.results import RunResult, holdout_runs, sweep_runs

PARAMETERS: tuple[str, ...] = ("E", "A", "B", "alpha", "beta", "a", "b")


class FitConfig(Strict):
    """How `tokenmill scaling fit` fits L(N, D) and how much it bootstraps."""

    huber_delta: float | None = Field(
        1e-3, gt=0, description="Huber δ on log-loss residuals (Chinchilla: 1e-3); null fits least squares."
    )
    starts: int = Field(16, ge=1, description="Optimiser starts: the best points of the Chinchilla initialisation grid.")
    bootstrap_samples: int = Field(200, ge=0, description="Bootstrap resamples of the sweep runs (0: no intervals).")
    bootstrap_starts: int = Field(
        2, ge=1, description="Starts per resample: the full fit's optimum plus the best grid points of the resample."
    )
    interval: tuple[float, float] = Field((0.05, 0.95), description="Quantiles of the bootstrap interval.")
    seed: int = Field(0, description="Seed of the bootstrap resampling.")

    @field_validator("interval")
    @classmethod
    def _ordered_quantiles(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= v[0] < v[1] <= 1.0:
            raise ValueError(f"interval quantiles must satisfy 0 <= low < high <= 1, got {list(v)}")
        return v


class ScalingFitError(UserError, ValueError):
    """Too few or degenerate runs for the requested fit; the message says what is missing."""


# --------------------------------------------------------------------------- the law
@dataclass(frozen=True)
class ChinchillaFit:
    """L(N, D) = E + A/N^α + B/D^β with the objective it reached."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float  # Σ Huber_δ (or ½ Σ r² for least squares) of log-loss residuals, unscaled
    runs: int
    huber_delta: float | None
    converged: bool

    def predict(self, params: Any, tokens: Any) -> Any:
        """Loss at N non-embedding parameters trained on D tokens (scalars or arrays)."""
        n = np.asarray(params, dtype=float)
        d = np.asarray(tokens, dtype=float)
        out = self.E + self.A / n**self.alpha + self.B / d**self.beta
        return float(out) if out.ndim == 0 else out

    @property
    def a(self) -> float:
        """Exponent of N_opt ∝ C^a: β/(α+β)."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """Exponent of D_opt ∝ C^b: α/(α+β)."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def G(self) -> float:
        return (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))

    def n_opt(self, compute: Any) -> Any:
        """Compute-optimal N under C = 6·N·D: G·(C/6)^a."""
        return self.G * (np.asarray(compute, dtype=float) / 6.0) ** self.a

    def d_opt(self, compute: Any) -> Any:
        """Compute-optimal D under C = 6·N·D: G⁻¹·(C/6)^b."""
        return (np.asarray(compute, dtype=float) / 6.0) ** self.b / self.G

    def value(self, name: str) -> float:
        return float(getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "E": self.E,
            "A": self.A,
            "B": self.B,
            "alpha": self.alpha,
            "beta": self.beta,
            "a": self.a,
            "b": self.b,
            "G": self.G,
            "objective": self.objective,
            "runs": self.runs,
            "huber_delta": self.huber_delta,
            "converged": self.converged,
        }


def chinchilla_grid() -> np.ndarray:
    """Hoffmann et al.'s initialisation grid as rows (a, b, e, α, β)."""
    alphas = np.arange(0.0, 2.01, 0.5)
    es = np.arange(-1.0, 1.01, 0.5)
    abs_ = np.arange(0.0, 25.01, 5.0)
    return np.array([(a, b, e, al, be) for a, b, e, al, be in itertools.product(abs_, abs_, es, alphas, alphas)])


def _residuals(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray):
    """r = LSE(a − α log N, b − β log D, e) − log L for rows of theta (k, 5) → (k, n), and the softmax weights."""
    a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
    terms = np.stack([a - al * log_n, b - be * log_d, np.broadcast_to(e, (theta.shape[0], log_n.size))])
    top = terms.max(axis=0)
    expd = np.exp(terms - top)
    total = expd.sum(axis=0)
    return top + np.log(total) - log_l, expd / total


def _penalty(r: np.ndarray, delta: float | None) -> np.ndarray:
    if delta is None:
        return 0.5 * r * r
    small = np.abs(r) <= delta
    return np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))


def _objective(theta: np.ndarray, log_n, log_d, log_l, delta: float | None) -> np.ndarray:
    r, _ = _residuals(np.atleast_2d(theta), log_n, log_d, log_l)
    return _penalty(r, delta).sum(axis=1)


def _scaled_objective_and_grad(theta: np.ndarray, log_n, log_d, log_l, delta: float | None, scale: float):
    r, w = _residuals(theta[None, :], log_n, log_d, log_l)
    r, w = r[0], w[:, 0, :]
    psi = r if delta is None else np.clip(r, -delta, delta)  # derivative of the penalty
    grad = np.array(
        [
            (psi * w[0]).sum(),
            (psi * w[1]).sum(),
            (psi * w[2]).sum(),
            -(psi * w[0] * log_n).sum(),
            -(psi * w[1] * log_d).sum(),
        ]
    )
    return float(_penalty(r, delta).sum()) * scale, grad * scale


MAX_EXPONENT = 4.0
MAX_LOG_COEFFICIENT = 700.0  # exp(700) is still a finite float64
_BOUNDS = [(None, MAX_LOG_COEFFICIENT)] * 3 + [(0.0, MAX_EXPONENT)] * 2


def _polish(starts: np.ndarray, log_n, log_d, log_l, delta: float | None) -> tuple[np.ndarray, float, bool]:
    """SLSQP from each start; the best optimum, its unscaled objective and whether it converged."""
    scale = 1.0 / (delta if delta is not None else 1e-3) ** 2
    best: tuple[np.ndarray, float, bool] | None = None
    for start in starts:
        res = minimize(
            _scaled_objective_and_grad,
            start,
            args=(log_n, log_d, log_l, delta, scale),
            jac=True,
            method="SLSQP",
            bounds=_BOUNDS,
            options={"maxiter": 2000, "ftol": 1e-14},
        )
        x = np.clip(res.x, [b[0] if b[0] is not None else -np.inf for b in _BOUNDS], [b[1] for b in _BOUNDS])
        value = float(_objective(x, log_n, log_d, log_l, delta)[0])
        if best is None or value < best[1]:
            best = (x, value, bool(res.success))
    assert best is not None
    return best


def _as_arrays(params: Floats, tokens: Floats, losses: Floats):
    n, d, l = (np.asarray(x, dtype=float) for x in (params, tokens, losses))
    if not (n.shape == d.shape == l.shape and n.ndim == 1):
        raise ScalingFitError("params, tokens and losses must be 1-D sequences of the same length")
    if np.any(n <= 0) or np.any(d <= 0) or np.any(l <= 0) or not np.all(np.isfinite(n * d * l)):
        raise ScalingFitError("params, tokens and losses must be positive and finite")
    if n.size < 5:
        raise ScalingFitError(f"L(N, D) has 5 parameters; {n.size} sweep run(s) cannot determine them (need at least 5)")
    if np.unique(n).size < 2 or np.unique(d).size < 2:
        raise ScalingFitError("the sweep must vary both N (params) and D (tokens) to fit L(N, D)")
    return np.log(n), np.log(d), np.log(l)


def _make_fit(theta: np.ndarray, objective: float, runs: int, delta: float | None, converged: bool) -> ChinchillaFit:
    a, b, e, al, be = (float(x) for x in theta)
    return ChinchillaFit(
        E=math.exp(e),
        A=math.exp(a),
        B=math.exp(b),
        alpha=al,
        beta=be,
        objective=objective,
        runs=runs,
        huber_delta=delta,
        converged=converged,
    )


def fit_chinchilla(
    params: Floats,
    tokens: Floats,
    losses: Floats,
    *,
    huber_delta: float | None = 1e-3,
    starts: int = 16,
    extra_starts: Sequence[Floats] = (),
) -> ChinchillaFit:
    """Approach 3 on (N, D, L) triples. `extra_starts`: more (a, b, e, α, β) starts tried besides the grid's best."""
    log_n, log_d, log_l = _as_arrays(params, tokens, losses)
    grid = chinchilla_grid()
    scores = _objective(grid, log_n, log_d, log_l, huber_delta)
    chosen = grid[np.argsort(scores, kind="stable")[:starts]]
    if len(extra_starts):
        chosen = np.vstack([np.asarray(extra_starts, dtype=float).reshape(-1, 5), chosen])
    theta, value, ok = _polish(chosen, log_n, log_d, log_l, huber_delta)
    return _make_fit(theta, value, log_n.size, huber_delta, ok)


def theta_of(fit: ChinchillaFit) -> np.ndarray:
    """(a, b, e, α, β) of a fit: the coordinates the optimiser works in."""
    return np.array([math.log(fit.A), math.log(fit.B), math.log(fit.E), fit.alpha, fit.beta])


def fit_runs(runs: Sequence[RunResult], config: FitConfig | None = None) -> ChinchillaFit:
    """Approach 3 on the sweep runs (role 'sweep') only."""
    config = config or FitConfig()
    fitted = sweep_runs(runs)
    return fit_chinchilla(
        [r.params for r in fitted],
        [r.tokens for r in fitted],
        [r.loss for r in fitted],
        huber_delta=config.huber_delta,
        starts=config.starts,
    )


# --------------------------------------------------------------------------- bootstrap
@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class ChinchillaBootstrap:
    """The fit on every sweep run plus its refits on resampled runs."""

    fit: ChinchillaFit
    samples: tuple[ChinchillaFit, ...]
    quantiles: tuple[float, float] = (0.05, 0.95)
    seed: int = 0

    def interval(self, name: str) -> Interval | None:
        """Bootstrap interval of a parameter (E, A, B, alpha, beta, a, b); None without samples."""
        if not self.samples:
            return None
        values = np.array([s.value(name) for s in self.samples])
        lo, hi = np.quantile(values, self.quantiles)
        return Interval(float(lo), float(hi))

    def predict_interval(self, params: float, tokens: float) -> Interval | None:
        if not self.samples:
            return None
        values = np.array([s.predict(params, tokens) for s in self.samples])
        lo, hi = np.quantile(values, self.quantiles)
        return Interval(float(lo), float(hi))

    def to_dict(self) -> dict[str, Any]:
        intervals = {k: self.interval(k) for k in PARAMETERS}
        return {
            "fit": self.fit.to_dict(),
            "samples": len(self.samples),
            "quantiles": list(self.quantiles),
            "seed": self.seed,
            "intervals": {k: None if v is None else [v.low, v.high] for k, v in intervals.items()},
        }


def bootstrap_chinchilla(
    params: Sequence[float],
    tokens: Sequence[float],
    losses: Sequence[float],
    *,
    fit: ChinchillaFit | None = None,
    samples: int = 200,
    seed: int = 0,
    huber_delta: float | None = 1e-3,
    starts: int = 16,
    bootstrap_starts: int = 2,
    quantiles: tuple[float, float] = (0.05, 0.95),
) -> ChinchillaBootstrap:
    """Refit `samples` resamples (with replacement, numpy Generator seeded by `seed`)."""
    n, d, l = (np.asarray(x, dtype=float) for x in (params, tokens, losses))
    full = fit or fit_chinchilla(n, d, l, huber_delta=huber_delta, starts=starts)
    rng = np.random.default_rng(seed)
    refits: list[ChinchillaFit] = []
    attempts = 0
    while len(refits) < samples:
        attempts += 1
        if attempts > 10 * samples + 10:
            raise ScalingFitError("bootstrap resamples keep lacking variation in N or D; add sweep runs")
        idx = rng.integers(0, n.size, n.size)
        # A resample with a single N or D cannot determine the law: draw another (rare beyond a few runs).
        if np.unique(n[idx]).size < 2 or np.unique(d[idx]).size < 2:
            continue
        refits.append(
            fit_chinchilla(
                n[idx],
                d[idx],
                l[idx],
                huber_delta=huber_delta,
                starts=max(bootstrap_starts - 1, 1),
                extra_starts=[theta_of(full)],
            )
        )
    return ChinchillaBootstrap(fit=full, samples=tuple(refits), quantiles=quantiles, seed=seed)


def bootstrap_runs(runs: Sequence[RunResult], config: FitConfig | None = None) -> ChinchillaBootstrap:
    """Fit and bootstrap the sweep runs with `config`."""
    config = config or FitConfig()
    fitted = sweep_runs(runs)
    n, d, l = [r.params for r in fitted], [r.tokens for r in fitted], [r.loss for r in fitted]
    full = fit_chinchilla(n, d, l, huber_delta=config.huber_delta, starts=config.starts)
    return bootstrap_chinchilla(
        n,
        d,
        l,
        fit=full,
        samples=config.bootstrap_samples,
        seed=config.seed,
        huber_delta=config.huber_delta,
        bootstrap_starts=config.bootstrap_starts,
        quantiles=config.interval,
    )


# --------------------------------------------------------------------------- predictions
@dataclass(frozen=True)
class Prediction:
    params: float
    tokens: float
    loss: float
    interval: Interval | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "tokens": self.tokens,
            "loss": self.loss,
            "interval": None if self.interval is None else [self.interval.low, self.interval.high],
        }


def predict(fit: ChinchillaBootstrap | ChinchillaFit, params: float, tokens: float) -> Prediction:
    """Predicted loss at (N, D), with the bootstrap interval when `fit` carries samples."""
    if isinstance(fit, ChinchillaBootstrap):
        return Prediction(float(params), float(tokens), fit.fit.predict(params, tokens), fit.predict_interval(params, tokens))
    return Prediction(float(params), float(tokens), fit.predict(params, tokens), None)


@dataclass(frozen=True)
class HoldoutCheck:
    """A held-out run's actual loss next to the law's prediction for its N and D."""

    name: str
    params: int
    tokens: int
    flops: float
    actual: float
    predicted: float
    interval: Interval | None
    relative_error: float  # (predicted − actual) / actual

    @property
    def within_interval(self) -> bool | None:
        return None if self.interval is None else self.interval.contains(self.actual)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": self.params,
            "tokens": self.tokens,
            "flops": self.flops,
            "actual": self.actual,
            "predicted": self.predicted,
            "interval": None if self.interval is None else [self.interval.low, self.interval.high],
            "relative_error": self.relative_error,
            "within_interval": self.within_interval,
        }


def evaluate_holdout(results: Sequence[RunResult], fit: ChinchillaBootstrap | ChinchillaFit) -> list[HoldoutCheck]:
    """Predicted vs actual final loss for every run with role 'holdout'."""
    checks = []
    for run in holdout_runs(results):
        p = predict(fit, run.params, run.tokens)
        checks.append(
            HoldoutCheck(
                run.name, run.params, run.tokens, run.flops, run.loss, p.loss, p.interval, (p.loss - run.loss) / run.loss
            )
        )
    return checks


# --------------------------------------------------------------------------- compute-optimal frontier
def fit_flops_per_token(runs: Sequence[RunResult]) -> PowerLaw:
    """FLOPs per training token as a power law of N, fitted on the runs' exact compute (C/D vs N)."""
    if len({r.params for r in runs}) < 2:
        raise ScalingFitError("need runs of at least two sizes to relate FLOPs per token to N")
    return fit_power_law([r.params for r in runs], [r.flops / r.tokens for r in runs])


@dataclass(frozen=True)
class FrontierPoint:
    compute: float
    params: float
    tokens: float
    loss: float


def frontier(fit: ChinchillaFit, compute: Floats, flops_per_token: PowerLaw | None = None) -> list[FrontierPoint]:
    """L*(C): the law's lowest loss over N on C = f(N)·D; f defaults to 6·N (then N = fit.n_opt(C))."""
    if not (fit.alpha > 0 and fit.beta > 0):
        raise ScalingFitError(
            f"the fitted law has α={fit.alpha:.3g}, β={fit.beta:.3g}: without two positive "
            "exponents loss does not fall with both N and D and there is no compute-optimal frontier"
        )
    f = flops_per_token or PowerLaw(6.0, 1.0)
    points = []
    for c in compute:
        c = float(c)

        def loss_at(log_n: float) -> float:
            n = math.exp(log_n)
            return float(fit.predict(n, c / f(n)))

        # The loss along an iso-compute curve is convex in log N for α, β > 0: a bracket search is exact.
        guess = math.log(float(fit.n_opt(c)))  # exact when f(N) = 6·N; a starting bracket otherwise
        res = minimize_scalar(loss_at, bracket=(guess - 1.0, guess + 1.0), tol=1e-10)
        n = math.exp(float(res.x))
        points.append(FrontierPoint(c, n, c / f(n), float(res.fun)))
    return points


__all__ = [
    "FitConfig",
    "ScalingFitError",
    "ChinchillaFit",
    "ChinchillaBootstrap",
    "Interval",
    "Prediction",
    "HoldoutCheck",
    "FrontierPoint",
    "PARAMETERS",
    "chinchilla_grid",
    "fit_chinchilla",
    "fit_runs",
    "bootstrap_chinchilla",
    "bootstrap_runs",
    "predict",
    "evaluate_holdout",
    "fit_flops_per_token",
    "frontier",
    "theta_of",
]
