"""The stability guard: what to do with an optimizer step before it is applied.

PaLM (Chowdhery et al. 2022: skip batches, restart before a spike) and OPT's logbook (Zhang et al.
2022: roll back, lower the LR) describe the field's practice, which the guard turns into rules over the global loss and gradient norm of each step:

    non-finite loss or gradient norm        skip the step                   `skip` event
    grad norm > spike_factor × median       skip the batch                  `spike` event (+ lineage)
    loss > loss_spike_factor × median       skip the batch                  `spike` event (+ lineage)
    spike open, loss back within            close it                        `recovered` event
      (1 + recover_tolerance) × pre-spike median
    spike open recover_steps without        roll back to the last good      `rollback` event
      recovering, or max_consecutive_skips  checkpoint, LR × lr_backoff,
      skipped steps in a row                skip the data window since it,
                                              rewind the step counter to it
    more than max_rollbacks rollbacks       stop: TrainingDiverged
    fp16: finite loss, non-finite gradient  skip, scale backs off           `overflow` event
      (the loss scale overflowed)             (train/loss_scale.py; no spike, never a rollback)
    rebaseline_after grad spikes in a row   accept: the norm's new level    `rebaseline` event
      with the loss at its usual level        becomes the median's baseline

Spikes are judged only after the LR warmup (`judge_after`): gradient norms move by design while
the LR ramps up, and a median taken at a small LR would flag every step at the peak LR.

Every skipped step opens a spike (the loss is known before the update, so an anomalous batch is
never applied, even when clipping would hide its gradient norm). A batch that was merely bad
closes the spike at the next normal loss; a model that was damaged (every later step is anomalous,
or the applied steps stay above the pre-spike level) is rolled back instead of skipping forever. The medians are over the last `window` applied steps that
were not inside a spike, so a spike cannot raise its own baseline.

A rollback either rewinds (`rollback_rewind`, the default) or jumps. Rewinding sets the step
counter back to the checkpoint's step, so the run still takes its max_steps updates on the LR
schedule of a clean run; the steps it takes again are trained on fresh batches (`draw` > 0: the
loader under another seed), never on the discarded ones, and the run keeps an `attempt` counter
that never goes back (step + the steps rewound so far: where wall-clock faults are placed). A
jump (the old behaviour) goes on at the step after the rollback with the checkpoint's weights, so
the window's updates are lost and the schedule runs ahead of the weights. Measured on the demo
(benchmarks/bench_fault_recovery.py, 300 steps, a NaN, 3 corrupted batches, LR x 100 over 6
steps; held-out bpb against the clean run of the same seed): the jump after 20 skips with LR x 0.7
ended +7.2 %; without the backoff +5.2 %; rolling back after 5 skips (45 updates lost, not 60)
+3.8 %; rewinding +0.2 % (-0.0 % over two seeds). So the lost updates and the schedule jump were
~5 points of the gap and the backoff ~2; the rewind leaves noise, for the compute of the rewound
steps (45 of 345 step attempts).

The guard is pure bookkeeping: it holds JSON-serialisable state only (saved in each checkpoint's
state.json, so a resumed run makes the same decisions) and never touches the model; the trainer
carries out its verdicts.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from tokenmill.train.config import GuardConfig

Action = Literal["apply", "skip", "rollback"]


@dataclass
class Verdict:
    """What the trainer does with this step, and the events that explain why."""

    action: Action
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class SkipLimits:
    """`check`'s skip rule for one step as thresholds: skip when the loss or norm is non-finite, or
    grad_norm > grad (a gradient spike, unless this one rebaselines: `rebaseline` and loss <= calm),
    or, when not a gradient spike, loss > loss. inf / -inf where the guard cannot judge yet."""

    grad: float
    loss: float
    calm: float
    rebaseline: bool

    def skips(self, loss: float, grad_norm: float) -> bool:
        """The rule on host floats (what the device computes, train/host_reads.py `device_skip`)."""
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            return True
        if grad_norm > self.grad:
            return not (self.rebaseline and loss <= self.calm)
        return loss > self.loss


class StabilityGuard:
    def __init__(self, cfg: GuardConfig, judge_after: int = 0):
        self.cfg = cfg
        self.judge_after = judge_after  # no spike judgement during LR warmup: the norms move by design
        self.calm_spikes = 0  # gradient spikes in a row whose loss was at its usual level
        self.grad_hist: list[float] = []
        self.loss_hist: list[float] = []
        self.spike: dict[str, Any] | None = None  # {"start", "pre_level", "reason"}
        self.consecutive_skips = 0
        self.lr_scale = 1.0
        self.skipped: list[dict[str, Any]] = []
        self.rollbacks: list[dict[str, Any]] = []
        self.offset = 0  # steps rewound so far: attempt = step + offset
        self.rewinds: list[list[int]] = []  # [to_step + 1, step] of each rewound window, in order
        self.overflows = 0  # fp16 steps skipped because the loss scale overflowed (not spikes)

    # ------------------------------------------------------------------ rewinds
    def attempt(self, step: int) -> int:
        """The run's attempt number of step `step`: the steps taken so far including the rewound ones
        (= step when nothing was rewound). It never goes back, so it places wall-clock faults."""
        return step + self.offset

    def draw(self, step: int) -> int:
        """Which draw of the data step `step` trains on: 0 the loader's batch, k > 0 the k-th fresh
        batch of that step (a step inside k rewound windows has been trained k times already and
        those batches were discarded)."""
        return sum(1 for lo, hi in self.rewinds if lo <= step <= hi)

    # ------------------------------------------------------------------ decisions
    def _median(self, hist: list[float]) -> float | None:
        return statistics.median(hist) if len(hist) >= self.cfg.min_history else None

    def _open_spike(self, step: int, reason: str) -> None:
        if self.spike is None:
            # No history yet (a fault in the first steps): any finite loss counts as back.
            level = statistics.median(self.loss_hist) if self.loss_hist else None
            self.spike = {"start": step, "pre_level": level, "reason": reason}

    def check(self, step: int, loss: float, grad_norm: float, overflow: bool = False) -> Verdict:
        """The verdict on step `step`, whose global batch had this loss and pre-clip gradient norm.
        `overflow` (fp16): the norm is non-finite because the loss scale was too large, which says
        nothing about the batch or the model: skipped (even with the guard off) but no spike opens,
        no skip counts towards a rollback and no median moves."""
        if overflow:
            self.overflows += 1
            return Verdict(
                "skip", [("overflow", {"step": step, "loss": loss, "grad_norm": grad_norm, "overflows": self.overflows})]
            )
        if not self.cfg.enabled:
            return Verdict("apply")
        finite = math.isfinite(loss) and math.isfinite(grad_norm)
        grad_med = self._median(self.grad_hist)
        loss_med = self._median(self.loss_hist)
        if self.spike is not None and finite and self._back(loss):
            events = [
                (
                    "recovered",
                    {
                        "step": step,
                        "loss": loss,
                        "spike_start": self.spike["start"],
                        "pre_level": self.spike["pre_level"],
                        "steps": step - self.spike["start"],
                    },
                )
            ]
            self.spike = None
            verdict = self.check(step, loss, grad_norm)  # judge the step itself with the spike closed
            verdict.events[:0] = events
            return verdict

        judging = step > self.judge_after
        reason = None
        rebaseline: list[tuple[str, dict[str, Any]]] = []
        if not finite:
            reason = "nonfinite"
        elif judging and grad_med is not None and grad_norm > self.cfg.spike_factor * grad_med:
            reason, rebaseline = self._grad_spike(step, loss, grad_norm, grad_med, loss_med)
        elif judging and loss_med is not None and loss > self.cfg.loss_spike_factor * loss_med:
            reason = "loss_spike"
        if reason != "grad_spike":
            self.calm_spikes = 0
        if reason is not None:
            self._open_spike(step, reason)
            self.consecutive_skips += 1
            self.skipped.append({"step": step, "reason": reason})
            info = {
                "step": step,
                "reason": reason,
                "loss": loss,
                "grad_norm": grad_norm,
                "grad_norm_median": grad_med,
                "loss_median": loss_med,
                "consecutive": self.consecutive_skips,
            }
            events = [("skip" if reason == "nonfinite" else "spike", info)]
            return Verdict("rollback" if self._rollback_due(step) else "skip", events)

        self.consecutive_skips = 0
        if self.spike is not None:  # applied, but not back to the pre-spike level yet
            return Verdict("rollback" if self._rollback_due(step) else "apply", rebaseline)
        self._push(self.grad_hist, grad_norm)
        self._push(self.loss_hist, loss)
        return Verdict("apply", rebaseline)

    def _grad_spike(
        self, step: int, loss: float, grad_norm: float, grad_med: float, loss_med: float | None
    ) -> tuple[str | None, list[tuple[str, dict[str, Any]]]]:
        """A gradient-norm spike: ("grad_spike", []) — unless it is the `rebaseline_after`-th in a row
        with a calm loss, when the norm's median restarts: (None, [the rebaseline event])."""
        calm = loss_med is not None and loss <= loss_med * (1 + self.cfg.recover_tolerance)
        self.calm_spikes = self.calm_spikes + 1 if calm else 0
        if self.calm_spikes < self.cfg.rebaseline_after:
            return "grad_spike", []
        # The norm stays high while the loss is fine: a new regime (e.g. the LR just reached its
        # peak), not a bad batch. Skipping on would freeze the model; restart the median.
        info: dict[str, Any] = {"step": step, "grad_norm": grad_norm, "grad_norm_median": grad_med, "loss": loss}
        info |= {"loss_median": loss_med, "spikes": self.calm_spikes}
        self.grad_hist.clear()
        self.calm_spikes = 0
        self.spike = None
        return None, [("rebaseline", info)]

    def skip_limits(self, step: int) -> SkipLimits:
        """What `check(step, ...)` would compare the step's loss and norm with, from the state as it
        is now: the skip decision as numbers, so the device can take it without a host read
        (train/host_reads.py). Closing a spike does not change them (the medians are the same)."""
        inf = math.inf
        if not self.cfg.enabled:
            return SkipLimits(inf, inf, -inf, False)
        judging = step > self.judge_after
        grad_med, loss_med = self._median(self.grad_hist), self._median(self.loss_hist)
        grad = self.cfg.spike_factor * grad_med if judging and grad_med is not None else inf
        loss = self.cfg.loss_spike_factor * loss_med if judging and loss_med is not None else inf
        calm = loss_med * (1 + self.cfg.recover_tolerance) if loss_med is not None else -inf
        return SkipLimits(grad, loss, calm, self.calm_spikes + 1 >= self.cfg.rebaseline_after)

    def _back(self, loss: float) -> bool:
        level = self.spike["pre_level"] if self.spike is not None else None
        return level is None or loss <= level * (1 + self.cfg.recover_tolerance)

    def _rollback_due(self, step: int) -> bool:
        if self.spike is None:
            return False
        return step - self.spike["start"] >= self.cfg.recover_steps or self.consecutive_skips >= self.cfg.max_consecutive_skips

    def _push(self, hist: list[float], value: float) -> None:
        hist.append(float(value))
        del hist[: -self.cfg.window]

    # ------------------------------------------------------------------ rollback
    @property
    def rollbacks_left(self) -> int:
        return self.cfg.max_rollbacks - len(self.rollbacks)

    def good_checkpoint_bound(self) -> int:
        """A rollback target must be a checkpoint of a step below this: the update of the step
        before the spike opened may be the one that did the damage."""
        assert self.spike is not None
        return int(self.spike["start"]) - 1

    def rolled_back(self, step: int, to_step: int) -> dict[str, Any]:
        """Record a rollback carried out at `step` to the checkpoint of `to_step`: the LR is backed
        off, the spike closed, and the batches of steps to_step+1..step are never trained on again.
        Rewinding, the run goes on at to_step+1 with fresh draws of those steps' batches; jumping,
        at step+1 (the window's updates are lost). Returns the `rollback` event's fields."""
        assert self.spike is not None
        self.lr_scale *= self.cfg.lr_backoff
        info = {
            "step": step,
            "to_step": to_step,
            "skipped_window": [to_step + 1, step],
            "spike_start": self.spike["start"],
            "reason": self.spike["reason"],
            "pre_level": self.spike["pre_level"],
            "lr_scale": self.lr_scale,
            "rollbacks": len(self.rollbacks) + 1,
            "rewind": self.cfg.rollback_rewind,
            "attempt": self.attempt(step),
        }
        if self.cfg.rollback_rewind:
            # the run goes on at to_step + 1 again, on fresh batches for to_step+1..step
            self.rewinds.append([to_step + 1, step])
            self.offset += step - to_step
            info["next_step"] = to_step + 1
        else:
            info["next_step"] = step + 1
        self.rollbacks.append(info)
        self.spike = None
        self.consecutive_skips = 0
        return info

    def reset_baseline(self) -> None:
        """Forget the loss history (a curriculum phase changes the data, so its loss level)."""
        self.loss_hist.clear()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "grad_hist": list(self.grad_hist),
            "loss_hist": list(self.loss_hist),
            "spike": self.spike,
            "consecutive_skips": self.consecutive_skips,
            "calm_spikes": self.calm_spikes,
            "lr_scale": self.lr_scale,
            "skipped": list(self.skipped),
            "rollbacks": list(self.rollbacks),
            "offset": self.offset,
            "rewinds": [list(w) for w in self.rewinds],
            **({"overflows": self.overflows} if self.overflows else {}),  # fp16 only: other runs' state as before
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:  # a checkpoint from before the guard existed
            return
        self.grad_hist = [float(v) for v in state.get("grad_hist", [])]
        self.loss_hist = [float(v) for v in state.get("loss_hist", [])]
        self.spike = state.get("spike")
        self.consecutive_skips = int(state.get("consecutive_skips", 0))
        self.calm_spikes = int(state.get("calm_spikes", 0))
        self.lr_scale = float(state.get("lr_scale", 1.0))
        self.skipped = list(state.get("skipped", []))
        self.rollbacks = list(state.get("rollbacks", []))
        self.offset = int(state.get("offset", 0))
        self.rewinds = [[int(a), int(b)] for a, b in state.get("rewinds", [])]
        self.overflows = int(state.get("overflows", 0))
