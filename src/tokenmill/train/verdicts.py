"""What the loop does with the stability guard's verdict besides the update: the events that
explain it (a spike's lineage and kind, a severe spike's kept state) and, with the guard off, the
hard stop on a non-finite step. The guard (guard.py) decides; this module reports."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from tokenmill.mixture.loader import Loader
from tokenmill.train.config import GuardConfig
from tokenmill.train.errors import STAGE, TrainingDiverged
from tokenmill.train.guard import StabilityGuard, Verdict
from tokenmill.train.spike_kinds import SpikeHistory, documents, is_severe, magnitude


def stop_if_unguarded_divergence(
    cfg: GuardConfig, step: int, loss: float, grad_norm: float, events: Any, overflow: bool = False
) -> None:
    """With train.guard.enabled false nothing skips a NaN/Inf step: stop before it is applied
    (an fp16 overflow is skipped by the loss scaler's rule, guard or not)."""
    if cfg.enabled or overflow or (math.isfinite(loss) and math.isfinite(grad_norm)):
        return
    events.write(STAGE, "diverged", step=step, loss=loss, grad_norm=grad_norm)
    raise TrainingDiverged(
        f"training diverged at step {step}: loss={loss}, grad_norm={grad_norm}; the "
        f"optimizer step was not applied (train.guard.enabled is false, so nothing skips it). "
        f"Lower train.lr or raise train.warmup_steps, and resume from the last checkpoint"
    )


def lineage(loader: Loader, step: int, limit: int = 32) -> list[dict[str, Any]]:
    """The documents of the global batch of `step` (first `limit` spans): what a spike came from."""
    out: list[dict[str, Any]] = []
    for src in loader.global_provenance(step):
        for span in src.spans:
            out.append(
                {
                    "bucket": span.bucket,
                    "doc_id": span.doc_id,
                    "shard": span.shard,
                    "doc": span.doc,
                    "tokens": [span.start, span.end],
                    "row": src.row,
                    "micro": src.micro,
                    "rank": src.rank,
                }
            )
            if len(out) >= limit:
                return out
    return out


class VerdictReporter:
    """Writes the guard's events of a step: a spike gets its batch's lineage, spikes and skips
    their kind (one-off, periodic, increasing: spike_kinds.py), and the first severe step of an
    episode keeps its pre-spike state via `keep_state(step)` (the path goes in the event)."""

    def __init__(self, cfg: GuardConfig, history: SpikeHistory, keep_state: Callable[[int], Path]):
        self.cfg, self.history, self.keep_state = cfg, history, keep_state
        # the episode whose state was kept (one per episode; a step outside any episode (None) never keeps)
        self.kept_episode: int | None = None

    def report(self, step: int, verdict: Verdict, guard: StabilityGuard, data: Loader, events: Any) -> None:
        for kind, info in verdict.events:
            if kind == "spike":
                info["lineage"] = lineage(data, step)
            if kind in ("spike", "skip"):
                episode = (guard.spike or {}).get("start")
                info.update(self.history.classify(step, magnitude(info), documents(info.get("lineage")), episode))
                severe = self.cfg.keep_spike_states > 0 and is_severe(info, self.cfg)
                if severe and self.kept_episode != episode:
                    self.kept_episode = episode  # the first severe step of an episode
                    info["state_kept"] = str(self.keep_state(step))
            events.write(STAGE, kind, **info)
