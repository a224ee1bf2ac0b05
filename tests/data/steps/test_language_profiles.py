"""Per-language profiles: English untouched, calibration by ratio of medians, a fallback never stricter."""

from __future__ import annotations

import json

import pytest

from tokenmill.data.config import QualityConfig
from tokenmill.data.steps.language_calibration import (calibrate, calibrate_file, justext_stoplists, stop_words,
                                                 write_profiles)
from tokenmill.data.steps.language_profiles import (GOPHER_STOP_WORDS, SCALES, SHIPPED, LanguageProfile, ProfileFileError,
                                              load_profiles, rules_for)

CFG = QualityConfig()


def _english(i: int) -> str:
    return (f"Page {i}: the system keeps a copy of the data and the tools that have to run with it. "
            "It is a long line of plain prose that ends in a full stop.\n") * 6


def test_english_and_unknown_language_rules():
    en = rules_for("en", CFG, {})
    assert en.cfg == CFG and en.stop_words == frozenset(GOPHER_STOP_WORDS) and en.profile == "english"
    assert rules_for(None, CFG, {}).profile == "english"  # langid did not run: the rules as before
    assert rules_for("de", QualityConfig(language_rules=False), load_profiles()).profile == "english"


def test_fallback_is_never_stricter_than_english():
    fb = rules_for("xx", CFG, {})
    assert fb.profile == "fallback" and fb.stop_words == frozenset()
    for name, value in CFG.model_dump().items():
        loose = getattr(fb.cfg, name)
        if name.startswith("min_"):
            assert loose <= value, name
        elif name.startswith("max_") and not isinstance(value, dict):
            assert loose >= value, name
        else:
            assert loose == value, name


def test_calibrated_thresholds_scale_with_the_language():
    prof = LanguageProfile(scale={"chars": 0.5, "words": 2.0, "word_len": 0.5, "line_chars": 0.5, "newline_word": 1.5},
                           stop_words=["的", "是"], documents=20)
    r = rules_for("zh", CFG, {"zh": prof})
    assert (r.cfg.min_words, r.cfg.max_words) == (100, 200_000)
    assert (r.cfg.min_mean_word_len, r.cfg.max_mean_word_len) == (1.5, 5.0)
    assert (r.cfg.short_line_chars, r.cfg.c4_min_words_per_line) == (15, 6)
    assert r.cfg.max_newline_word_ratio == pytest.approx(0.45)
    assert r.stop_words == {"的", "是"} and r.language == "zh" and not r.english_c4
    assert (r.min_chars(200), r.min_chars(0), rules_for("en", CFG, {}).min_chars(200)) == (100, 0, 200)
    # A profile without stop words switches the rule off rather than making it impossible.
    assert rules_for("zh", CFG, {"zh": prof.model_copy(update={"stop_words": None})}).cfg.min_stop_words == 0


def test_calibration_is_the_ratio_of_medians_against_english():
    english = [_english(i) for i in range(12)]
    # The same pages with every word written twice over: twice the characters per word.
    doubled = ["\n".join(" ".join(w + w for w in line.split()) for line in t.split("\n")) for t in english]
    profiles = calibrate({"en": english, "de": doubled, "fr": english[:3]}, {"de": {"thethe", "ofof", "zz"}})
    assert set(profiles) == {"en", "de"}  # fr: fewer than MIN_DOCS documents, left to the fallback
    assert profiles["en"].scale == {k: 1.0 for k in SCALES}
    def mean_len(t: str) -> float:  # independent of the quality module: whitespace words
        return sum(map(len, t.split())) / len(t.split())

    assert profiles["de"].scale["word_len"] == pytest.approx(mean_len(doubled[0]) / mean_len(english[0]), abs=1e-4)
    assert profiles["de"].scale["word_len"] == pytest.approx(2.0, abs=1e-3)
    assert profiles["de"].scale["words"] == pytest.approx(1.0)
    assert profiles["de"].scale["chars"] == pytest.approx(len(doubled[0]) / len(english[0]), abs=1e-3)
    assert profiles["de"].stop_words == ["ofof", "thethe"]  # in every document, alphabetical; "zz" in none  # found in every document; "zz" in none
    with pytest.raises(ValueError, match="English"):
        calibrate({"de": doubled}, {})


def test_stop_words_rank_by_document_frequency_and_skip_english_and_foreign_script():
    docs = [{"и", "в", "the", "data"}, {"и", "на"}, {"и", "в"}]
    assert stop_words(docs, None, latin=False) == ["и", "в", "на"]  # no ASCII in a Cyrillic language
    assert stop_words(docs, {"и", "the"}, latin=False) == ["и"]  # English "the" never counts
    assert stop_words([{"a", "b"}], None, latin=True) == ["a", "b"]


def test_shipped_profiles_load_and_say_where_they_came_from():
    profiles = load_profiles()
    assert {"de", "fr", "ja", "zh", "ru"} <= set(profiles)
    assert all(p.documents >= 10 for p in profiles.values())
    assert profiles["zh"].scale["word_len"] < 1 < profiles["de"].scale["word_len"]
    assert "debian-handbook" in json.loads(SHIPPED.read_text())["source"]


def test_a_bad_profile_file_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"profiles": {"de": {"scale": {"words": 1.0}}}}')
    with pytest.raises(ProfileFileError, match=r"p\.json.*'de'"):
        load_profiles(bad)
    with pytest.raises(ProfileFileError, match="not a language-profile file"):
        load_profiles(tmp_path / "missing.json")


def test_calibrate_file_round_trip(tmp_path):
    ref = tmp_path / "ref.jsonl"
    rows = [{"text": _english(i), "language": "en"} for i in range(10)]
    rows += [{"text": _english(i).replace("the", "der"), "language": "de"} for i in range(10)]
    ref.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    profiles = calibrate_file(ref)
    out = tmp_path / "profiles.json"
    write_profiles(profiles, out, source=str(ref))
    assert load_profiles(out)["de"].stop_words[0] == "der"  # jusText's German list has it
    (tmp_path / "bad.jsonl").write_text('{"text": 1}\n')
    with pytest.raises(ProfileFileError, match=r"bad\.jsonl:1"):
        calibrate_file(tmp_path / "bad.jsonl")


def test_justext_lists_cover_the_shipped_languages():
    lists = justext_stoplists()
    assert {"de", "fr", "ru", "ko", "en"} <= set(lists) and "und" in lists["de"]
