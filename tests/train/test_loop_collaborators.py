"""The training loop's collaborators alone (issue 42): the evaluation and checkpoint schedules,
the preemption-grace warning, the stop decision, the verdict reporter, the rollback's choice of a
good checkpoint, the data draws and the loop state. Real objects, no model run except where a
real checkpoint is the point."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tokenmill.config import GuardConfig
from tokenmill.runs import EventLog
from tokenmill.train.checkpoint_policy import CheckpointPolicy, GraceWarning
from tokenmill.train.eval_schedule import EvalSchedule
from tokenmill.train.guard import StabilityGuard
from tokenmill.train.loop_state import LoopState
from tokenmill.train.rollback import DataDraws, draw_seed
from tokenmill.train.spike_kinds import ONE_OFF, SpikeHistory
from tokenmill.train.stop_signals import INTERRUPT, NONE, PREEMPT, StopRequests, TrainingInterrupted, TrainingPreempted, stop_now
from tokenmill.train.verdicts import VerdictReporter, stop_if_unguarded_divergence
from tokenmill.train.errors import TrainingDiverged


def test_evaluations_fall_every_eval_every_steps_and_at_the_end():
    s = EvalSchedule(eval_every=8, max_steps=30)
    assert [t for t in range(1, 31) if s.due(t)] == [8, 16, 24, 30]
    assert s.due(13, last=True)  # a time budget's last step evaluates too
    assert [t for t in range(1, 31) if EvalSchedule(0, 30).due(t)] == [30]


def test_the_spectrum_follows_its_own_schedule_or_the_evaluations():
    own, shared = EvalSchedule(8, 30, spectrum_every=5), EvalSchedule(8, 30)
    assert [t for t in range(1, 31) if own.spectrum_due(t)] == [5, 10, 15, 20, 25, 30]
    assert [t for t in range(1, 31) if shared.spectrum_due(t)] == [8, 16, 24, 30]
    # a resume replays the collapse check of its own step only where the periodic rule put one
    assert own.spectrum_checked_at(10) and not own.spectrum_checked_at(8)
    assert shared.spectrum_checked_at(16) and not shared.spectrum_checked_at(30)
    assert not EvalSchedule(0, 30).spectrum_checked_at(30)


def test_checkpoints_are_periodic_final_never_in_a_spike_never_twice():
    p = CheckpointPolicy(ckpt_every=4)
    assert [s for s in range(1, 11) if p.due(s, last=s == 10, spike_open=False, saved_step=-1)] == [4, 8, 10]
    assert not p.due(8, last=False, spike_open=True, saved_step=-1)  # the newest stays the rollback target
    assert p.due(10, last=True, spike_open=True, saved_step=-1)  # the end is saved even in a spike
    assert not p.due(8, last=False, spike_open=False, saved_step=8)  # a rollback already saved this step
    assert [s for s in range(1, 11) if CheckpointPolicy(0).due(s, s == 10, False, -1)] == [10]


def test_the_grace_warning_fires_once_when_step_plus_save_exceed_the_grace():
    g = GraceWarning(grace_s=1.0)
    assert g.check(3, step_s=0.9, checkpoint_s=None) is None  # no save measured yet
    assert g.check(4, step_s=0.4, checkpoint_s=0.5) is None
    assert g.check(5, step_s=0.6, checkpoint_s=0.5) == {"step": 5, "step_s": 0.6, "checkpoint_s": 0.5, "grace_s": 1.0}
    assert g.check(6, step_s=5.0, checkpoint_s=5.0) is None  # once per run


def test_stop_now_raises_what_the_ranks_agreed_and_logs_it(tmp_path: Path):
    events, ckpt = EventLog(tmp_path / "events.jsonl"), tmp_path / "step_7"
    stops = StopRequests()
    stop_now(NONE, 7, ckpt, stops, 30.0, events)  # nothing asked: nothing happens
    with pytest.raises(TrainingInterrupted) as exc:
        stop_now(INTERRUPT, 7, ckpt, stops, 30.0, events)
    assert type(exc.value) is TrainingInterrupted and exc.value.exit_code == 130 and exc.value.checkpoint == ckpt
    stops.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
    finally:
        stops.uninstall()
    with pytest.raises(TrainingPreempted) as pre:
        stop_now(stops.code, 8, ckpt, stops, 30.0, events)
    assert stops.code == PREEMPT and pre.value.exit_code == 75
    logged = [(e["kind"], e["step"]) for e in events.read()]
    assert logged == [("interrupted", 7), ("preempted", 8)]
    assert events.read()[1]["within_grace"] is True


def test_a_nonfinite_step_stops_only_when_the_guard_is_off(tmp_path: Path):
    events = EventLog(tmp_path / "events.jsonl")
    stop_if_unguarded_divergence(GuardConfig(), 3, float("nan"), 1.0, events)  # the guard skips it instead
    stop_if_unguarded_divergence(GuardConfig(enabled=False), 3, 2.0, 1.0, events)  # finite: go on
    with pytest.raises(TrainingDiverged, match="step 3"):
        stop_if_unguarded_divergence(GuardConfig(enabled=False), 3, 2.0, float("inf"), events)
    assert [e["kind"] for e in events.read()] == ["diverged"]


class _NoData:
    """Where the step's loader goes: only spikes read its batch (lineage), these steps only skip."""


