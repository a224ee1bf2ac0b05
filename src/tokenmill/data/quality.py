"""Heuristic quality filters: the length floor and the Gopher rules (Rae et al. 2021, §A.1.1).

`quality_signals` measures a text; `check_length` and `check_gopher` compare the measurements
with the config and return the first failing rule with its measured value, or None. Signals
are computed for every bucket (the report compares buckets); the Gopher rules apply only to
prose buckets: code and tables break them by design (`QualityConfig.skip_buckets`).
"""

from __future__ import annotations

import string

from tokenmill.config import QualityConfig
from tokenmill.data.document import QUALITY_FIELDS, Rejection, format_value

VERSION = "gopher-1"
LENGTH_VERSION = "1"

# Gopher: "at least two of the following English words: the, be, to, of, and, that, have, with".
STOP_WORDS: frozenset[str] = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
BULLETS: tuple[str, ...] = ("•", "●", "○", "◦", "▪", "‣", "⁃", "-", "*")
ELLIPSES: tuple[str, ...] = ("...", "…")
_PUNCT = string.punctuation + "“”‘’«»…"


def quality_signals(text: str) -> dict[str, float | int]:
    """Every Gopher measurement of a text; words are whitespace-separated tokens."""
    words = text.split()
    n_words = len(words)
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]  # blank lines are layout, not content
    n_lines = len(lines)
    per_word = 1.0 / n_words if n_words else 0.0
    per_line = 1.0 / n_lines if n_lines else 0.0
    hashes = text.count("#") * per_word
    ellipses = (text.count("...") + text.count("…")) * per_word
    signals: dict[str, float | int] = {
        "n_chars": len(text),
        "n_lines": n_lines,
        "n_words": n_words,
        "mean_word_len": sum(map(len, words)) * per_word,
        "hash_word_ratio": hashes,
        "ellipsis_word_ratio": ellipses,
        # Gopher's rule is "> 0.1 for either the hash symbol or the ellipsis": keep the worse.
        "symbol_word_ratio": max(hashes, ellipses),
        "bullet_line_frac": sum(line.startswith(BULLETS) for line in lines) * per_line,
        "ellipsis_line_frac": sum(line.endswith(ELLIPSES) for line in lines) * per_line,
        "alpha_word_frac": sum(any(c.isalpha() for c in w) for w in words) * per_word,
        "n_stop_words": len(STOP_WORDS.intersection(w.strip(_PUNCT).lower() for w in words)),
    }
    assert signals.keys() == QUALITY_FIELDS.keys()  # the Parquet schema is the contract
    return signals


def check_length(n_chars: int, min_chars: int) -> Rejection | None:
    """The length floor applies to every bucket: an almost empty document teaches nothing."""
    if n_chars < min_chars:
        return Rejection("length", "min_chars", format_value(n_chars),
                         f"{n_chars} characters < min_chars {min_chars}")
    return None


def _reject(rule: str, value: float | int, op: str, limit: float | int) -> Rejection:
    shown = format_value(value)
    return Rejection("quality", rule, shown, f"{rule.split('_', 1)[1]} {shown} {op} {rule} {limit}")


def check_gopher(signals: dict[str, float | int], cfg: QualityConfig) -> Rejection | None:
    """The first Gopher rule the signals break, in the paper's order; None when all pass."""
    s = signals
    if s["n_words"] < cfg.min_words:
        return _reject("min_words", s["n_words"], "<", cfg.min_words)
    if s["n_words"] > cfg.max_words:
        return _reject("max_words", s["n_words"], ">", cfg.max_words)
    if s["mean_word_len"] < cfg.min_mean_word_len:
        return _reject("min_mean_word_len", s["mean_word_len"], "<", cfg.min_mean_word_len)
    if s["mean_word_len"] > cfg.max_mean_word_len:
        return _reject("max_mean_word_len", s["mean_word_len"], ">", cfg.max_mean_word_len)
    if s["symbol_word_ratio"] > cfg.max_symbol_word_ratio:
        return _reject("max_symbol_word_ratio", s["symbol_word_ratio"], ">", cfg.max_symbol_word_ratio)
    if s["bullet_line_frac"] > cfg.max_bullet_line_frac:
        return _reject("max_bullet_line_frac", s["bullet_line_frac"], ">", cfg.max_bullet_line_frac)
    if s["ellipsis_line_frac"] > cfg.max_ellipsis_line_frac:
        return _reject("max_ellipsis_line_frac", s["ellipsis_line_frac"], ">", cfg.max_ellipsis_line_frac)
    if s["alpha_word_frac"] < cfg.min_alpha_word_frac:
        return _reject("min_alpha_word_frac", s["alpha_word_frac"], "<", cfg.min_alpha_word_frac)
    if s["n_stop_words"] < cfg.min_stop_words:
        return _reject("min_stop_words", s["n_stop_words"], "<", cfg.min_stop_words)
    return None


def applies_to(bucket: str, cfg: QualityConfig) -> bool:
    return bucket not in cfg.skip_buckets
