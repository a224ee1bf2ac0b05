"""Training attempts in one event log: a fresh start from step 0 begins a new attempt, a resume does
not; the earlier attempts' train and eval events leave the log the report draws, the other
stages' events stay, and each earlier attempt is summed up (steps, ending, where it went)."""

from tokenmill.report.attempts import attempts_table, split_attempts

STALE = "/runs/r/checkpoints.stale-20261207T081500Z-config-changed"


def _steps(first: int, last: int, t0: float) -> list[dict]:
    return [{"t": t0 + s, "stage": "train", "kind": "train_step", "step": s, "loss": 5.0 - s / 100} for s in range(first, last + 1)]


def two_attempts() -> list[dict]:
    """Curate, then a first attempt interrupted at step 24 (checkpoint 20, an evaluation at 20), its
    checkpoints set aside for a changed config, and a second attempt of 30 steps."""
    ev: list[dict] = [{"t": 0.0, "stage": "curate", "kind": "phase", "phase": "map", "seconds": 1.0}]
    ev.append({"t": 1.0, "stage": "train", "kind": "train_start", "step": 0})
    ev += _steps(1, 24, 1.0)
    ev.insert(22, {"t": 21.5, "stage": "train", "kind": "checkpoint", "step": 20})
    ev.insert(23, {"t": 21.6, "stage": "eval", "kind": "eval", "step": 20, "buckets": {"web": {"loss": 4.9}}})
    ev.append({"t": 26.0, "stage": "train", "kind": "interrupted", "step": 24, "checkpoint": "checkpoints/step_24"})
    ev.append({"t": 100.0, "stage": "train", "kind": "checkpoints_set_aside", "path": STALE, "reason": "config-changed"})
    ev.append({"t": 100.5, "stage": "train", "kind": "stage_start"})
    ev.append({"t": 101.0, "stage": "train", "kind": "train_start", "step": 0})
    ev += _steps(1, 30, 101.0)
    ev.append({"t": 132.0, "stage": "train", "kind": "checkpoint", "step": 30})
    ev.append({"t": 133.0, "stage": "train", "kind": "train_done", "step": 30})
    return ev


def test_a_fresh_start_after_a_set_aside_leaves_the_earlier_attempt_out_and_sums_it_up():
    log = two_attempts()
    current, earlier = split_attempts(log)
    assert len(earlier) == 1
    first = earlier[0]
    assert first.number == 1 and first.steps_reached() == 24
    assert first.ending() == "interrupted (Ctrl-C) at step 24"
    assert first.set_aside() == "checkpoints.stale-20261207T081500Z-config-changed/ (config-changed)"
    assert not [e for e in current if e["kind"] in ("interrupted", "checkpoints_set_aside", "eval")]
    assert [e["step"] for e in current if e["kind"] == "checkpoint"] == [30]
    steps = [e["step"] for e in current if e["kind"] == "train_step"]
    assert steps == list(range(1, 31)) and all(e["t"] > 100 for e in current if e["stage"] == "train")
    assert current[0] == log[0]  # curate's events belong to no attempt: kept, in their place
    # every event of the log is in exactly one of the two
    assert len(current) + len(first.events) == len(log)


def test_a_resume_continues_the_same_attempt():
    log = [{"t": 0.0, "stage": "train", "kind": "train_start", "step": 0}, *_steps(1, 25, 0.0)]
    log.append({"t": 30.0, "stage": "train", "kind": "interrupted", "step": 25})
    log.append({"t": 90.0, "stage": "train", "kind": "resumed", "step": 20, "checkpoint": "checkpoints/step_20"})
    log.append({"t": 90.0, "stage": "train", "kind": "train_start", "step": 20})
    log += _steps(21, 40, 90.0)
    current, earlier = split_attempts(log)
    assert earlier == [] and current == log


def test_a_restart_with_nothing_to_resume_is_a_new_attempt_and_says_so():
    log = [{"t": 0.0, "stage": "train", "kind": "train_start", "step": 0}, *_steps(1, 7, 0.0)]
    log.append({"t": 9.0, "stage": "train", "kind": "restart", "by": "torchrun", "attempt": 1, "resume_step": 0})
    log.append({"t": 10.0, "stage": "train", "kind": "train_start", "step": 0})
    log += _steps(1, 12, 10.0)
    log.append({"t": 30.0, "stage": "train", "kind": "train_start", "step": 0})  # killed again, started over
    current, earlier = split_attempts(log)
    assert [a.steps_reached() for a in earlier] == [7, 12]
    assert earlier[0].ending() == "restarted by torchrun with no checkpoint to resume from"
    assert earlier[1].ending() == "no end recorded (killed, or crashed)"
    assert earlier[1].set_aside().startswith("none set aside")
    assert current == [log[-1]]


def test_the_table_lists_each_earlier_attempt():
    _, earlier = split_attempts(two_attempts())
    page = attempts_table(earlier)
    assert "Earlier training attempts (1)" in page and "started over from step 0 once" in page
    cells = page.split("<tr>")[2]
    for text in ("1970-01-01 00:00:01 UTC", ">24<", "interrupted (Ctrl-C) at step 24", "checkpoints.stale-20261207T081500Z"):
        assert text in cells, text
    assert attempts_table([]) == ""


def test_a_real_run_retrained_after_a_config_change_lists_its_first_attempt(tiny_run):
    from tokenmill.config import RunConfig
    from tokenmill.pipeline import run_stage
    from tokenmill.runs import RunDir, read_events

    settings = tiny_run.config.model_dump()
    settings["train"].update(max_steps=6, ckpt_every=3)
    first = RunDir(RunConfig.model_validate(settings), tiny_run.path)
    run_stage(first, "train")
    settings["train"]["lr"] = 0.005  # a changed config: `run` sets the checkpoints aside and starts over
    second = RunDir(RunConfig.model_validate(settings), tiny_run.path)
    run_stage(second, "train")
    stale = next(tiny_run.path.glob("checkpoints.stale-*-config-changed"))
    current, earlier = split_attempts(read_events(tiny_run.path / "events.jsonl"))
    assert [a.steps_reached() for a in earlier] == [6] and earlier[0].ending() == "finished at step 6"
    assert earlier[0].set_aside() == f"{stale.name}/ (config-changed)"
    assert sum(e["kind"] == "train_start" for e in current) == 1
    assert stale.name in attempts_table(earlier) and (stale / "step_6").is_dir()  # the table names where it is