def test_the_reporter_keeps_one_state_per_severe_episode(tmp_path: Path):
    cfg = GuardConfig(min_history=3, window=10, max_consecutive_skips=50, keep_spike_states=2)
    guard, kept, events = StabilityGuard(cfg), [], EventLog(tmp_path / "events.jsonl")

    def keep(step: int) -> Path:
        kept.append(step)
        return tmp_path / f"spikes/step_{step - 1}"

    reporter = VerdictReporter(cfg, SpikeHistory(), keep)
    for s in range(1, 6):
        reporter.report(s, guard.check(s, 2.0, 1.0), guard, _NoData(), events)  # type: ignore[arg-type]
    for s in (6, 7):  # two non-finite steps: severe skips of one episode
        reporter.report(s, guard.check(s, float("nan"), float("nan")), guard, _NoData(), events)  # type: ignore[arg-type]
    skips = [e for e in events.read() if e["kind"] == "skip"]
    assert [e["step"] for e in skips] == [6, 7] and kept == [6]
    assert skips[0]["state_kept"].endswith("step_5") and "state_kept" not in skips[1]
    assert skips[0]["spike_kind"] == ONE_OFF and skips[1]["episode_start"] == 6  # one episode, one kind


def test_draws_build_a_fresh_loader_only_for_a_rewound_step():
    guard = StabilityGuard(GuardConfig(min_history=3, window=10, recover_steps=2))
    made: list[int] = []
    first: Any = object()

    def make(k: int) -> Any:
        made.append(k)
        return ("draw", k)

    draws = DataDraws(first, guard, make)
    assert draws.of(5) is first and made == []
    for s in range(1, 6):
        guard.check(s, 2.0, 1.0)
    assert guard.check(6, 50.0, 50.0).action == "skip"  # opens the spike a rollback closes
    guard.rolled_back(9, to_step=4)  # rewinding (the default): steps 5..9 are taken again on draw 1
    assert draws.of(5) == ("draw", 1) and draws.of(6) == ("draw", 1) and made == [1]
    assert draw_seed(11, 0) == 11 and draw_seed(11, 1) != draw_seed(11, 2)


def test_loop_state_remembers_where_the_schedule_was_read():
    st = LoopState(step=0, last_loss=None)
    assert st.schedule_step(5) == 5  # no time budget: the step itself
    st.read_schedule_at(6, 5.5)
    assert st.schedule_step(6) == 5.5 and st.schedule_step(5) == 5  # one entry, the step being taken
