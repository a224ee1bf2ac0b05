"""Gopher rules: each rejects a crafted document with its rule and measured value; real prose passes."""

from __future__ import annotations

import pytest

from tokenmill.config import QualityConfig
from tokenmill.data.document import QUALITY_FIELDS
from tokenmill.data.quality import applies_to, check_gopher, check_length, quality_signals

# A real paragraph written by others (seed 002, §2.1): it must pass every rule.
REAL = (
    "The most common and most dangerous illusion in pretraining is to think of data as a static "
    "asset, as if you already had a few hundred GB or a few TB of text, and the only remaining "
    "step were to push it into a dataloader. In reality, pretraining data is closer to a "
    "continuously running data system. It has to answer at least four questions: where did the "
    "text come from, and what are the license and usage boundaries? What filtering, "
    "modifications, and removals did the text go through before the model ever saw it?"
)
CFG = QualityConfig()


def _prose(n_words: int) -> str:
    base = "the committee reviewed the proposal with care and decided to publish its findings".split()
    return " ".join(base[i % len(base)] for i in range(n_words))


def test_signals_match_schema_and_hand_counts():
    s = quality_signals("The cat ...\n# and the dog\n\n- with hat…")
    assert s.keys() == QUALITY_FIELDS.keys()
    assert s["n_words"] == 10 and s["n_lines"] == 3
    assert s["hash_word_ratio"] == pytest.approx(1 / 10)
    assert s["ellipsis_word_ratio"] == pytest.approx(2 / 10)
    assert s["symbol_word_ratio"] == pytest.approx(2 / 10)
    assert s["bullet_line_frac"] == pytest.approx(1 / 3)
    assert s["ellipsis_line_frac"] == pytest.approx(2 / 3)
    assert s["alpha_word_frac"] == pytest.approx(7 / 10)
    assert s["n_stop_words"] == 3  # the, and, with (distinct, case-folded)


def test_empty_text_has_zero_signals():
    s = quality_signals("")
    assert s["n_words"] == 0 and s["mean_word_len"] == 0.0 and s["alpha_word_frac"] == 0.0


def test_real_paragraph_passes():
    assert check_gopher(quality_signals(REAL), CFG) is None


@pytest.mark.parametrize("text, rule, value", [
    (_prose(20), "min_words", "20"),
    (_prose(120), None, None),
    ("the and " + " ".join(["a"] * 60), "min_mean_word_len", None),
    ("the and " + " ".join(["supercalifragilistic"] * 60), "max_mean_word_len", None),
    (_prose(60) + " #tag" * 10, "max_symbol_word_ratio", None),
    (_prose(60) + " ..." * 10, "max_symbol_word_ratio", None),
    ("\n".join("- " + _prose(12) for _ in range(12)), "max_bullet_line_frac", "1"),
    ("\n".join(_prose(14) + " and so on…" for _ in range(10)), "max_ellipsis_line_frac", "1"),
    (_prose(50) + " 12345" * 20, "min_alpha_word_frac", "0.714286"),  # 50 / 70 words
    (" ".join(["lorem", "ipsum", "dolor"] * 30), "min_stop_words", "0"),
])
def test_each_rule(text, rule, value):
    rejection = check_gopher(quality_signals(text), CFG)
    if rule is None:
        assert rejection is None
        return
    assert rejection is not None and rejection.rule == rule and rejection.step == "quality"
    if value is not None:
        assert rejection.value == value
    assert rule in rejection.reason


def test_value_is_the_measurement():
    s = quality_signals(_prose(60) + " #tag" * 12)
    rejection = check_gopher(s, CFG)
    assert rejection.rule == "max_symbol_word_ratio"
    assert float(rejection.value) == pytest.approx(12 / 72, rel=1e-5)


def test_max_words_and_thresholds_follow_config():
    cfg = QualityConfig(max_words=100)
    assert check_gopher(quality_signals(_prose(120)), cfg).rule == "max_words"
    assert check_gopher(quality_signals(_prose(20)), QualityConfig(min_words=10)) is None


def test_length_floor():
    assert check_length(199, 200).rule == "min_chars"
    assert check_length(199, 200).value == "199"
    assert check_length(200, 200) is None


def test_skip_buckets():
    assert not applies_to("code", CFG) and applies_to("web", CFG)
