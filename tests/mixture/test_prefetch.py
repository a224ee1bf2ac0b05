import threading

import pytest

from tokenmill.mixture.prefetch import Prefetcher


def make(keys, depth=2, fail_at=None):
    def produce(k: int) -> int:
        if k == fail_at:
            raise RuntimeError(f"bad key {k}")
        return k * k

    return Prefetcher(produce, iter(keys), depth=depth, order=lambda k: (k,))


def test_serves_in_order_skips_ahead_and_refuses_to_go_back():
    p = make(range(10))
    assert [p.take(k) for k in (0, 1, 4, 5)] == [0, 1, 16, 25]  # 2 and 3 were dropped
    assert p.take(3) is None  # behind the thread: the caller computes it itself
    assert p.take(6) is None  # and a closed prefetcher serves nothing more
    p.close()


def test_end_of_keys_and_errors_reach_the_caller():
    p = make([1, 2])
    assert (p.take(1), p.take(2), p.take(3)) == (1, 4, None)
    q = make([1, 2, 3], fail_at=2)
    assert q.take(1) == 1
    with pytest.raises(RuntimeError, match="bad key 2"):
        q.take(2)


def test_close_stops_a_thread_blocked_on_a_full_queue():
    before = threading.active_count()
    p = make(range(10**9), depth=1)
    p.take(0)
    p.close()
    assert threading.active_count() == before
