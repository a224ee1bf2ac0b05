import math

from tokenmill.mixture.plan import R_STAR, effective_tokens


def test_effective_tokens_follow_the_data_constrained_fit():
    assert effective_tokens(100.0, 0.5) == 50.0 and effective_tokens(100.0, 1.0) == 100.0
    four = effective_tokens(100.0, 4.0)
    assert four == 100.0 + 100.0 * R_STAR * (1 - math.exp(-3.0 / R_STAR))
    assert 360 < four < 380  # four passes are still worth ~3.7 (Muennighoff et al. 2023)
    assert effective_tokens(100.0, 1000.0) <= 100.0 * (1 + R_STAR)  # repetition saturates
    assert 1450 < effective_tokens(100.0, 40.0) < 1600  # forty passes are worth ~15
    assert effective_tokens(100.0, 3.0) < effective_tokens(100.0, 4.0)
