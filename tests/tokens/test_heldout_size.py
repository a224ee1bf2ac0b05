"""The held-out size floors (tokens/heldout_size.py) follow from the interval target and the measured spreads."""

import math

from scipy import stats

from tokenmill.tokens.config import TokenizeConfig
from tokenmill.tokens.heldout_size import (
    MIN_HELDOUT_DOCS,
    MIN_HELDOUT_TOKENS,
    TARGET_HALF_WIDTH,
    shortfall,
    small_heldout_message,
    too_small,
)


def test_the_floors_are_what_the_stated_spreads_give_for_the_target():
    prose_spread = 0.124  # rel. standard error · √n between documents, CPython's docs (module docstring)
    docs = next(n for n in range(2, 1000) if stats.t.ppf(0.975, n - 1) * prose_spread / math.sqrt(n) <= TARGET_HALF_WIDTH)
    assert docs == MIN_HELDOUT_DOCS
    token_cv, design_effect = 0.65, 6.0
    tokens = (stats.norm.ppf(0.975) * token_cv / TARGET_HALF_WIDTH) ** 2 * design_effect
    assert tokens <= MIN_HELDOUT_TOKENS < tokens * 1.05  # rounded up to a round figure


def test_too_small_below_either_floor_only():
    assert too_small(MIN_HELDOUT_DOCS - 1, 10**6) and too_small(10**3, MIN_HELDOUT_TOKENS - 1)
    assert not too_small(MIN_HELDOUT_DOCS, MIN_HELDOUT_TOKENS)
    assert shortfall(MIN_HELDOUT_DOCS, MIN_HELDOUT_TOKENS) == ""
    assert shortfall(1, 900) == f"1 document (fewer than {MIN_HELDOUT_DOCS}) and 900 tokens (fewer than 1,000)"


def test_message_names_the_bucket_its_size_and_the_settings_to_change():
    cfg = TokenizeConfig(val_fraction=0.01, min_val_docs=2)
    line = small_heldout_message("books", 2, 1026, 200, cfg)
    assert "\n" not in line and "'books'" in line and "2 documents (fewer than 9)" in line
    assert "tokenize.val_fraction (now 0.01)" in line and "tokenize.min_val_docs (now 2)" in line
    # a bucket too small to hold out 9 documents at all: more data, not a bigger fraction
    tiny = small_heldout_message("books", 3, 5000, 4, cfg)
    assert "4 documents in all" in tiny and "val_fraction" not in tiny
