"""The scaling law a run is held against: L(N, D) = E + A/N^α + B/D^β, from a tokenmill fit or
the published Chinchilla fit, with what it says about the slope and the compute-optimal ratio.

Sources, in order of preference:
- a fit file written by `tokenmill scaling fit` (`fit.json`: `{"chinchilla": {"fit": {...}}, "runs": [...]}`)
  or a bare `{"E", "A", "B", "alpha", "beta"}` object. Its N is the non-embedding parameter count
  (scaling/results.py), measured with this tokenizer and data: its level is comparable.
- Hoffmann et al. 2022, approach 3: E = 1.69, A = 406.4, B = 410.7, α = 0.34, β = 0.28, fitted on
  total parameters (embeddings included; Pearce & Song 2024 trace much of the Kaplan/Chinchilla
  disagreement to that choice) with another tokenizer and other data. A loss level in nats/token
  depends on the tokenizer, so only its slope is indicative, never its absolute gap.

Along D at fixed N, dL/dlog10(D) = −β·B·D^(−β)·ln 10: the loss a decade more data is worth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from tokenmill.errors import UserError
from tokenmill.scaling.fit import ChinchillaFit
from tokenmill.scaling.results import read_json_file

# Hoffmann et al. 2022: "20 tokens per parameter", from their approaches 1 and 2 (approach 3's
# constants imply a ratio that drifts with compute; the rule of thumb is what planners use).
CHINCHILLA_TOKENS_PER_PARAM = 20.0
# The published fit's runs: "from 70 million to over 16 billion parameters on 5 to 500 billion tokens".
CHINCHILLA_RANGE = ((7e7, 1.6e10), (5e9, 5e11))
# What the published fit was made from, for every place that prints a loss it predicts: a reader
# comparing it with a measured loss must know it is another tokenizer's nats on other data.
CHINCHILLA_SOURCE = (
    "Hoffmann et al. 2022 (Chinchilla, approach 3), over 400 models of 70M–16B parameters trained on "
    "5B–500B tokens of MassiveText, with their own SentencePiece tokenizer"
)
LEVELS_NOTE = (
    "a loss in nats per token depends on the tokenizer and the data: another tokenizer's level is not "
    "comparable with this run's, only how the loss changes with N and D transfers"
)


class LawFileError(UserError, ValueError):
    """A scaling-law file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class ReferenceLaw:
    """A fitted L(N, D) with where it came from and which N it expects."""

    fit: ChinchillaFit
    label: str
    published: bool  # True: another tokenizer and data, only the slope transfers
    params_kind: Literal["non_embedding", "total"]
    fitted_range: tuple[tuple[float, float], tuple[float, float]] | None  # (N min, max), (D min, max)

    def predict(self, params: float, tokens: float) -> float:
        return float(self.fit.predict(params, tokens))

    def slope_per_decade(self, tokens: float) -> float:
        """dL/dlog10(D) at D (N drops out): −β·B·D^(−β)·ln 10, nats/token per decade of tokens."""
        return -self.fit.beta * self.fit.B * tokens ** (-self.fit.beta) * math.log(10.0)

    def fitted_slope(self, params: float, tokens: Sequence[float]) -> float:
        """The least-squares slope of L(N, D_i) against log10 D_i: what the observed fit over the
        same evaluations would give if the run followed the law exactly."""
        x = np.log10(np.asarray(tokens, dtype=float))
        y = np.asarray(self.fit.predict(params, np.asarray(tokens, dtype=float)), dtype=float)
        return float(np.polyfit(x, y, 1)[0])

    def optimal_ratio(self, params: float, tokens: float) -> float:
        """Compute-optimal tokens per parameter at this run's compute C = 6·N·D: D_opt/N_opt of the
        fit, or Chinchilla's 20 for the published law."""
        if self.published:
            return CHINCHILLA_TOKENS_PER_PARAM
        compute = 6.0 * params * tokens
        return float(self.fit.d_opt(compute) / self.fit.n_opt(compute))

    def outside_range(self, params: float, tokens: float) -> str | None:
        """Why (N, D) is an extrapolation of the law, by how far, or None when it lies in its runs'
        range: "N = 4.26e+06, 16× fewer parameters than its smallest model (7e+07)"."""
        if self.fitted_range is None:
            return None
        out = []
        for name, value, (lo, hi), what, small, large in (
            ("N", params, self.fitted_range[0], "parameters", "smallest model", "largest model"),
            ("D", tokens, self.fitted_range[1], "tokens", "shortest run", "longest run"),
        ):
            if value < lo:
                out.append(f"{name} = {value:.3g}, {_factor(lo / value)}× fewer {what} than its {small} ({lo:.3g})")
            elif value > hi:
                out.append(f"{name} = {value:.3g}, {_factor(value / hi)}× more {what} than its {large} ({hi:.3g})")
        return "; ".join(out) or None

    def provenance(self) -> str:
        """What the law was fitted on, in one phrase."""
        if self.published:
            return CHINCHILLA_SOURCE
        if self.fitted_range is None:
            return f"{self.label}, with this run's tokenizer and data (the file lists no runs: its range is unknown)"
        (n0, n1), (d0, d1) = self.fitted_range
        return f"{self.label}: runs of {n0:.3g}–{n1:.3g} parameters on {d0:.3g}–{d1:.3g} tokens"

    def range_verdict(self, params: float, tokens: float) -> str:
        """Whether a loss this law predicts at (N, D) is a prediction or an extrapolation, in words."""
        outside = self.outside_range(params, tokens)
        if outside is not None:
            return f"outside the fit's range: {outside} — not a prediction for this run"
        if self.fitted_range is None:
            return "the fit's range is unknown"
        (n0, n1), (d0, d1) = self.fitted_range
        return f"within the fit's range (N {n0:.3g}–{n1:.3g}, D {d0:.3g}–{d1:.3g})"

    def to_dict(self) -> dict[str, Any]:
        f = self.fit
        return {
            "label": self.label,
            "published": self.published,
            "params_kind": self.params_kind,
            "E": f.E,
            "A": f.A,
            "B": f.B,
            "alpha": f.alpha,
            "beta": f.beta,
            "fitted_range": None if self.fitted_range is None else [list(r) for r in self.fitted_range],
        }


