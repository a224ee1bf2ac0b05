"""Embedding collapse alert (the top singular value of the
embedding matrix dominating the next by 10x means its rows crowd into one direction).

The trainer logs the spectrum (`embedding_spectrum` events, train/metrics.py); this turns a
crossing of the threshold into one `embedding_collapse` warning per episode: the alert re-arms
once the ratio is back below the threshold. Its state (one flag) is saved in state.json.
"""

from __future__ import annotations

import math
from typing import Any


class CollapseAlert:
    """`check(step, spectrum)` -> the embedding_collapse event fields, or None."""

    def __init__(self, threshold: float = 10.0):
        self.threshold = threshold
        self.open = False  # an episode is open: warned, ratio not yet back below the threshold

    def check(self, step: int, spectrum: dict[str, float]) -> dict[str, Any] | None:
        ratio = float(spectrum["sv_ratio"])
        if math.isnan(ratio):
            return None
        if ratio < self.threshold:
            self.open = False
            return None
        if self.open:
            return None
        self.open = True
        return {
            "step": step,
            "sv_ratio": ratio,
            "threshold": self.threshold,
            "sv1": spectrum.get("sv1"),
            "sv2": spectrum.get("sv2"),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"open": self.open}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        self.open = bool((state or {}).get("open", False))
