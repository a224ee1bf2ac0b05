"""The stability guard: unit rules, then each mechanism firing in a real (tiny) faulted run."""

import math
import statistics

import pytest

from tokenmill.config import GuardConfig, RunConfig
from tokenmill.runs import RunDir, read_events
from tokenmill.train.guard import StabilityGuard
from tokenmill.train.trainer import run_train
from tests.conftest import write_tiny_store

CFG = GuardConfig(min_history=5, window=10, recover_steps=4, max_consecutive_skips=6, lr_backoff=0.7)


def warmed(cfg: GuardConfig = CFG, n: int = 10) -> StabilityGuard:
    g = StabilityGuard(cfg)
    for s in range(1, n + 1):
        assert g.check(s, 2.0 + 0.01 * (s % 3), 1.0 + 0.1 * (s % 2)).action == "apply"
    return g


# --------------------------------------------------------------------------- rules
def test_normal_steps_are_applied_and_build_the_medians():
    g = warmed()
    assert len(g.grad_hist) == 10 and g.spike is None
    assert statistics.median(g.grad_hist) == pytest.approx(1.05)


def test_nonfinite_is_skipped_and_the_next_normal_step_recovers():
    g = warmed()
    v = g.check(11, math.nan, math.nan)
    assert v.action == "skip" and v.events[0][0] == "skip" and v.events[0][1]["reason"] == "nonfinite"
    v = g.check(12, 2.0, 1.0)
    assert v.action == "apply" and [k for k, _ in v.events] == ["recovered"]
    assert g.spike is None and g.skipped == [{"step": 11, "reason": "nonfinite"}]


def test_gradient_spike_threshold_is_k_times_the_running_median():
    g = warmed()
    med = statistics.median(g.grad_hist)
    assert g.check(11, 2.0, 4.9 * med).action == "apply"  # below k = 5
    v = g.check(12, 2.0, 5.1 * med)
    assert v.action == "skip" and v.events[0][0] == "spike" and v.events[0][1]["reason"] == "grad_spike"
    assert v.events[0][1]["grad_norm_median"] == pytest.approx(statistics.median(g.grad_hist))


def test_loss_spike_is_skipped_before_it_is_applied():
    g = warmed()
    v = g.check(11, 2.0 * 1.6, 1.0)
    assert v.action == "skip" and v.events[0][1]["reason"] == "loss_spike"


def test_no_judgement_before_min_history():
    g = StabilityGuard(CFG)
    for s in range(1, 5):
        assert g.check(s, 10.0 / s, 100.0 if s == 3 else 1.0).action == "apply"


def test_a_spike_that_does_not_recover_within_m_steps_rolls_back():
    g = warmed()
    assert g.check(11, 9.0, 1.0).action == "skip"  # opens the spike at 11
    actions = [g.check(s, 2.5, 1.0).action for s in range(12, 16)]  # applied but above 1.1 × pre-level
    assert actions == ["apply", "apply", "apply", "rollback"]  # 15 - 11 >= recover_steps = 4
    assert g.good_checkpoint_bound() == 10
    info = g.rolled_back(15, to_step=8)
    assert info["skipped_window"] == [9, 15] and g.lr_scale == pytest.approx(0.7)
    assert g.spike is None and g.rollbacks_left == CFG.max_rollbacks - 1


def test_consecutive_skips_roll_back_before_m_steps():
    cfg = CFG.model_copy(update={"recover_steps": 100, "max_consecutive_skips": 3})
    g = warmed(cfg)
    assert [g.check(s, 50.0, 50.0).action for s in (11, 12, 13)] == ["skip", "skip", "rollback"]


def test_lr_backoff_compounds_and_state_round_trips():
    g = warmed()
    for start in (11, 30):
        g.check(start, 9.0, 1.0)
        g.rolled_back(start + 1, start - 3)
    assert g.lr_scale == pytest.approx(0.49)
    h = StabilityGuard(CFG)
    h.load_state_dict(g.state_dict())
    assert h.state_dict() == g.state_dict()
    for s in range(40, 46):  # the restored guard makes the same decisions
        assert h.check(s, 2.0 + s % 2, 1.0).action == g.check(s, 2.0 + s % 2, 1.0).action


