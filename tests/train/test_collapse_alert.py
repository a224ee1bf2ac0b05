"""The embedding-collapse alert: one warning per crossing of sv1/sv2 >= threshold, re-armed below it."""

from __future__ import annotations

import json

import torch

from tokenmill.train.collapse_alert import CollapseAlert
from tokenmill.train.metrics import embedding_spectrum


def spectrum(ratio: float) -> dict[str, float]:
    return {"sv1": ratio * 2.0, "sv2": 2.0, "sv_ratio": ratio}


def test_warns_once_per_episode():
    alert = CollapseAlert(10.0)
    ratios = [3, 9.9, 10, 12, 30, 11, 9, 8, 15, 15, float("inf")]
    fired = [(s, e) for s, r in enumerate(ratios) if (e := alert.check(s, spectrum(r))) is not None]
    assert [s for s, _ in fired] == [2, 8]
    assert fired[0][1] == {"step": 2, "sv_ratio": 10.0, "threshold": 10.0, "sv1": 20.0, "sv2": 2.0}
    assert alert.check(99, spectrum(float("nan"))) is None


def test_a_collapsed_embedding_matrix_is_caught_and_a_healthy_one_is_not():
    g = torch.Generator().manual_seed(0)
    healthy = torch.randn(512, 64, generator=g)
    direction = torch.randn(64, generator=g)
    collapsed = 0.05 * healthy + torch.randn(512, 1, generator=g) * direction  # rows along one direction
    alert = CollapseAlert(10.0)
    assert alert.check(1, embedding_spectrum(healthy)) is None
    event = alert.check(2, embedding_spectrum(collapsed))
    assert event is not None and event["sv_ratio"] >= 10.0
    s = torch.linalg.svdvals(collapsed.double())  # an independent float64 SVD
    assert abs(event["sv_ratio"] - float(s[0] / s[1])) <= 1e-4 * event["sv_ratio"]


def test_state_survives_a_resume():
    alert = CollapseAlert(5.0)
    alert.check(1, spectrum(6.0))
    resumed = CollapseAlert(5.0)
    resumed.load_state_dict(json.loads(json.dumps(alert.state_dict())))
    assert resumed.check(2, spectrum(7.0)) is None  # still the same episode
    fresh = CollapseAlert(5.0)
    fresh.load_state_dict(None)  # a checkpoint from before the alert existed
    assert fresh.check(2, spectrum(7.0)) is not None
