"""Per-language quality profiles: words, stop words and thresholds that fit each language.

Gopher's thresholds were set on English: 3-10 characters per word, 50-100,000 words, two of
eight English stop words. Measured on a German or Chinese page, the same signals sit elsewhere
for the same content (German words are longer; a Chinese word is two characters; no Chinese
page holds "the"), so English thresholds remove good pages because of their language: the
hidden bias of seed 002 §2.4. FineWeb-2 (Penedo et al. 2025) fixed this by deriving each
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

The shipped profiles (`data/resources/language_profiles.json`) come from the Debian
Administrator's Handbook in 23 languages (`fetch_real_corpora.sh`: web_html/debian-handbook),
the half of its pages whose file name hashes even; the other half and the Debian Reference and
installation guide are the held-out check (benchmarks/bench_quality_languages.py).
"""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from pydantic import BaseModel, Field

from tokenmill.data.config import QualityConfig
from tokenmill.errors import UserError
from tokenmill.ownership import temporary_name

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
        raw = json.loads(file.read_text(encoding="utf-8"))
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

    language: str | None  # segmentation (data/segment.py); None: whitespace words
    cfg: QualityConfig  # thresholds scaled to the language
    stop_words: frozenset[str]  # empty: the stop-word rule is off
    english_c4: bool  # C4's own end marks (English), or every script's
    profile: str  # "english", "calibrated" or "fallback"
    chars_scale: float = 1.0  # the length floor (curate.min_chars) is multiplied by this

    def min_chars(self, floor: int) -> int:
        return max(1, round(floor * self.chars_scale)) if floor else 0


def _scaled(cfg: QualityConfig, scale: Mapping[str, float]) -> QualityConfig:
    w, wl = scale["words"], scale["word_len"]
    return cfg.model_copy(update={
        "min_words": max(1, round(cfg.min_words * w)),
        "max_words": round(cfg.max_words * w),
        "c4_min_words_per_line": max(1, round(cfg.c4_min_words_per_line * w)),
        "min_mean_word_len": cfg.min_mean_word_len * wl,
        "max_mean_word_len": cfg.max_mean_word_len * wl,
        "short_line_chars": max(1, round(cfg.short_line_chars * scale["line_chars"])),
        "max_newline_word_ratio": cfg.max_newline_word_ratio * scale["newline_word"],
    })


def rules_for(language: str | None, cfg: QualityConfig, profiles: Mapping[str, LanguageProfile]) -> LanguageRules:
    """English rules for English (and for documents langid did not run on), a calibrated
    profile's for its language, the fallback (never stricter than English) for the rest."""
    if language in (None, ENGLISH) or not cfg.language_rules:
        return LanguageRules(None, cfg, frozenset(GOPHER_STOP_WORDS), True, "english")
    profile = profiles.get(language)
    if profile is None:
        loose = cfg.model_copy(update={"min_stop_words": 0, "min_mean_word_len": 0.0,
                                       "max_mean_word_len": float("inf")})
        return LanguageRules(language, loose, frozenset(), False, "fallback")
    scaled = _scaled(cfg, profile.scale)
    if not profile.stop_words:
        scaled = scaled.model_copy(update={"min_stop_words": 0})
    return LanguageRules(language, scaled, frozenset(profile.stop_words or ()), False, "calibrated",
                         profile.scale["chars"])


# --------------------------------------------------------------------------- calibration
def _medians(signals: list[dict[str, float]]) -> dict[str, float]:
    per_line = [s["n_chars"] / s["n_lines"] for s in signals if s["n_lines"]]
    return {
        "chars": statistics.median(s["n_chars"] for s in signals),
        "words": statistics.median(s["n_words"] for s in signals),
        "word_len": statistics.median(s["mean_word_len"] for s in signals),
        "line_chars": statistics.median(per_line) if per_line else 0.0,
        "newline_word": statistics.median(s["newline_word_ratio"] for s in signals),
    }


def _script_word(word: str, latin: bool) -> bool:
    """A word worth counting as a stop word: has a letter, is not one of Gopher's English eight
    (English snippets in a translation must not make them another language's), and, for a
    non-Latin script, is not ASCII."""
    return any(c.isalpha() for c in word) and word not in GOPHER_STOP_WORDS and (latin or not word.isascii())


def stop_words(docs_words: Iterable[set[str]], stoplist: set[str] | None, latin: bool) -> list[str]:
    """The N_STOP_WORDS words found in the most documents: from the stop list when there is one,
    otherwise among the language's own-script words. Ties: alphabetical, for a stable file."""
    df: Counter[str] = Counter()
    for words in docs_words:
        df.update(w for w in words if _script_word(w, latin) and (stoplist is None or w in stoplist))
    ranked = sorted(df.items(), key=lambda kv: (-kv[1], kv[0]))
    return [w for w, _ in ranked[:N_STOP_WORDS]]


MIN_DOCS = 10  # a language with fewer calibration documents keeps the fallback


