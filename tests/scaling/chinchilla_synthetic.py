"""Synthetic sweeps drawn from Chinchilla's published law (Hoffmann et al. 2022, eq. 10):
L(N, D) = 1.69 + 406.4/N^0.34 + 410.7/D^0.28, on an IsoFLOP grid with C = 6·N·D exactly."""

from __future__ import annotations

import numpy as np

from tokenmill.scaling.results import RunResult

E, A, B, ALPHA, BETA = 1.69, 406.4, 410.7, 0.34, 0.28
BUDGETS = (1e18, 3e18, 1e19, 3e19, 1e20)
G = (ALPHA * A / (BETA * B)) ** (1 / (ALPHA + BETA))


def true_loss(n, d):
    return E + A / np.asarray(n, dtype=float) ** ALPHA + B / np.asarray(d, dtype=float) ** BETA


def true_n_opt(c):
    return G * (np.asarray(c, dtype=float) / 6) ** (BETA / (ALPHA + BETA))


def run(name: str, n: float, c: float, budget: float | None, loss: float, role: str = "sweep") -> RunResult:
    d = c / (6 * n)
    return RunResult(name=name, params=int(round(n)), params_total=int(round(n * 1.1)), tokens=int(round(d)),
                     flops=6.0 * int(round(n)) * int(round(d)), budget=budget, loss=float(loss), role=role)


def sweep(noise: float = 0.0, seed: int = 0, budgets=BUDGETS, sizes: int = 9, span: float = 0.6) -> list[RunResult]:
    """`sizes` models per budget, log-spaced over ±`span` decades around the true N*(C); loss × exp(noise·ε)."""
    rng = np.random.default_rng(seed)
    runs = []
    for c in budgets:
        for k, offset in enumerate(np.linspace(-span, span, sizes)):
            n = float(true_n_opt(c)) * 10 ** offset
            d = c / (6 * n)
            loss = true_loss(n, d) * np.exp(noise * rng.standard_normal())
            runs.append(run(f"c{c:.0e}-n{k}", n, c, c, loss))
    return runs


def holdout(factor: float = 4.0, budgets=BUDGETS) -> RunResult:
    """A noiseless compute-optimal run at `factor` × the largest budget."""
    c = factor * max(budgets)
    n = float(true_n_opt(c))
    return run("holdout", n, c, None, float(true_loss(n, c / (6 * n))), role="holdout")
