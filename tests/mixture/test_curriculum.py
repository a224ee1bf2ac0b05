import pytest
from pydantic import ValidationError

from tokenmill.config import MixtureConfig
from tokenmill.mixture.curriculum import build_phases, phase_index
from tokenmill.mixture.errors import MixtureError

AVAILABLE = {"web": 1000, "code": 500, "math": 100, "empty": 0}


def mix(*phases, **kw) -> MixtureConfig:
    return MixtureConfig(phases=[dict(p) for p in phases], **kw)


def test_no_phases_is_one_main_phase_over_every_step():
    (p,), (il,) = build_phases(MixtureConfig(), AVAILABLE, 256, 16, 2, 100)
    assert (p.name, p.start_step, p.end_step, p.seq_len, p.rows, p.anneal) == ("main", 1, 100, 256, 16, False)
    assert il.buckets == ["code", "math", "web"]  # None: proportional to tokens, empty buckets left out
    assert p.weights == pytest.approx({"web": 1000 / 1600, "code": 500 / 1600, "math": 100 / 1600}, abs=1e-6)
    assert p.tokens_per_step == 2 * 16 * 256 and p.token_end == 100 * 2 * 16 * 256


def test_phases_switch_at_their_share_of_the_token_budget():
    cfg = mix({"name": "bulk", "fraction": 0.25, "seq_len": 64}, {"name": "mid", "fraction": 0.5},
              {"name": "anneal", "fraction": 0.25, "weights": {"math": 1.0}, "anneal": True}, weights={"web": 1})
    phases, _ = build_phases(cfg, AVAILABLE, 256, 16, 2, 40)
    budget = 40 * 2 * 16 * 256
    assert [(p.start_step, p.end_step) for p in phases] == [(1, 10), (11, 30), (31, 40)]
    assert [p.token_start for p in phases] == [0, budget // 4, 3 * budget // 4]
    assert phases[-1].token_end == budget
    assert [p.rows for p in phases] == [64, 16, 16]  # a 64-token phase keeps 16·256 tokens per micro-batch
    assert [p.rows * p.seq_len for p in phases] == [16 * 256] * 3
    assert [p.weights for p in phases] == [{"web": 1.0}, {"web": 1.0}, {"math": 1.0}]
    assert [p.anneal for p in phases] == [False, False, True]
    idx = [phase_index(phases, s) for s in range(1, 41)]
    assert idx == [0] * 10 + [1] * 20 + [2] * 10


def test_fractions_round_to_the_nearest_step():
    cfg = mix({"name": "a", "fraction": 1 / 3}, {"name": "b", "fraction": 1 / 3}, {"name": "c", "fraction": 1 / 3})
    phases, _ = build_phases(cfg, AVAILABLE, 8, 1, 1, 10)
    assert [(p.start_step, p.end_step) for p in phases] == [(1, 3), (4, 7), (8, 10)]


def test_bad_phases_are_clear_errors():
    with pytest.raises(ValidationError, match="sum to 1"):
        mix({"name": "a", "fraction": 0.5}, {"name": "b", "fraction": 0.4})
    with pytest.raises(ValidationError, match="unique"):
        mix({"name": "a", "fraction": 0.5}, {"name": "a", "fraction": 0.5})
    with pytest.raises(ValidationError, match="anneal phases must be the last"):
        mix({"name": "a", "fraction": 0.5, "anneal": True}, {"name": "b", "fraction": 0.5})
    with pytest.raises(ValidationError):
        mix({"name": "a", "fraction": 0.0}, {"name": "b", "fraction": 1.0})
    with pytest.raises(MixtureError, match=r"phases\[0\] \('tiny'\).*gets no optimizer step"):
        build_phases(mix({"name": "tiny", "fraction": 0.01}, {"name": "b", "fraction": 0.99}), AVAILABLE, 8, 1, 1, 10)
    with pytest.raises(MixtureError, match="seq_len 100 does not divide"):
        build_phases(mix({"name": "a", "fraction": 1.0, "seq_len": 100}), AVAILABLE, 256, 16, 1, 10)
    with pytest.raises(MixtureError, match=r"phases\[1\].*\['books'\].*not in the token store"):
        build_phases(mix({"name": "a", "fraction": 0.5}, {"name": "b", "fraction": 0.5, "weights": {"books": 1}}),
                     AVAILABLE, 8, 1, 1, 10)
    with pytest.raises(MixtureError, match=r"\['empty'\] that hold no training token"):
        build_phases(MixtureConfig(weights={"web": 1, "empty": 1}), AVAILABLE, 8, 1, 1, 10)
    with pytest.raises(MixtureError, match="every weight is 0"):
        build_phases(MixtureConfig(weights={"web": 0}), AVAILABLE, 8, 1, 1, 10)
    with pytest.raises(ValidationError, match=r"weights\.web"):  # refused when the config is read
        MixtureConfig(weights={"web": -1.0})
    with pytest.raises(MixtureError, match="no bucket"):
        build_phases(MixtureConfig(), {"empty": 0}, 8, 1, 1, 10)
    phases, _ = build_phases(MixtureConfig(), AVAILABLE, 8, 1, 1, 10)
    for step in (0, 11):
        with pytest.raises(MixtureError, match="outside the run's optimizer steps 1..10"):
            phase_index(phases, step)


def test_replay_puts_its_share_on_the_original_buckets_in_every_phase_without_weights():
    cfg = mix({"name": "cpt", "fraction": 0.5}, {"name": "anneal", "fraction": 0.5, "weights": {"code": 1.0}},
              replay={"buckets": ["web", "math"], "share": 0.25})
    phases, _ = build_phases(cfg, AVAILABLE, 256, 16, 2, 40)
    assert phases[0].weights == pytest.approx({"code": 0.75, "web": 0.25 * 1000 / 1100, "math": 0.25 * 100 / 1100},
                                              abs=1e-3)
    assert phases[1].weights == {"code": 1.0}  # a phase with its own weights is the user's to set
    given = MixtureConfig(weights={"code": 1.0, "web": 3.0, "math": 1.0}, replay={"buckets": ["web", "math"], "share": 0.1})
    (p,), _ = build_phases(given, AVAILABLE, 256, 16, 2, 40)
    assert p.weights == pytest.approx({"code": 0.9, "web": 0.075, "math": 0.025}, abs=1e-3)  # 3:1 kept inside replay
    only = MixtureConfig(weights={"code": 1.0}, replay={"buckets": ["web"], "share": 0.5})
    (p,), _ = build_phases(only, AVAILABLE, 256, 16, 2, 40)
    assert p.weights == pytest.approx({"code": 0.5, "web": 0.5}, abs=1e-3)  # left out of the weights: still replayed
    for replay, match in (({"buckets": ["books"], "share": 0.1}, "not in the token store"),
                          ({"buckets": ["empty"], "share": 0.1}, "hold no training token"),
                          ({"buckets": ["web", "code", "math"], "share": 0.1}, "leave no new data")):
        with pytest.raises(MixtureError, match=match):
            build_phases(MixtureConfig(replay=replay), AVAILABLE, 256, 16, 2, 40)
    with pytest.raises(ValidationError):
        MixtureConfig(replay={"buckets": ["web"], "share": 1.0})