def calibrate(texts: Mapping[str, list[str]], stoplists: Mapping[str, set[str]],
              cfg: QualityConfig | None = None, min_docs: int = MIN_DOCS) -> dict[str, LanguageProfile]:
    """Profiles for every language of `texts` (ISO code -> calibration documents) with at least
    min_docs documents, English included (the reference: scale 1, Gopher's stop words).
    `stoplists`: ISO code -> stop words."""
    from tokenmill.data.quality import measure, stop_word_key
    from tokenmill.data.segment import words as segment

    cfg = cfg or QualityConfig()
    if ENGLISH not in texts or not texts[ENGLISH]:
        raise ValueError("calibration needs English documents: every scale is relative to English")
    english = _medians([measure(t, cfg)[0] for t in texts[ENGLISH]])
    out: dict[str, LanguageProfile] = {}
    for lang, docs in sorted(texts.items()):
        if len(docs) < min_docs:
            continue
        med = _medians([measure(t, cfg, language=lang)[0] for t in docs])
        scale = {k: round(med[k] / english[k], 4) if english[k] else 1.0 for k in SCALES}
        if lang == ENGLISH:
            out[lang] = LanguageProfile(scale=scale, stop_words=list(GOPHER_STOP_WORDS), documents=len(docs))
            continue
        latin = lang in LATIN_SCRIPT
        words = [set(map(stop_word_key, segment(t, lang))) for t in docs]
        sw = stop_words(words, stoplists.get(lang), latin)
        out[lang] = LanguageProfile(scale=scale, stop_words=sw or None, documents=len(docs))
    return out


# Languages written in the Latin script (their own-script words include ASCII ones).
LATIN_SCRIPT: frozenset[str] = frozenset({
    "ca", "cs", "da", "de", "en", "es", "et", "fi", "fr", "hr", "hu", "id", "it", "lt", "lv", "ms",
    "nb", "nl", "nn", "no", "pl", "pt", "ro", "sk", "sl", "sq", "sv", "tl", "tr", "vi"})


# ISO 639-1 (as lid.176 names languages) -> the jusText stop list's file name.
JUSTEXT_NAMES: dict[str, str] = {
    "af": "Afrikaans", "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto",
    "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian",
    "hy": "Armenian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ka": "Georgian", "kk": "Kazakh",
    "ko": "Korean", "la": "Latin", "lt": "Lithuanian", "lv": "Latvian", "mk": "Macedonian", "ml": "Malayalam",
    "mr": "Marathi", "ms": "Malay", "nl": "Dutch", "no": "Norwegian_Bokmal", "nb": "Norwegian_Bokmal",
    "nn": "Norwegian_Nynorsk", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "sw": "Swahili",
    "ta": "Tamil", "te": "Telugu", "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu",
    "uz": "Uzbek", "vi": "Vietnamese",
}


def justext_stoplists(directory: Path | None = None) -> dict[str, set[str]]:
    """ISO code -> stop words, from jusText's lists (installed with trafilatura) or a directory
    of files named as jusText names them (English.txt ...)."""
    if directory is None:
        import importlib.util

        spec = importlib.util.find_spec("justext")
        if spec is None or spec.origin is None:
            return {}
        directory = Path(spec.origin).parent / "stoplists"
    out = {}
    for iso, name in JUSTEXT_NAMES.items():
        f = directory / f"{name}.txt"
        if f.is_file():
            out[iso] = {w.strip().lower() for w in f.read_text(encoding="utf-8").splitlines() if w.strip()}
    return out


def calibrate_file(path: Path, stoplist_dir: Path | None = None, cfg: QualityConfig | None = None,
                   min_docs: int = MIN_DOCS) -> dict[str, LanguageProfile]:
    """Profiles from a JSONL file of {"text": ..., "language": ISO code} reference documents
    (languages with fewer than min_docs documents are left to the fallback)."""
    from tokenmill.data.jsonl import json_objects

    texts: dict[str, list[str]] = {}
    if not path.is_file():
        raise ProfileFileError(f"{path}: calibration file not found")
    with path.open(encoding="utf-8") as f:
        for lineno, rec in json_objects(f, path, ProfileFileError):
            if not isinstance(rec.get("text"), str) or not isinstance(rec.get("language"), str):
                raise ProfileFileError(f"{path}:{lineno}: needs a string 'text' and a string 'language'")
            texts.setdefault(rec["language"], []).append(rec["text"])
    return calibrate(texts, justext_stoplists(stoplist_dir), cfg, min_docs)


METHOD = "threshold_L = threshold_en x median_L / median_en (ratio of medians)"


def check_profile_target(path: Path) -> None:
    """Refuse (before calibrating) to replace a file that is not an earlier calibration file."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    try:
        earlier = json.loads(path.read_text(encoding="utf-8")).get("method") == METHOD
    except (OSError, ValueError, AttributeError):
        earlier = False
    if not earlier or path.is_symlink():
        raise ProfileFileError(f"{path}: exists and is not a profile file tokenmill wrote; refusing to replace it "
                               "(choose another -o)")


def write_profiles(profiles: Mapping[str, LanguageProfile], path: Path, source: str) -> None:
    """The calibration file: profiles by ISO code, and the data they came from; it replaces only an
    earlier calibration file, by renaming a temporary into place."""
    check_profile_target(path)
    doc = {"source": source, "method": METHOD, "profiles": {k: p.model_dump() for k, p in sorted(profiles.items())}}
    tmp = temporary_name(Path(path))
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
