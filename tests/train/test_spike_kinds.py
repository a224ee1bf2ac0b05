"""Spike kinds (one-off, periodic, increasing) on constructed histories, severity against the
guard's thresholds, and on a real run: the state before a severe spike is kept and `replay`
starts from it."""

from __future__ import annotations

import math

import pytest

from tokenmill.train.config import GuardConfig
from tokenmill.train.spike_kinds import (INCREASING, ONE_OFF, PERIODIC, SpikeHistory, documents, is_severe,
                                         magnitude)


def _docs(*ids: int) -> list[str]:
    return [f"d{i}" for i in ids]


def test_magnitude_and_documents():
    assert magnitude({"loss": 3.0, "loss_median": 2.0, "grad_norm": 8.0, "grad_norm_median": 1.0}) == 8.0
    assert magnitude({"loss": math.nan, "grad_norm": 1.0}) == math.inf
    assert magnitude({"loss": 3.0, "grad_norm": 1.0, "loss_median": None, "grad_norm_median": None}) == 1.0
    assert documents([{"doc_id": "a"}, {"doc_id": "b"}, {"doc_id": "a"}, {"doc_id": None}]) == ["a", "b"]


def test_severity_is_measured_against_each_threshold():
    cfg = GuardConfig()  # spike_factor 5, loss_spike_factor 1.5, severe_factor 2: grad >= 10×, loss >= 2×
    base = {"loss": 3.0, "loss_median": 2.0, "grad_norm_median": 1.0}
    assert not is_severe({**base, "grad_norm": 9.9}, cfg) and is_severe({**base, "grad_norm": 10.0}, cfg)
    assert is_severe({**base, "loss": 4.0, "grad_norm": 1.0}, cfg)
    assert is_severe({"loss": math.inf, "grad_norm": 1.0}, cfg)


def test_a_lone_spike_is_one_off_and_its_episode_keeps_that_kind():
    h = SpikeHistory()
    assert h.classify(100, 6.0, _docs(1, 2), episode_start=100) == {"spike_kind": ONE_OFF}
    for step in range(101, 120):  # the guard's open spike: twenty skipped steps are one episode
        assert h.classify(step, 6.0 + step, _docs(step), episode_start=100) == {"spike_kind": ONE_OFF,
                                                                                 "episode_start": 100}
    assert len(h.spikes) == 1 and h.spikes[0]["size"] == 6.0 + 119


def test_the_same_documents_spiking_again_is_periodic():
    h = SpikeHistory()
    h.classify(100, 6.0, _docs(*range(8)))
    again = h.classify(900, 6.0, _docs(5, 6, 7, 50, 51, 52, 53, 54))  # 3 of 8 shared >= 25%
    assert again == {"spike_kind": PERIODIC, "same_documents_as_step": 100, "shared_documents": 3}
    assert h.classify(1500, 6.0, _docs(7, 60, 61, 62, 63, 64, 65, 66))["spike_kind"] == ONE_OFF  # 1 of 8 shared


def test_a_fixed_step_period_is_periodic_and_growing_spikes_are_increasing():
    h = SpikeHistory()
    for step in (100, 400, 700):
        kind = h.classify(step, 6.0, _docs(step))
    assert kind == {"spike_kind": PERIODIC, "period_steps": 300}
    g = SpikeHistory(window=1000)
    kinds = [g.classify(step, size, _docs(step))["spike_kind"] for step, size in ((100, 6.0), (350, 8.0), (520, 12.0))]
    assert kinds == [ONE_OFF, ONE_OFF, INCREASING]
    assert g.classify(2000, 20.0, _docs(2000))["spike_kind"] == ONE_OFF  # the earlier ones are out of the window


def test_history_is_bounded_and_survives_a_checkpoint():
    h = SpikeHistory(keep=4)
    for step in range(10, 100, 7):
        h.classify(step, 6.0, _docs(step))
    assert len(h.spikes) == 4
    again = SpikeHistory(keep=4)
    again.load_state_dict(h.state_dict())
    assert again.classify(500, 6.0, _docs(500)) == h.classify(500, 6.0, _docs(500))


def test_the_state_before_a_severe_spike_is_kept_and_replay_starts_from_it(tiny_run):
    from tokenmill.train.checkpoint import list_checkpoints, verify_checkpoint
    from tokenmill.train.replay import replay_loss
    from tokenmill.train.trainer import run_train

    from tests.train.dist_helpers import events, reconfigure

    run = reconfigure(tiny_run, faults={"corrupt_steps": [20]}, guard={"severe_factor": 1.0})
    run_train(run, progress=False)
    (spike,) = [e for e in events(run, "spike") if e["step"] == 20]
    assert spike["spike_kind"] == ONE_OFF and spike["state_kept"].endswith("spikes/step_19")
    assert verify_checkpoint(run.path / "checkpoints" / "spikes" / "step_19")["step"] == 19
    assert 19 not in [s for s, _ in list_checkpoints(run.path / "checkpoints")]  # not a resume/rollback target
    replayed = replay_loss(run, 20)
    assert replayed["from_checkpoint"].endswith("spikes/step_19") and replayed["rolled_forward_steps"] == 0
    assert replayed["matches_log"]  # the corrupted batch's loss, bit for bit