def test_a_lasting_higher_norm_with_a_normal_loss_becomes_the_new_baseline():
    g = warmed()  # grad norms ~1.05, loss ~2.0
    actions = [g.check(s, 2.0, 8.0).action for s in range(11, 11 + CFG.rebaseline_after)]
    assert actions == ["skip"] * (CFG.rebaseline_after - 1) + ["apply"]  # the 5th is accepted
    assert g.grad_hist == [8.0] and g.spike is None and g.consecutive_skips == 0
    v = g.check(20, 2.0, 8.5)
    assert v.action == "apply" and not v.events


def test_a_high_norm_with_a_high_loss_is_never_rebaselined():
    cfg = CFG.model_copy(update={"recover_steps": 100, "max_consecutive_skips": 10})
    g = warmed(cfg)
    actions = [g.check(s, 2.5, 8.0).action for s in range(11, 21)]  # loss 1.25x: not at its usual level
    assert actions == ["skip"] * 9 + ["rollback"]


def test_no_spike_judgement_during_warmup_but_nonfinite_still_skips():
    g = StabilityGuard(CFG, judge_after=20)
    for s in range(1, 21):
        assert g.check(s, 2.0, 1.0 if s < 15 else 50.0).action == "apply"
    assert g.check(21, 2.0, 500.0).action == "skip"  # judged from here on
    g2 = StabilityGuard(CFG, judge_after=20)
    assert g2.check(1, math.nan, 1.0).action == "skip"


def test_a_jumping_rollback_loses_the_window():
    g = warmed(CFG.model_copy(update={"rollback_rewind": False}))
    g.check(11, 9.0, 1.0)
    info = g.rolled_back(15, to_step=8)
    assert info["next_step"] == 16 and not info["rewind"]
    assert g.offset == 0 and g.rewinds == [] and g.attempt(16) == 16 and g.draw(9) == 0


def test_a_rewinding_rollback_goes_back_to_the_checkpoint_on_fresh_draws():
    g = warmed(CFG.model_copy(update={"rollback_rewind": True}))
    g.check(11, 9.0, 1.0)
    info = g.rolled_back(15, to_step=8)
    assert info["next_step"] == 9 and info["rewind"] and info["skipped_window"] == [9, 15]
    # steps 9..15 are taken again, as attempts 16..22, on the second draw of their data
    assert [g.attempt(s) for s in (9, 15, 16)] == [16, 22, 23]
    assert [g.draw(s) for s in (8, 9, 15, 16)] == [0, 1, 1, 0]
    g.check(12, 9.0, 1.0)  # a second spike inside the rewound window: back to step 8 again
    g.rolled_back(12, to_step=8)
    assert g.offset == 7 + 4 and g.attempt(9) == 20
    assert [g.draw(s) for s in (9, 12, 13, 15, 16)] == [2, 2, 1, 1, 0]  # never a discarded batch again
    h = StabilityGuard(g.cfg)
    h.load_state_dict(g.state_dict())
    assert h.state_dict() == g.state_dict() and h.attempt(9) == 20 and h.draw(12) == 2


def test_disabled_guard_applies_everything():
    g = StabilityGuard(GuardConfig(enabled=False))
    assert g.check(1, math.nan, math.inf).action == "apply"


# --------------------------------------------------------------------------- a real faulted run
# The jumping rollback (rollback_rewind false) with the old trigger and backoff, whose semantics the
# first tests pin; the rewinding one (the default) is tested after them.
JUMP = {"rollback_rewind": False, "max_consecutive_skips": 20, "lr_backoff": 0.7}
REWIND = {"rollback_rewind": True, "max_consecutive_skips": 5, "lr_backoff": 1.0}


