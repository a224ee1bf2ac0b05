"""The per-bucket loss warning: silent on noise and on a rise of every bucket's baseline-less
start, fires once per episode when one bucket's loss stays high, and resumes exactly."""

from __future__ import annotations

import random

from tokenmill.train.bucket_alert import BucketLossAlert


def _clean(step: int, rng: random.Random) -> dict[str, float]:
    level = 4.0 - step / 200  # training: every loss falls
    out = {"code": level * rng.uniform(0.9, 1.1), "web": level * 1.2 * rng.uniform(0.85, 1.15)}
    if rng.random() < 0.4:  # a small bucket: absent from most batches, one noisy row when present
        out["reference"] = level * rng.uniform(0.7, 1.3)
    return out


def test_silent_on_a_clean_noisy_run():
    rng, alert = random.Random(0), BucketLossAlert()
    assert [w for s in range(1, 2001) for w in alert.update(s, _clean(s, rng))] == []


def test_one_poisoned_bucket_is_named_once_with_the_others_unmoved():
    rng, alert = random.Random(1), BucketLossAlert(ratio=1.5, patience=3)
    warnings = []
    for s in range(1, 301):
        losses = _clean(s, rng)
        if 100 <= s <= 140 and "reference" in losses:
            losses["reference"] = 8.3  # random token ids: ln(4096)
        warnings += alert.update(s, losses)
    (w,) = warnings
    assert w["bucket"] == "reference" and w["steps"] == 3 and 100 < w["step"] <= 140 and w["ratio"] > 1.5
    assert set(w["other_buckets"]) == {"code", "web"} and all(0.7 < r < 1.3 for r in w["other_buckets"].values())


def test_the_episode_closes_when_the_bucket_is_back_and_state_survives_a_checkpoint():
    alert = BucketLossAlert(ratio=1.5, patience=2, min_history=3)
    for s in range(1, 6):
        assert alert.update(s, {"a": 2.0}) == []
    assert [w["step"] for s in (6, 7, 8) for w in alert.update(s, {"a": 5.0})] == [7]
    assert alert.history["a"] == [2.0] * 5  # the alarming values never joined the baseline
    alert.update(9, {"a": 2.0})  # back: the episode closes
    again = BucketLossAlert(ratio=1.5, patience=2, min_history=3)
    again.load_state_dict(alert.state_dict())
    for s in (10, 11):
        assert again.update(s, {"a": 5.0}) == alert.update(s, {"a": 5.0})
    assert [w["step"] for w in alert.update(12, {"a": 5.0})] == []  # still the open episode of step 11
    alert.reset()
    assert alert.update(13, {"a": 50.0}) == []  # no baseline after a phase change