def _factor(x: float) -> str:
    """2.5, 16, 4,069: a ratio as a reader compares it."""
    return f"{x:.2g}" if x < 10 else f"{x:,.0f}"


def _law(E: float, A: float, B: float, alpha: float, beta: float, runs: int = 0) -> ChinchillaFit:
    return ChinchillaFit(
        E=E, A=A, B=B, alpha=alpha, beta=beta, objective=float("nan"), runs=runs, huber_delta=None, converged=True
    )


PUBLISHED_CHINCHILLA = ReferenceLaw(
    fit=_law(1.69, 406.4, 410.7, 0.34, 0.28),
    label="published Chinchilla fit (Hoffmann et al. 2022, approach 3), another tokenizer and data: "
    "its absolute gap is indicative only",
    published=True,
    params_kind="total",
    fitted_range=CHINCHILLA_RANGE,
)


def _number(d: dict, key: str, path: Path) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise LawFileError(f"{path}: '{key}' must be a finite number ≥ 0, got {v!r}")
    return float(v)


def _runs_range(runs: Any) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """(N, D) range of the fit's sweep runs, when the file lists them."""
    fitted = [
        r
        for r in runs or []
        if isinstance(r, dict)
        and r.get("role", "sweep") == "sweep"
        and isinstance(r.get("params"), (int, float))
        and isinstance(r.get("tokens"), (int, float))
    ]
    if not fitted:
        return None
    ns, ds = [float(r["params"]) for r in fitted], [float(r["tokens"]) for r in fitted]
    return (min(ns), max(ns)), (min(ds), max(ds))


def load_law(path: str | Path) -> ReferenceLaw:
    """A law from a `tokenmill scaling fit` result (fit.json) or a bare {E, A, B, alpha, beta} object."""
    path = Path(path)
    data = read_json_file(path, LawFileError, "scaling-law file (report.scaling_law)")
    if not isinstance(data, dict):
        raise LawFileError(f"{path}: expected a JSON object")
    fit = data.get("chinchilla", {}).get("fit") if isinstance(data.get("chinchilla"), dict) else data
    if not isinstance(fit, dict) or "beta" not in fit:
        raise LawFileError(
            f"{path}: no fitted law (expected `tokenmill scaling fit`'s fit.json, with "
            "chinchilla.fit, or an object with E, A, B, alpha, beta)"
        )
    values = {k: _number(fit, k, path) for k in ("E", "A", "B", "alpha", "beta")}
    if values["alpha"] <= 0 or values["beta"] <= 0:
        raise LawFileError(
            f"{path}: α = {values['alpha']:g}, β = {values['beta']:g}: a law whose loss does not "
            "fall with both N and D has no slope or compute-optimal ratio to compare with"
        )
    runs = int(fit.get("runs") or 0)
    return ReferenceLaw(
        fit=_law(**values, runs=runs),
        label=f"tokenmill fit {path}" + (f" ({runs} runs)" if runs else ""),
        published=False,
        params_kind="non_embedding",
        fitted_range=_runs_range(data.get("runs")),
    )
