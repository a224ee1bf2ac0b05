"""Slow-rank detection: per-rank read + forward seconds judged against the ranks' median, named
only after a streak (one slow interval is noise), once per episode."""

from __future__ import annotations

import pytest

from tokenmill.train.distributed import DistContext
from tokenmill.train.rank_times import FULL_LISTS_UP_TO, RankClock, SlowRanks, step_end_agreement


def test_the_clock_gives_per_step_means_and_restarts():
    clock = RankClock()
    for read, fwd in [(0.1, 1.0), (0.3, 2.0)]:
        clock.add(read, fwd)
    assert clock.take() == pytest.approx((0.2, 1.5))
    assert clock.take() == (0.0, 0.0) and clock.steps == 0


def test_outside_a_process_group_the_agreement_is_this_process():
    clock = RankClock()
    clock.add(0.5, 1.5)
    assert step_end_agreement(DistContext(), 2, clock) == (2, [(0.5, 1.5)])
    assert step_end_agreement(DistContext(), 0, None) == (0, None)


def test_a_rank_is_named_after_patience_slow_intervals_in_a_row_and_once_per_episode():
    judge = SlowRanks(margin=0.15, patience=3, hosts=["a", "b", "c", "d"])
    fast, slow = (0.01, 1.0), (0.01, 1.3)  # rank 2: 30% more forward time than the median
    named = []
    for step, ranks in enumerate([[fast, fast, slow, fast]] * 2 + [[fast] * 4] + [[fast, fast, slow, fast]] * 5):
        named += [(step, info) for kind, info in judge.judge(step, ranks) if kind == "slow_rank"]
    # intervals 0-1 slow, 2 normal (streak reset), 3.. slow: named at the third in a row (step 5), once
    assert [s for s, _ in named] == [5]
    info = named[0][1]
    assert info["rank"] == 2 and info["host"] == "c" and info["cause"] == "compute"
    assert info["ratio"] == pytest.approx(1.31 / 1.01)


def test_within_the_margin_is_not_slow_and_reads_are_named_as_the_cause():
    judge = SlowRanks(margin=0.15, patience=1)
    within = judge.judge(1, [(0.0, 1.0), (0.0, 1.1), (0.0, 1.0)])
    assert [k for k, _ in within] == ["rank_times"]
    reads = judge.judge(2, [(0.0, 1.0), (0.5, 1.0), (0.0, 1.0)])
    (slow,) = [i for k, i in reads if k == "slow_rank"]
    assert slow["rank"] == 1 and slow["cause"] == "batch reads"


def test_the_interval_summary_lists_every_rank_only_for_small_jobs():
    judge = SlowRanks(margin=0.15, patience=3)
    (kind, small), = judge.judge(1, [(0.0, 1.0), (0.1, 2.0)])
    assert kind == "rank_times" and small["forward_s"] == [1.0, 2.0] and small["slowest"][0] == {"rank": 1, "seconds": 2.1}
    (kind, big), = judge.judge(1, [(0.0, 1.0 + r / 1000) for r in range(FULL_LISTS_UP_TO + 1)])
    assert "forward_s" not in big and [s["rank"] for s in big["slowest"]] == [64, 63, 62, 61]
    assert judge.judge(1, [(0.0, 1.0)]) == []  # one rank: nothing to compare


@pytest.mark.slow
def test_a_straggling_rank_of_a_real_2_rank_job_is_named_with_its_host_and_cause(tmp_path):
    """Rank 1 reads every batch 50 ms slower (faults.slow): its read + forward seconds, gathered on
    the step-end all-reduce every 2 steps, name it after 2 slow intervals, once; rank 0 never."""
    import socket

    from tests.train.dist_helpers import events, make_run, run_ok

    run = make_run(tmp_path / "run", distributed="ddp", faults={"slow": [1, 0.05]}, rank_stats_every=2,
                   slow_rank_patience=2)
    run_ok(run)
    times = events(run, "rank_times")
    assert [e["step"] for e in times] == [2, 4, 6, 8, 10, 12]
    assert all(e["read_s"][1] >= 0.05 > e["read_s"][0] for e in times)
    (slow,) = events(run, "slow_rank")
    assert slow["rank"] == 1 and slow["step"] == 4 and slow["cause"] == "batch reads"
    assert slow["host"] == socket.gethostname() and slow["ratio"] > 1.15
