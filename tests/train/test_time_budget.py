"""train.max_seconds: a run stopped by time, its LR schedule on the elapsed share, resume and replay."""

from __future__ import annotations

import math
import shutil

import pytest

from tokenmill.config import RunConfig
from tokenmill.runs import RunDir, read_events
from tokenmill.train.checkpoint import list_checkpoints, read_state
from tokenmill.train.optimizer import lr_at
from tokenmill.train.replay import replay_loss
from tokenmill.train.time_budget import TimeBudget
from tokenmill.train.trainer import TrainError, run_train

CEILING = 3_000  # max_steps: only the ceiling; the clock stops these runs long before it


def events(run: RunDir, kind: str) -> list[dict]:
    return [e for e in read_events(run.path / "events.jsonl") if e["kind"] == kind]


def budgeted(run: RunDir, seconds: float, **train) -> RunDir:
    """The tiny run with a time budget, after a 2-step run in this process: the first step of a
    process pays one-off warm-up (seconds), which would otherwise eat a sub-second budget."""
    warm = run.config.model_dump()
    warm["train"].update(max_steps=2, ckpt_every=0)
    warm_run = RunDir.create(RunConfig.model_validate(warm), run.path.with_name("warm"))
    shutil.copytree(run.path / "tokens", warm_run.path / "tokens")
    run_train(warm_run, progress=False)
    data = run.config.model_dump()
    data["train"].update(max_seconds=seconds, max_steps=CEILING, warmup_steps=CEILING // 10, compile=False, **train)
    return RunDir.create(RunConfig.model_validate(data), run.path)


def test_schedule_step_is_the_elapsed_share_of_the_ceiling():
    clock = TimeBudget(max_seconds=10.0, max_steps=1000)
    assert clock.schedule_step(1) == 1.0  # no step time known yet
    clock.add(2.0)
    assert clock.schedule_step(2) == pytest.approx(1000 * 4.0 / 10.0)  # 2 s done + the last step's 2 s
    clock.add(3.0)
    assert not clock.spent() and clock.schedule_step(3) == pytest.approx(1000 * 8.0 / 10.0)
    clock.add(4.0)  # 9 s: one more 4-s step would end 3 s over, stopping now is 1 s short
    assert clock.spent() and clock.schedule_step(4) == 1000  # capped at the ceiling: the schedule's end
    restored = TimeBudget(10.0, 1000)
    restored.load_state_dict(clock.state_dict())
    assert (restored.elapsed, restored.last_step_seconds) == (9.0, 4.0) and restored.spent()


def test_the_run_ends_at_the_step_nearest_the_budget():
    clock = TimeBudget(max_seconds=10.0, max_steps=1000)
    for _ in range(4):
        clock.add(2.4)  # 9.6 s: a fifth step would end at 12.0, 2.0 over; 0.4 short is nearer
    assert clock.spent()
    clock = TimeBudget(max_seconds=10.0, max_steps=1000)
    for _ in range(4):
        clock.add(2.1)  # 8.4 s: a fifth ends at 10.5, nearer than 1.6 short
    assert not clock.spent()


def test_without_a_budget_the_schedule_step_is_the_step_and_nothing_is_spent():
    clock = TimeBudget(max_seconds=None, max_steps=50)
    clock.add(1e9)
    assert clock.schedule_step(7) == 7.0 and not clock.spent()
    clock.load_state_dict(None)  # a step-budgeted checkpoint holds no time_budget
    assert clock.elapsed == 0.0


def test_a_run_stops_at_the_step_nearest_its_seconds(tiny_run):
    run = budgeted(tiny_run, 0.6)
    summary = run_train(run, progress=False)
    rows = events(run, "train_step")
    secs = [e["seconds"] for e in rows]
    assert summary["steps"] == len(rows) < CEILING
    assert sum(secs) + secs[-1] / 2 >= 0.6 > sum(secs[:-1]) + secs[-2] / 2  # the first step nearer than the next
    assert [e["elapsed_s"] for e in rows] == pytest.approx([sum(secs[: i + 1]) for i in range(len(secs))])
    done = events(run, "train_done")[-1]
    assert done["stopped_by"] == "time" and done["elapsed_s"] == pytest.approx(sum(secs))
    assert list_checkpoints(run.path / "checkpoints")[-1][0] == len(rows)  # the final checkpoint, as at max_steps
    # Every step's LR is the schedule read at the elapsed share, recomputed from the logged seconds.
    tc, elapsed, last = run.config.train, 0.0, None
    for e in rows:
        at = 1.0 if last is None else max(1.0, CEILING * min(1.0, (elapsed + last) / 0.6))
        assert e["schedule_step"] == pytest.approx(at)
        assert e["lr"] == pytest.approx(lr_at(at, tc))
        elapsed, last = elapsed + e["seconds"], e["seconds"]
    assert rows[-1]["lr"] < 0.5 * tc.lr  # the cosine has decayed: the schedule spans the seconds, not the ceiling


def test_a_step_budgeted_run_logs_no_clock(tiny_run):
    run_train(tiny_run, progress=False)
    assert "schedule_step" not in events(tiny_run, "train_step")[0]
    assert events(tiny_run, "train_done")[-1]["stopped_by"] == "steps"


def test_resume_restores_the_elapsed_seconds_and_replay_repeats_a_step(tiny_run, tmp_path):
    run = budgeted(tiny_run, 0.6, ckpt_every=2, keep_checkpoints=1000)
    run_train(run, progress=False)
    rows = events(run, "train_step")
    assert len(rows) >= 6, "the tiny run should manage several steps in 0.6 s"
    # Replay rolls θ forward with the logged schedule steps: the same loss as the run logged.
    assert replay_loss(run, len(rows))["matches_log"] is True
    # Drop every checkpoint after step 4, as if the process had died there, and resume.
    for step, path in list_checkpoints(run.path / "checkpoints"):
        if step > 4:
            for f in sorted(path.rglob("*"), reverse=True):
                f.unlink() if f.is_file() else f.rmdir()
            path.rmdir()
    state = read_state(list_checkpoints(run.path / "checkpoints")[-1][1])
    assert state["time_budget"]["elapsed"] == pytest.approx(sum(e["seconds"] for e in rows[:4]))
    assert state["scheduler"]["schedule_step"] == rows[3]["schedule_step"]  # where step 4's LR was read
    assert state["scheduler"]["lr"] == pytest.approx(rows[3]["lr"])
    run_train(run, resume=True, progress=False)
    after = [e for e in events(run, "train_step")][len(rows):]
    assert after[0]["step"] == 5 and math.isclose(after[0]["elapsed_s"], state["time_budget"]["elapsed"] + after[0]["seconds"])
    # on a loaded machine the resumed run may fit one step only: the step before the last is then step 4
    seq = rows[:4] + after
    assert seq[-1]["elapsed_s"] + seq[-1]["seconds"] / 2 >= 0.6 > seq[-2]["elapsed_s"] + seq[-2]["seconds"] / 2
    # A resume of a run whose clock is spent does nothing.
    n = len(events(run, "train_step"))
    run_train(run, resume=True, progress=False)
    assert len(events(run, "train_step")) == n and events(run, "train_done")[-1]["note"] == "already finished"


def test_a_curriculum_placed_by_step_is_refused(tiny_run):
    data = tiny_run.config.model_dump()
    data["train"].update(max_seconds=5.0)
    data["mixture"]["phases"] = [{"name": "short", "fraction": 0.5, "seq_len": 16},
                                 {"name": "long", "fraction": 0.5, "seq_len": 32}]
    run = RunDir.create(RunConfig.model_validate(data), tiny_run.path)
    with pytest.raises(TrainError, match="max_seconds.*phases are placed by step"):
        run_train(run, progress=False)


def test_a_non_positive_budget_is_refused(tiny_run):
    data = tiny_run.config.model_dump()
    data["train"].update(max_seconds=0)
    with pytest.raises(ValueError, match="max_seconds"):
        RunConfig.model_validate(data)
