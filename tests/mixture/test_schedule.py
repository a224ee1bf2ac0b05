from fractions import Fraction

import pytest

from tokenmill.mixture.schedule import SHARE_RESOLUTION, Interleave, quantize_shares

WEIGHTS = [{"a": 1.0, "b": 3.0}, {"a": 1, "b": 1, "c": 1}, {"w": 0.05, "x": 0.1, "y": 0.2, "z": 0.65},
           {"only": 2.0}, {"big": 0.999, "tiny": 0.001}]


def brute_force_order(il: Interleave, n: int) -> list[tuple[int, int]]:
    """Sort every (bucket, j) by its exact virtual time (2j+1)/(2 q_b), ties to the lower bucket."""
    items = [(Fraction(2 * j + 1, 2 * q), b, j) for b, q in enumerate(il.q) for j in range(n + 1)]
    return [(b, j) for _, b, j in sorted(items)][:n]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_closed_form_equals_the_sorted_virtual_times(weights):
    il = Interleave(weights)
    ref = brute_force_order(il, 2000)
    assert il.samples(0, 2000) == ref
    for i0, i1 in [(0, 1), (17, 18), (999, 1500), (1234, 2000)]:
        assert il.samples(i0, i1) == ref[i0:i1]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_every_prefix_holds_its_share_within_half_the_bucket_count(weights):
    il = Interleave(weights)
    bound = (len(il.q) + 1) / 2
    for b, q in enumerate(il.q):
        for n in list(range(0, 3000, 13)) + [10**9 + 7, 3 * 10**12]:  # far steps cost the same
            assert abs(il.count_before(b, n) - n * q / il.total) <= bound
    assert sum(il.count_before(b, 10**6) for b in range(len(il.q))) == 10**6


def test_position_and_count_are_inverse():
    il = Interleave({"a": 0.3, "b": 0.5, "c": 0.2})
    for b in range(3):
        for j in (0, 1, 7, 5000, 10**8):
            i = il.position(b, j)
            assert il.count_before(b, i) == j and il.count_before(b, i + 1) == j + 1


def test_shares_are_quantised_exactly_and_zero_weights_dropped():
    q = quantize_shares({"a": 1.0, "b": 3.0})
    assert q == {"a": SHARE_RESOLUTION // 4, "b": 3 * SHARE_RESOLUTION // 4}
    il = Interleave({"a": 1.0, "b": 0.0, "c": 1e-12})
    assert il.buckets == ["a", "c"] and il.q[1] == 1  # a tiny positive weight is never rounded away
    with pytest.raises(ValueError):
        Interleave({"a": 0.0})
