"""What kind of spike is this: one-off, periodic or increasing (docs/training.md).

The remedy depends on the kind, so every `spike` / `skip` event says which it is:
  periodic    the batch shares documents with an earlier spike's batch (the same data comes back
              each epoch and spikes again: fix or drop those documents), or the spikes come at a
              fixed step period (a data-order or schedule artefact);
  increasing  at least `min_run` spikes within `window` steps, each larger than the one before
              (instability growing: lower the LR, add warmup or QK-norm, before it diverges);
  one-off     neither (a bad batch: skipping it was the remedy).
Magnitude is how far past its running median the step was: max(grad norm / median, loss / median),
infinite for a non-finite step.

A severe spike (magnitude at least `severe` times the guard's threshold) is the state worth
keeping for diagnosis: the trainer writes the weights as they were before the spiking step
(the step is skipped, so they are exactly θ_{N-1}) to checkpoints/spikes/step_<N-1>, which
`tokenmill replay --step N` starts from.

Memory: the last `keep` spikes, each with at most 32 document ids — bounded, whatever the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

ONE_OFF, PERIODIC, INCREASING = "one-off", "periodic", "increasing"


def magnitude(info: dict[str, Any]) -> float:
    """How far past its running median a spike/skip event's step was (inf when non-finite)."""
    loss, grad = info.get("loss"), info.get("grad_norm")
    if not (isinstance(loss, (int, float)) and isinstance(grad, (int, float))) or not (
        math.isfinite(loss) and math.isfinite(grad)
    ):
        return math.inf
    ratios = [
        v / m
        for v, m in ((grad, info.get("grad_norm_median")), (loss, info.get("loss_median")))
        if isinstance(m, (int, float)) and m > 0
    ]
    return max(ratios, default=1.0)


def is_severe(info: dict[str, Any], cfg: Any) -> bool:
    """A spike/skip event `severe_factor` times past the guard's thresholds (GuardConfig `cfg`)."""
    loss, grad = info.get("loss"), info.get("grad_norm")
    if magnitude(info) == math.inf:
        return True
    grad_med, loss_med = info.get("grad_norm_median"), info.get("loss_median")
    return bool(
        (grad_med and grad >= cfg.severe_factor * cfg.spike_factor * grad_med)
        or (loss_med and loss >= (1 + cfg.severe_factor * (cfg.loss_spike_factor - 1)) * loss_med)
    )


def _finite(size: float) -> float:
    return size if math.isfinite(size) else 1e30  # JSON-safe, larger than any finite ratio


def documents(lineage: list[dict[str, Any]] | None) -> list[str]:
    """The distinct document ids of a spike's batch lineage, in order."""
    seen: dict[str, None] = {}
    for span in lineage or []:
        if span.get("doc_id") is not None:
            seen.setdefault(str(span["doc_id"]), None)
    return list(seen)


@dataclass
class SpikeHistory:
    window: int = 1000
    min_run: int = 3
    keep: int = 64
    overlap: float = 0.25  # share of this batch's documents seen in an earlier spike's batch
    spikes: list[dict[str, Any]] = field(default_factory=list)

    def classify(self, step: int, size: float, docs: list[str], episode_start: int | None = None) -> dict[str, Any]:
        """The kind of the spike at `step` (and why); records it. Steps after the first of one
        episode (the guard's open spike that began at `episode_start`) take the episode's kind:
        twenty skipped steps after one LR blow-up are one event, not an increasing series."""
        last = self.spikes[-1] if self.spikes else None
        if episode_start is not None and episode_start < step and last is not None and last["step"] == episode_start:
            last["size"] = max(last["size"], _finite(size))
            return {"spike_kind": last["kind"], "episode_start": episode_start}
        verdict: dict[str, Any] = {"spike_kind": ONE_OFF}
        mine = set(docs[:32])
        for old in reversed(self.spikes):
            shared = mine & set(old["docs"])
            if old["step"] < step and mine and len(shared) >= max(1, math.ceil(self.overlap * len(mine))):
                verdict = {"spike_kind": PERIODIC, "same_documents_as_step": old["step"], "shared_documents": len(shared)}
                break
        steps = [s["step"] for s in self.spikes if s["step"] < step][-2:] + [step]
        if verdict["spike_kind"] == ONE_OFF and len(steps) == 3 and steps[1] - steps[0] == steps[2] - steps[1] > 1:
            verdict = {"spike_kind": PERIODIC, "period_steps": steps[2] - steps[1]}
        recent = [s for s in self.spikes if step - self.window <= s["step"] < step][-(self.min_run - 1) :]
        sizes = [s["size"] for s in recent] + [_finite(size)]
        if verdict["spike_kind"] == ONE_OFF and len(sizes) >= self.min_run and all(b > a for a, b in zip(sizes, sizes[1:])):
            verdict = {"spike_kind": INCREASING, "growing_over_steps": [s["step"] for s in recent] + [step]}
        self.spikes.append({"step": step, "size": _finite(size), "docs": sorted(mine), "kind": verdict["spike_kind"]})
        del self.spikes[: -self.keep]
        return verdict

    def state_dict(self) -> dict[str, Any]:
        return {"spikes": list(self.spikes)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        self.spikes = list((state or {}).get("spikes") or [])
