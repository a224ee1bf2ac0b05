"""`tokenmill verify-resume`: real SIGKILLs, real resumes, a bitwise comparison that can fail."""

from __future__ import annotations

import json
import math
import signal
import struct

import pytest
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.pipeline import _inputs
from tokenmill.runs import read_events
from tokenmill.verify_resume import UPSTREAM, Killer, VerifyResumeError, choose_kill_steps, compare_losses


def next_float(x: float) -> float:
    return struct.unpack("<d", struct.pack("<q", struct.unpack("<q", struct.pack("<d", x))[0] + 1))[0]


def test_kill_steps_come_from_the_seed_and_land_after_the_first_checkpoint():
    a = choose_kill_steps(3, 2, 30, 10)
    assert a == choose_kill_steps(3, 2, 30, 10) and len(set(a)) == 2 and a == sorted(a)
    assert all(11 <= s <= 29 for s in a)
    assert {tuple(choose_kill_steps(seed, 2, 30, 10)) for seed in range(20)} != {tuple(a)}
    assert all(1 <= s <= 4 for s in choose_kill_steps(0, 3, 5, 10))  # short run: anywhere but the last step
    with pytest.raises(VerifyResumeError, match="at least 4 training steps"):
        choose_kill_steps(0, 3, 3, 1)


def test_comparison_is_bitwise_and_complete():
    ref = [(1, 2.5), (2, 2.25), (3, 2.0)]
    ok = compare_losses(ref, [(1, 2.5), (2, 2.25), (1, 2.5), (2, 2.25), (3, 2.0)])
    assert ok["mismatches"] == [] and ok["missing_steps"] == [] and ok["replayed_events"] == 2
    assert ok["max_abs_diff"] == 0.0 and ok["steps_compared"] == 3 and ok["events_compared"] == 5
    off = compare_losses(ref, [(1, 2.5), (2, next_float(2.25)), (3, 2.0)])  # one ulp on a replayed step
    assert [m["step"] for m in off["mismatches"]] == [2] and 0 < off["max_abs_diff"] < 1e-15
    short = compare_losses(ref, [(1, 2.5), (2, 2.25)])
    assert short["missing_steps"] == [3]
    extra = compare_losses(ref, [(1, 2.5), (2, 2.25), (3, 2.0), (4, 1.0)])
    assert extra["mismatches"][0]["reference"] is None and math.isinf(extra["max_abs_diff"])
    nan = compare_losses([(1, math.nan)], [(1, math.nan)])  # NaN is identical to itself, bit for bit
    assert nan["mismatches"] == []


class FakeProc:
    pid = 4242

    def __init__(self):
        self.signals = []

    def send_signal(self, sig):
        self.signals.append(sig)


def test_killer_ignores_steps_logged_by_an_earlier_child(tmp_path):
    log = tmp_path / "events.jsonl"

    def write(*evs):
        with open(log, "a") as fh:
            fh.writelines(json.dumps(e) + "\n" for e in evs)
    killer = Killer(log, [5, 6])
    write({"kind": "child_started", "attempt": 0}, {"kind": "train_step", "step": 4})
    first = FakeProc()
    killer(first, 0)
    assert first.signals == []
    write({"kind": "train_step", "step": 5}, {"kind": "train_step", "step": 6})  # 6: logged before it died
    killer(first, 0)
    assert first.signals == [signal.SIGKILL] and killer.sent[0]["seen_step"] == 5
    write({"kind": "restart", "attempt": 1})
    second = FakeProc()
    killer(second, 1)  # step 6 of the dead child must not kill the new one
    with open(log, "a") as fh:
        fh.write('{"kind": "child_started", "attempt": 1}\n{"kind": "train_st')  # a line being written
    killer(second, 1)
    assert second.signals == []
    with open(log, "a") as fh:
        fh.write('ep", "step": 6}\n')
    killer(second, 1)
    assert second.signals == [signal.SIGKILL] and [k["seen_step"] for k in killer.sent] == [5, 6]


@pytest.mark.slow
def test_verify_resume_kills_twice_and_finds_every_loss_identical(tiny_run):
    for stage in UPSTREAM:  # the fixture's token store stands for finished upstream stages
        tiny_run.mark_done(stage, _inputs(tiny_run, stage))
    res = CliRunner().invoke(app, ["verify-resume", str(tiny_run.path / "config.yaml"), "--run-dir",
                                   str(tiny_run.path), "--kills", "2", "--seed", "5", "--keep-scratch"])
    assert res.exit_code == 0, res.output
    assert "verdict: identical" in res.output and not (tiny_run.path / "curated").exists()  # nothing reran
    out = json.loads((tiny_run.path / "verify_resume.json").read_text())
    assert out["verdict"] == "identical" and out["kills_performed"] == 2 and out["steps"] == 30
    assert out["kill_steps"] == choose_kill_steps(5, 2, 30, 10)
    assert out["steps_compared"] == 30 and out["missing_steps"] == [] and out["max_abs_diff"] == 0.0
    assert out["final_weights_identical"] is True and out["replayed_events"] > 0

    killed = tiny_run.path / "verify_resume" / "killed"
    evs = list(read_events(killed / "events.jsonl"))
    restarts = [e for e in evs if e["kind"] == "restart"]
    resumed = [e for e in evs if e["kind"] == "resumed"]
    assert [e["signal"] for e in restarts] == ["SIGKILL", "SIGKILL"]  # the kills really happened
    assert [e["step"] for e in resumed] == [e["resume_step"] for e in restarts] == out["resumed_from"]
    assert all(step >= 10 for step in out["resumed_from"])  # from a checkpoint, not from scratch
    for kill, k in zip(out["kills"], out["kill_steps"]):
        assert kill["last_logged_step"] >= k and kill["resume_step"] <= kill["last_logged_step"]
    # the comparison really covers the killed run's events
    steps = [e["step"] for e in evs if e["kind"] == "train_step"]
    assert len(steps) == out["events_compared"] and sorted(set(steps)) == list(range(1, 31))
    ev = [e for e in read_events(tiny_run.path / "events.jsonl") if e["kind"] == "verify_resume"]
    assert ev[-1]["verdict"] == "identical"
