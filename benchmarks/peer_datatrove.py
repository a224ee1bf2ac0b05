"""datatrove's FineWeb recipe as a peer (issue 55), run in-process per document with datatrove's own
classes (datatrove 0.10.1; no executor, no writer):

  Trafilatura(favour_precision=True)   only where the input is HTML (fmt="html"), called directly
                                       (datatrove's per-page 1 s sandbox timeout is not applied)
  LanguageFilter (ft176, 0.65)         datatrove's FT176LID class, its model read from tokenmill's
                                       offline lid.176.ftz (FineWeb used lid.176.bin; nothing is
                                       downloaded; `fasteners`, its download lock, is absent and
                                       unneeded); `languages` is a parameter: FineWeb keeps ("en",),
                                       a peer on a multilingual set is given the set's languages
  FTFYFormatter                        datatrove's defaults
  GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter(filter_no_terminal_punct=False),
  FineWebQualityFilter                 FineWeb's order and settings, each given the detected
                                       language's word tokenizer (datatrove's assignment; a language
                                       whose tokenizer package is not installed, ja (SudachiPy) and
                                       ko (kiwipiepy) here, gets datatrove's WhitespaceTokenizer;
                                       datatrove assigns ft176's "zh" spaCy's multi-language "xx",
                                       its Mandarin one needing jieba, absent: no CJK word splitting)

Stop words: datatrove 0.10.1 ships only the English Gopher list; for another detected language the
peer uses spaCy's stop words of that language (spaCy is datatrove's tokenizer dependency), or the
English list where spaCy has none (`stop_words="english"` keeps the English list everywhere, as
FineWeb does). Left out, as the frozen sets judge each document alone: URLFilter (no URLs, and its
block lists are a download) and MinHash dedup (a corpus-level step; the sets hold no near-copies).
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any

import numpy as np

from datatrove.data import Document
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter, LanguageFilter)
from datatrove.pipeline.formatters import FTFYFormatter
from datatrove.utils.lid import FT176LID
from datatrove.utils.word_tokenizers import WhitespaceTokenizer, load_word_tokenizer

FINEWEB_LANGUAGES = ("en",)
_WHITESPACE = WhitespaceTokenizer()


def lid_model_path() -> str:
    """tokenmill's offline fastText lid.176 file (the model tokenmill's langid step uses)."""
    from tokenmill.data.steps.langid import model_path

    return str(model_path())


class _NumpyScores:
    """fastText as tokenmill runs it (fasttext-predict) returns plain floats where datatrove's
    FastTextLID.predict calls numpy's .item(): the same scores handed back as a numpy array."""

    def __init__(self, model: Any) -> None:
        self.inner = model

    def predict(self, text: str, k: int = -1) -> tuple[Any, np.ndarray]:
        labels, scores = self.inner.predict(text, k=k)
        return labels, np.asarray(scores, dtype=np.float64)


class LocalFT176(FT176LID):
    """datatrove's FT176LID reading the local model file instead of downloading lid.176.bin."""

    @property
    def model(self):
        if self._model is None:
            import fasttext

            self._model = _NumpyScores(fasttext.load_model(lid_model_path()))
        return self._model


def language_filter(languages: tuple[str, ...] | None) -> LanguageFilter:
    """datatrove's LanguageFilter at FineWeb's threshold, its model swapped for the local one
    (the constructor only builds the LID object; nothing is loaded until the first prediction).
    PipelineStep.__new__ refuses the class without `fasteners`, a file lock datatrove takes only
    while downloading a model (not installed here): the instance is made without that check."""
    lf = object.__new__(LanguageFilter)
    LanguageFilter.__init__(lf, languages=list(languages) if languages else None)
    lf.model = LocalFT176(lf.languages)
    return lf


@lru_cache(maxsize=None)
def tokenizer_for(lang: str) -> Any:
    """The language code datatrove assigns a tokenizer to, when that tokenizer runs here; else
    datatrove's WhitespaceTokenizer (its own fallback for languages without one)."""
    try:
        load_word_tokenizer(lang).word_tokenize("a b")
        return lang
    except (ValueError, ImportError):
        return _WHITESPACE


@lru_cache(maxsize=None)
def stop_words_for(lang: str, mode: str) -> list[str] | None:
    """None (datatrove's English list) for English or mode "english"; else spaCy's list for lang."""
    if lang == "en" or mode == "english":
        return None
    try:
        return sorted(importlib.import_module(f"spacy.lang.{lang}.stop_words").STOP_WORDS)
    except ImportError:
        return None


@lru_cache(maxsize=None)
def quality_chain(lang: str, stop_mode: str) -> tuple[Any, ...]:
    """FineWeb's four quality filters in its order and settings, for one detected language."""
    tok = tokenizer_for(lang)
    return (GopherRepetitionFilter(language=tok),
            GopherQualityFilter(stop_words=stop_words_for(lang, stop_mode), language=tok),
            C4QualityFilter(filter_no_terminal_punct=False, language=tok),
            FineWebQualityFilter(language=tok))


def _reason(step: Any, verdict: Any) -> str:
    return f"{type(step).__name__}:{verdict[1] if isinstance(verdict, tuple) else 'rejected'}"


def judge(raw: str, fmt: str, steps: dict[str, Any], stop_mode: str) -> dict[str, Any]:
    """One document through the recipe: {"outcome": "kept" | "<Step>:<reason>", "language",
    and "text" when it is kept and its text differs from the input}."""
    text = raw
    if fmt == "html":
        text = steps["extractor"].extract(raw) or ""
        if not text.strip():
            return {"outcome": "Trafilatura:empty", "language": None}
    doc = Document(text=text, id="")
    if not steps["language"].filter(doc):
        lang, lf = doc.metadata["language"], steps["language"]
        why = f"detected_{lang}" if lf.languages and lang not in lf.languages else f"score_below_{lf.language_threshold}"
        return {"outcome": f"LanguageFilter:{why}", "language": lang}
    lang = doc.metadata["language"]
    doc.text = steps["ftfy"].format(doc.text)
    for f in quality_chain(lang, stop_mode):
        verdict = f.filter(doc)
        if verdict is not True:
            return {"outcome": _reason(f, verdict), "language": lang}
    out: dict[str, Any] = {"outcome": "kept", "language": lang}
    if doc.text != raw:
        out["text"] = doc.text
    return out


def fineweb_recipe(docs: list[dict[str, str]], fmt: str = "text", languages: tuple[str, ...] | None = FINEWEB_LANGUAGES,
                   stop_words: str = "per_language") -> dict[str, dict[str, Any]]:
    """{id: judge()} for docs ({"id", "text"}; text is HTML when fmt == "html"). `languages`: the
    LanguageFilter's kept languages (FineWeb: ("en",); None keeps any language scoring > 0.65)."""
    if fmt not in ("text", "html") or stop_words not in ("per_language", "english"):
        raise ValueError(f"fmt {fmt!r} / stop_words {stop_words!r}")
    steps = {"extractor": Trafilatura(favour_precision=True), "language": language_filter(languages),
             "ftfy": FTFYFormatter()}
    return {d["id"]: judge(d["text"], fmt, steps, stop_words) for d in docs}
