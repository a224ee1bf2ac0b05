"""The hang watchdog: silent while steps finish or while paused, fires when none finishes for
timeout_s (stacks on disk, the other ranks told through the job store), and a 2-rank job with a
rank that hangs is ended and restarted by torchrun, resuming to the undisturbed run's losses."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tokenmill.train.watchdog import HANG_EXIT, STORE_KEY, Watchdog


class DictStore:
    """The part of a c10d store the watchdog uses (check/get/set), in memory."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def get(self, key: str) -> bytes:
        return self.data[key]

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()


def _dog(tmp_path, rank=0, store=None, timeout=0.3):
    exits: list[int] = []
    hangs: list[dict] = []
    dog = Watchdog(timeout, tmp_path / "hangs", rank, on_hang=hangs.append, store=store, poll_s=0.02,
                   settle_s=0.0, exit_fn=exits.append, backstop=False)
    return dog, exits, hangs


def _stuck_in_a_read(stop: threading.Event) -> None:
    stop.wait(10)


def test_silent_while_steps_finish_and_before_the_first(tmp_path):
    dog, exits, _ = _dog(tmp_path)
    dog.start()
    try:
        time.sleep(0.5)  # no beat yet: the first step (compilation) is not watched
        for step in range(1, 8):
            dog.beat(step)
            time.sleep(0.1)
        with dog.paused():  # an evaluation longer than the timeout
            time.sleep(0.5)
        dog.beat(8)
        time.sleep(0.1)
    finally:
        dog.stop()
    assert exits == [] and not (tmp_path / "hangs").exists()


def test_no_step_for_timeout_dumps_every_threads_stack_and_tells_the_store(tmp_path):
    store = DictStore()
    dog, exits, hangs = _dog(tmp_path, rank=1, store=store)
    stop = threading.Event()
    worker = threading.Thread(target=_stuck_in_a_read, args=(stop,), name="reader")
    worker.start()
    dog.start()
    dog.beat(5)
    deadline = time.time() + 5
    while not exits and time.time() < deadline:
        time.sleep(0.02)
    stop.set()
    worker.join()
    dog.stop()
    assert exits == [HANG_EXIT]
    (info,) = hangs
    assert info["rank"] == 1 and info["step"] == 5 and info["detected_by"] == "self" and info["seconds"] >= 0.3
    text = (tmp_path / "hangs" / "attempt0-rank1.txt").read_text()
    assert "_stuck_in_a_read" in text and "no step finished for 0.3s" in text  # the stuck thread's frame
    assert json.loads(store.get(f"{STORE_KEY}/0"))["rank"] == 1


def test_a_run_of_slow_steps_is_slow_not_hung(tmp_path):
    """Steps of 0.1 s against a 0.3 s timeout: the allowance grows to 10× the longest step, so a
    0.6 s gap (6 steps' worth, past timeout_s) is not a hang; 10× past the longest step is."""
    dog, exits, _ = _dog(tmp_path, timeout=0.3)
    dog.start()
    try:
        for step in range(1, 4):
            dog.beat(step)
            time.sleep(0.1)
        dog.beat(4)
        assert dog.allowance >= 1.0
        time.sleep(0.6)
        assert exits == []  # past timeout_s, within 10× the longest step
        deadline = time.time() + 10
        while not exits and time.time() < deadline:
            time.sleep(0.05)
    finally:
        dog.stop()
    assert exits == [HANG_EXIT] and time.time() < deadline


def test_a_peer_hang_in_the_store_makes_this_rank_dump_and_exit(tmp_path):
    store = DictStore()
    dog, exits, hangs = _dog(tmp_path, rank=0, store=store, timeout=60)
    dog.start()
    dog.beat(3)
    store.set(f"{STORE_KEY}/0", json.dumps({"rank": 1, "step": 4}))
    deadline = time.time() + 5
    while not exits and time.time() < deadline:
        time.sleep(0.02)
    dog.stop()
    assert exits == [HANG_EXIT] and hangs[0]["detected_by"] == "peer" and hangs[0]["peer"]["rank"] == 1
    assert (tmp_path / "hangs" / "attempt0-rank0.txt").exists()


def test_a_restarted_group_does_not_see_the_previous_attempts_hang(tmp_path, monkeypatch):
    store = DictStore()
    store.set(f"{STORE_KEY}/0", json.dumps({"rank": 1, "step": 4}))  # attempt 0's
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    dog, exits, _ = _dog(tmp_path, store=store, timeout=60)
    dog.start()
    dog.beat(1)
    time.sleep(0.2)
    dog.stop()
    assert exits == []


# --------------------------------------------------------------------------- real processes
def _cli(run, *args: str):
    import subprocess
    import sys

    from tests.train.dist_helpers import REPO, env

    return subprocess.run([sys.executable, "-m", "tokenmill", "train", str(run.path / "config.yaml"), "--run-dir",
                           str(run.path), *args], env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd=REPO, timeout=240)


@pytest.mark.slow
def test_a_hung_rank_is_dumped_ended_and_restarted_to_the_undisturbed_losses(single, tmp_path):
    """Rank 1 stops making progress as step 6 starts (rank 0 then waits in the gradient
    all-reduce): within hang_timeout_s both ranks write their stacks and exit 4, torchrun restarts
    the group (--restarts 1), which resumes from step 4 and ends with the one-process losses."""
    from tests.train.dist_helpers import events, make_run, series

    run = make_run(tmp_path / "run", distributed="ddp", hang_timeout_s=3, faults={"hang": [6, 1]})
    t0 = time.time()
    out = _cli(run, "--nproc", "2", "--restarts", "1")
    assert out.returncode == 0, out.stdout[-8000:]
    assert time.time() - t0 < 120  # not the 60-minute collective timeout
    hangs = sorted(events(run, "hang"), key=lambda e: e["rank"])
    assert [h["rank"] for h in hangs] == [0, 1] and all(h["attempt"] == 0 for h in hangs)
    assert {h["step"] for h in hangs} == {5}  # the last step both finished
    stacks = {r: (run.path / "hangs" / f"attempt0-rank{r}.txt").read_text() for r in (0, 1)}
    assert "process_fault" in stacks[1]  # where the stuck rank was
    assert "backward" in stacks[0] or "step_loss" in stacks[0]  # rank 0: waiting for it inside the step
    (restart,) = events(run, "restart")
    assert restart["by"] == "torchrun" and restart["attempt"] == 1 and restart["resume_step"] == 4
    assert series(run) == series(single)  # steps 5 (replayed) to 12 as if nothing happened
