"""Calibrating per-language quality profiles from reference text (FineWeb-2's method): each
signal's median in a language over its median in English scales English's thresholds; a
language's stop words are the most common words of its jusText list in its documents.

`tokenmill quality-calibrate` writes the profiles (`write_profiles`) that
data/steps/language_profiles.py loads; this module measures the texts with the quality step's own
signals (data/steps/quality.py), which is why it is apart from the profiles the quality step reads.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping

from tokenmill import json_limits
from tokenmill.data.config import QualityConfig
from tokenmill.data.steps.language_profiles import (
    ENGLISH,
    GOPHER_STOP_WORDS,
    N_STOP_WORDS,
    SCALES,
    LanguageProfile,
    ProfileFileError,
)
from tokenmill.data.steps.quality import measure, stop_word_key
from tokenmill.data.steps.segment import words as segment
from tokenmill.ownership import temporary_name


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


def calibrate(
    texts: Mapping[str, list[str]], stoplists: Mapping[str, set[str]], cfg: QualityConfig | None = None, min_docs: int = MIN_DOCS
) -> dict[str, LanguageProfile]:
    """Profiles for every language of `texts` (ISO code -> calibration documents) with at least
    min_docs documents, English included (the reference: scale 1, Gopher's stop words).
    `stoplists`: ISO code -> stop words."""
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
LATIN_SCRIPT: frozenset[str] = frozenset(
    {
        "ca",
        "cs",
        "da",
        "de",
        "en",
        "es",
        "et",
        "fi",
        "fr",
        "hr",
        "hu",
        "id",
        "it",
        "lt",
        "lv",
        "ms",
        "nb",
        "nl",
        "nn",
        "no",
        "pl",
        "pt",
        "ro",
        "sk",
        "sl",
        "sq",
        "sv",
        "tl",
        "tr",
        "vi",
    }
)


# ISO 639-1 (as lid.176 names languages) -> the jusText stop list's file name.
JUSTEXT_NAMES: dict[str, str] = {
    "af": "Afrikaans",
    "ar": "Arabic",
    "bg": "Bulgarian",
    "bn": "Bengali",
    "ca": "Catalan",
    "cs": "Czech",
    "cy": "Welsh",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "eo": "Esperanto",
    "es": "Spanish",
    "et": "Estonian",
    "eu": "Basque",
    "fa": "Persian",
    "fi": "Finnish",
    "fr": "French",
    "ga": "Irish",
    "gl": "Galician",
    "he": "Hebrew",
    "hi": "Hindi",
    "hr": "Croatian",
    "hu": "Hungarian",
    "hy": "Armenian",
    "id": "Indonesian",
    "is": "Icelandic",
    "it": "Italian",
    "ka": "Georgian",
    "kk": "Kazakh",
    "ko": "Korean",
    "la": "Latin",
    "lt": "Lithuanian",
    "lv": "Latvian",
    "mk": "Macedonian",
    "ml": "Malayalam",
    "mr": "Marathi",
    "ms": "Malay",
    "nl": "Dutch",
    "no": "Norwegian_Bokmal",
    "nb": "Norwegian_Bokmal",
    "nn": "Norwegian_Nynorsk",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sk": "Slovak",
    "sl": "Slovenian",
    "sq": "Albanian",
    "sr": "Serbian",
    "sv": "Swedish",
    "sw": "Swahili",
    "ta": "Tamil",
    "te": "Telugu",
    "tl": "Tagalog",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "ur": "Urdu",
    "uz": "Uzbek",
    "vi": "Vietnamese",
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


def calibrate_file(
    path: Path, stoplist_dir: Path | None = None, cfg: QualityConfig | None = None, min_docs: int = MIN_DOCS
) -> dict[str, LanguageProfile]:
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
        earlier = json_limits.load_file(path).get("method") == METHOD
    except (OSError, ValueError, AttributeError):
        earlier = False
    if not earlier or path.is_symlink():
        raise ProfileFileError(
            f"{path}: exists and is not a profile file tokenmill wrote; refusing to replace it (choose another -o)"
        )


def write_profiles(profiles: Mapping[str, LanguageProfile], path: Path, source: str) -> None:
    """The calibration file: profiles by ISO code, and the data they came from; it replaces only an
    earlier calibration file, by renaming a temporary into place."""
    check_profile_target(path)
    doc = {"source": source, "method": METHOD, "profiles": {k: p.model_dump() for k, p in sorted(profiles.items())}}
    tmp = temporary_name(Path(path))
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