def _run(root, faults: dict, name: str = "g", guard: dict | None = None, eval_every: int = 0) -> RunDir:
    cfg = RunConfig.model_validate({
        "name": name, "root": str(root), "seed": 11,
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
        "train": {"seq_len": 32, "micro_batch": 8, "max_steps": 80, "lr": 0.01, "warmup_steps": 5,
                  "ckpt_every": 5, "keep_checkpoints": 3, "device": "cpu", "dtype": "float32", "threads": 1,
                  "log_every": 0, "eval_every": eval_every,
                  "guard": {"min_history": 5, "window": 20, "recover_steps": 6, **(guard or JUMP)},
                  "faults": faults},
    })
    run = RunDir.create(cfg, root / name)
    write_tiny_store(run.path / "tokens")
    return run


FAULTS = {"nan_steps": [22], "corrupt_steps": [30], "lr_blowup": [45, 46], "lr_blowup_factor": 100.0}


def _events(run: RunDir, kind: str) -> list[dict]:
    return [e for e in read_events(run.path / "events.jsonl") if e["kind"] == kind]


def _losses(run: RunDir) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in _events(run, "train_step")}


@pytest.fixture(scope="module")
def clean_and_faulty(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard")
    clean, faulty = _run(root, {}, "clean"), _run(root, FAULTS, "faulty", JUMP)
    run_train(clean, progress=False)
    run_train(faulty, progress=False)
    return clean, faulty


def test_each_mechanism_fires_on_its_fault(clean_and_faulty):
    clean, faulty = clean_and_faulty
    assert not any(_events(clean, k) for k in ("skip", "spike", "rollback"))  # no false alarm
    skip = _events(faulty, "skip")
    assert [(e["step"], e["reason"]) for e in skip] == [(22, "nonfinite")]
    spikes = _events(faulty, "spike")
    assert spikes[0]["step"] == 30  # the corrupted batch, caught before it was applied
    assert spikes[0]["lineage"] and {"bucket", "doc_id", "shard"} <= set(spikes[0]["lineage"][0])
    # The LR blow-up damaged the weights at step 45: every later batch spikes until the rollback.
    assert [e["step"] for e in spikes[1:]][0] == 46
    (rb,) = _events(faulty, "rollback")
    assert rb["spike_start"] == 46 and rb["step"] == 46 + 6
    assert rb["to_step"] < 45 and rb["to_step"] % 5 == 0  # the last checkpoint before the damage
    assert rb["skipped_window"] == [rb["to_step"] + 1, rb["step"]] and rb["lr_scale"] == pytest.approx(0.7)
    actions = {e["step"]: e["action"] for e in _events(faulty, "train_step")}
    assert actions[22] == actions[30] == "skip" and actions[rb["step"]] == "rollback"


def test_the_faulted_run_ends_near_the_clean_run(clean_and_faulty):
    clean, faulty = clean_and_faulty
    c, f = _losses(clean), _losses(faulty)
    tail = range(71, 81)
    c_tail, f_tail = statistics.mean(c[s] for s in tail), statistics.mean(f[s] for s in tail)
    peak = max(v for v in f.values() if math.isfinite(v))
    assert peak > 10 * c_tail  # the blow-up really wrecked the model ...
    assert f_tail < 1.3 * c_tail  # ... and the guard brought it back near the clean run


def test_a_faulted_run_resumes_exactly_after_the_rollback(clean_and_faulty, tmp_path):
    _, faulty = clean_and_faulty
    again = _run(tmp_path, FAULTS, "again", JUMP, eval_every=60)

    def crash(step, model):
        if step == 60:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated"):
        run_train(again, on_eval=crash, progress=False)
    run_train(again, resume=True, progress=False)
    resumed = _events(again, "resumed")[0]["step"]
    assert resumed > _events(faulty, "rollback")[0]["step"]  # the guard state came from the checkpoint
    got: dict[int, float] = {}
    for e in _events(again, "train_step"):
        assert got.setdefault(e["step"], e["loss"]) == e["loss"] or math.isnan(e["loss"])
    ref = _losses(faulty)
    assert all(got[s] == ref[s] or (math.isnan(got[s]) and math.isnan(ref[s])) for s in ref)


# --------------------------------------------------------------------------- rewinding rollback
def _lineage(run: RunDir) -> dict[int, dict]:
    """The train_step events the final weights descend from: a rollback to step C drops the steps
    after C taken before it (rewinding, they are taken again; jumping, they are lost)."""
    kept: dict[int, dict] = {}
    for e in read_events(run.path / "events.jsonl"):
        if e["kind"] == "train_step":
            kept[e["step"]] = e
        elif e["kind"] == "rollback":
            kept = {s: v for s, v in kept.items() if s <= e["to_step"]}
    return kept


@pytest.fixture(scope="module")
def rewound(tmp_path_factory, clean_and_faulty):
    run = _run(tmp_path_factory.mktemp("rewind"), FAULTS, "rewound", REWIND)
    run_train(run, progress=False)
    return run


def test_a_rewound_run_takes_every_update_of_a_clean_run_on_its_schedule(clean_and_faulty, rewound):
    clean, jumped = clean_and_faulty
    (rb,) = _events(rewound, "rollback")
    assert rb["rewind"] and rb["step"] == 46 + 4  # the blow-up's spikes: 5 in a row roll back
    assert rb["to_step"] < 45 and rb["next_step"] == rb["to_step"] + 1
    final, ref = _lineage(rewound), {e["step"]: e for e in _events(clean, "train_step")}
    assert sorted(final) == list(range(1, 81))
    applied = [s for s, e in final.items() if e["action"] == "apply"]
    # Only the NaN and the corrupted batch stay skipped (both before the checkpoint): the blow-up
    # was in the rewound window, whose steps were taken again on fresh batches.
    assert len(applied) == 80 - 2 and final[22]["action"] == final[30]["action"] == "skip"
    assert all(final[s]["lr"] == pytest.approx(ref[s]["lr"]) for s in final)  # the clean schedule
    # the jumping run lost the window: fewer updates, and its schedule ran ahead of its weights
    jumped_final = _lineage(jumped)
    assert len([e for e in jumped_final.values() if e["action"] == "apply"]) < len(applied) - 5
    assert 42 not in jumped_final


def test_the_rewound_window_trains_on_fresh_batches(rewound):
    (rb,) = _events(rewound, "rollback")
    lo, hi = rb["skipped_window"]
    steps = _events(rewound, "train_step")
    first = {e["step"]: e for e in steps if "draw" not in e}
    again = {e["step"]: e for e in steps if e.get("draw") == 1}
    assert sorted(again) == list(range(lo, hi + 1))
    assert all(again[s]["attempt"] == s + hi - lo + 1 for s in again)
    # the same weights (the checkpoint's) on another batch: another loss at the first step taken again
    assert again[lo]["loss"] != first[lo]["loss"]
    # the checkpoints of the abandoned attempt are gone; the rewound one holds the new guard state
    from tokenmill.train.checkpoint import list_checkpoints

    ckpts = [s for s, _ in list_checkpoints(rewound.path / "checkpoints")]  # (spikes/ holds diagnosis states)
    assert max(ckpts) == 80


def test_a_rewound_run_resumes_exactly_after_the_rollback(rewound, tmp_path):
    again = _run(tmp_path, FAULTS, "again", REWIND, eval_every=55)

    def crash(step, model):
        if step == 55 and not crashed:
            crashed.append(step)
            raise RuntimeError("simulated crash")

    crashed: list[int] = []
    with pytest.raises(RuntimeError, match="simulated"):
        run_train(again, on_eval=crash, progress=False)
    run_train(again, resume=True, progress=False)
    resumed = _events(again, "resumed")[0]["step"]
    assert resumed == 55 and _events(again, "rollback")  # resumed inside the rewound stretch

    def by_attempt(run: RunDir) -> dict[int, float]:
        out: dict[int, float] = {}
        for e in _events(run, "train_step"):
            a = e.get("attempt", e["step"])
            assert out.setdefault(a, e["loss"]) == e["loss"] or math.isnan(e["loss"])
        return out

    got, ref = by_attempt(again), by_attempt(rewound)
    assert sorted(got) == sorted(ref)
    assert all(got[a] == ref[a] or (math.isnan(got[a]) and math.isnan(ref[a])) for a in ref)
