"""Per-language quality profiles: words, stop words and thresholds that fit each language.

Gopher's thresholds were set on English: 3-10 characters per word, 50-100,000 words, two of
eight English stop words. Measured on a German or Chinese page, the same signals sit elsewhere
for the same content (German words are longer; a Chinese word is two characters; no Chinese
page holds "the"), so English thresholds remove good pages because of their language: the
hidden bias of a filter. FineWeb-2 (Penedo et al. 2025) fixed this by deriving each
language's thresholds from the distribution of each signal on reference text of that language.
This module does the same, with the ratio-of-medians method: for a signal s,

    threshold_L = threshold_en x median_L(s) / median_en(s)

over calibration documents of each language (`calibrate`). On parallel text (the same pages
translated) the ratio is the language's own scale for the same content, so a translation of
an English page that passes measures inside language L's bounds by the same margin.

A profile holds:
- `scale`: the median ratios, for `chars` (characters per document: the length floor
  `curate.min_chars`; a Chinese page says in half the characters what its English original says),
  `words` (n_words: min_words, max_words, C4's words per line),
  `word_len` (mean_word_len: its min and max), `line_chars` (characters per line: FineWeb's
  short-line length) and `newline_word` (FineWeb's line breaks per word);
- `stop_words`: Gopher's rule needs two of eight very common words. English keeps Gopher's
  eight. Elsewhere: the eight words of the language's jusText stop list found in the most
  calibration documents; for a language without a jusText list (Chinese, Japanese), the eight
  most document-frequent words written in its own script. Two of them are required, as in English.

Languages without a profile (and the undetermined "und") get the fallback: English's thresholds
with the rules that depend on the language's vocabulary or word shape switched off (stop words,
mean word length): a subset of English's rules, never stricter. C4's end-of-sentence marks
include every script's terminal punctuation for every language but English, whose rules stay
exactly C4's.

The shipped profiles (`data/steps/resources/language_profiles.json`) come from the Debian
Administrator's Handbook in 23 languages (`fetch_real_corpora.sh`: web_html/debian-handbook),
the half of its pages whose file name hashes even; the other half and the Debian Reference and
installation guide are the held-out check (benchmarks/bench_quality_languages.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pydantic import BaseModel, Field

from tokenmill import json_limits
from tokenmill.data.config import QualityConfig
from tokenmill.errors import UserError

SHIPPED = Path(__file__).with_name("resources") / "language_profiles.json"
ENGLISH = "en"
SCALES: tuple[str, ...] = ("chars", "words", "word_len", "line_chars", "newline_word")
N_STOP_WORDS = 8
# Gopher: "at least two of the following English words: the, be, to, of, and, that, have, with".
GOPHER_STOP_WORDS: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")


class LanguageProfile(BaseModel):
    """One language's measured scale against English, and its stop words."""

    scale: dict[str, float] = Field(..., description="Signal -> median in this language / median in English.")
    stop_words: list[str] | None = Field(None, description="Gopher's stop-word rule's words; None: the rule is off.")
    documents: int = Field(0, description="Calibration documents the profile was measured on.")


class ProfileFileError(UserError, ValueError):
    """A language-profile file that cannot be used; the message names the file and the problem."""


def load_profiles(path: str | Path | None = None) -> dict[str, LanguageProfile]:
    """Profiles by ISO code from a calibration file (None: the shipped file)."""
    file = Path(path) if path else SHIPPED
    try:
        raw = json_limits.load_file(file)
        profiles = {lang: LanguageProfile.model_validate(p) for lang, p in raw["profiles"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ProfileFileError(f"{file}: not a language-profile file ({e})") from e
    for lang, p in profiles.items():
        if set(p.scale) != set(SCALES) or any(v <= 0 for v in p.scale.values()):
            raise ProfileFileError(f"{file}: profile {lang!r} needs positive scales {', '.join(SCALES)}")
    return profiles


@dataclass(frozen=True, slots=True)
class LanguageRules:
    """What the quality rules use for one language."""

    language: str | None  # segmentation (data/steps/segment.py); None: whitespace words
    cfg: QualityConfig  # thresholds scaled to the language
    stop_words: frozenset[str]  # empty: the stop-word rule is off
    english_c4: bool  # C4's own end marks (English), or every script's
    profile: str  # "english", "calibrated" or "fallback"
    chars_scale: float = 1.0  # the length floor (curate.min_chars) is multiplied by this

    def min_chars(self, floor: int) -> int:
        return max(1, round(floor * self.chars_scale)) if floor else 0


def _scaled(cfg: QualityConfig, scale: Mapping[str, float]) -> QualityConfig:
    w, wl = scale["words"], scale["word_len"]
    return cfg.model_copy(
        update={
            "min_words": max(1, round(cfg.min_words * w)),
            "max_words": round(cfg.max_words * w),
            "c4_min_words_per_line": max(1, round(cfg.c4_min_words_per_line * w)),
            "min_mean_word_len": cfg.min_mean_word_len * wl,
            "max_mean_word_len": cfg.max_mean_word_len * wl,
            "short_line_chars": max(1, round(cfg.short_line_chars * scale["line_chars"])),
            "max_newline_word_ratio": cfg.max_newline_word_ratio * scale["newline_word"],
        }
    )


def rules_for(language: str | None, cfg: QualityConfig, profiles: Mapping[str, LanguageProfile]) -> LanguageRules:
    """English rules for English (and for documents langid did not run on), a calibrated
    profile's for its language, the fallback (never stricter than English) for the rest."""
    if language in (None, ENGLISH) or not cfg.language_rules:
        return LanguageRules(None, cfg, frozenset(GOPHER_STOP_WORDS), True, "english")
    profile = profiles.get(language)
    if profile is None:
        loose = cfg.model_copy(update={"min_stop_words": 0, "min_mean_word_len": 0.0, "max_mean_word_len": float("inf")})
        return LanguageRules(language, loose, frozenset(), False, "fallback")
    scaled = _scaled(cfg, profile.scale)
    if not profile.stop_words:
        scaled = scaled.model_copy(update={"min_stop_words": 0})
    return LanguageRules(language, scaled, frozenset(profile.stop_words or ()), False, "calibrated", profile.scale["chars"])


# --------------------------------------------------------------------------- calibration
