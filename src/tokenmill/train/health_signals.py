"""The trainer's early-warning signals (train.health) as one collaborator of the loop: gradient
drift per layer group, per-bucket loss alerts and embedding collapse. Each detector only reads
what the step already measured, so training is bit-identical with them on or off; their state
rides in the checkpoint (state.json "health") so a resumed run warns exactly as an unbroken one."""

from __future__ import annotations

from typing import Any

import torch

from tokenmill.train.bucket_alert import BucketLossAlert
from tokenmill.train.collapse_alert import CollapseAlert
from tokenmill.train.config import HealthConfig
from tokenmill.train.drift import GradDrift
from tokenmill.train.metrics import embedding_spectrum

Signal = tuple[str, dict[str, Any]]  # (event kind, its fields)


class HealthSignals:
    def __init__(self, cfg: HealthConfig, warmup_steps: int):
        self.drift = GradDrift(cfg.drift_window, cfg.drift_ratio, start_after=warmup_steps)
        self.collapse = CollapseAlert(cfg.collapse_ratio)
        self.bucket_alert = BucketLossAlert(cfg.bucket_alert_ratio, cfg.bucket_alert_patience, cfg.bucket_alert_window)

    def reset(self) -> None:
        """A new curriculum phase: new data, new levels (the collapse ratio is data-independent)."""
        self.drift.reset()
        self.bucket_alert.reset()

    def after_step(self, step: int, extras: dict[str, Any], applied: bool) -> list[Signal]:
        """Drift (on the norms of an applied step only) and bucket-loss warnings of a step."""
        out: list[Signal] = [
            ("grad_drift", info) for info in self.drift.update(step, extras.get("grad_norms") if applied else None)
        ]
        out += [("bucket_loss_warning", info) for info in self.bucket_alert.update(step, extras.get("bucket_loss") or {})]
        return out

    def spectrum(self, step: int, embed_weight: torch.Tensor) -> list[Signal]:
        """The embedding's spectrum and, when its top singular values drift apart, a collapse alert."""
        spectrum = embedding_spectrum(embed_weight)
        out: list[Signal] = [("embedding_spectrum", {"step": step, **spectrum})]
        if (alert := self.collapse.check(step, spectrum)) is not None:
            out.append(("embedding_collapse", alert))
        return out

    def replay_spectrum(self, step: int, embed_weight: torch.Tensor) -> None:
        """On resume at a spectrum step: its check ran after its checkpoint, so run it again, silently."""
        self.collapse.check(step, embedding_spectrum(embed_weight))

    def state_dict(self) -> dict[str, Any]:
        return {
            "grad_drift": self.drift.state_dict(),
            "embedding_collapse": self.collapse.state_dict(),
            "bucket_loss": self.bucket_alert.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.drift.load_state_dict(state.get("grad_drift"))
        self.collapse.load_state_dict(state.get("embedding_collapse"))
        self.bucket_alert.load_state_dict(state.get("bucket_loss"))
