"""Toxicity scoring with a word list: score = listed words / words, removed above a threshold.

The built-in list (resources/toxicity_en.txt, English) holds only unambiguous obscenities and
slurs, matched as whole lowercased words, with every inflection listed: no prefix or substring
matching, and no word that has a common medical, legal, literary or religious sense. Seed 002
§2.11: "the real danger is not missing a few dirty samples. It is deleting entire classes of
valuable text" — medicine, law, crime news, fiction and code comments are full of sensitive
words, so what the list leaves out matters as much as what it holds; `tokenmill curate-eval
safety` (data.curate_eval.eval_safety) measures false positives per slice on a labelled file.
A user list (`SafetyConfig.word_list`) replaces the built-in one, same format.

Words are maximal runs of letters (apostrophes inside kept: "don't"); the score is the share of
a document's words that are listed, in [0, 1]. C4 removed any page containing one word of its
list; a share with a threshold (default 0.02, one word in fifty) tolerates the occasional
quoted insult in news or fiction. The step fills doc.safety = {toxicity, matched_terms} on
every document it applies to and removes those above the threshold (rule "toxicity").
A trained linear classifier, the seed's "lightweight text classifier", is not implemented.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenmill.data.document import Doc, Rejection, format_value
from tokenmill.data.step import DocStep

BUILTIN_LIST = Path(__file__).with_name("resources") / "toxicity_en.txt"
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")


def read_terms(path: Path) -> frozenset[str]:
    """Terms of a list file: one per line, lowercased; '#' comments and blank lines skipped."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: toxicity word list not found")
    terms = (line.split("#", 1)[0].strip().lower() for line in path.read_text(encoding="utf-8").splitlines())
    return frozenset(t for t in terms if t)


def toxicity(text: str, terms: frozenset[str]) -> tuple[float, int]:
    """(share of words that are listed terms, number of listed words found)."""
    words = _WORD.findall(text.lower())
    if not words:
        return 0.0, 0
    matched = sum(map(terms.__contains__, words))  # C-level loop: no per-word Python frame
    return matched / len(words), matched


class Safety(DocStep):
    """Fills doc.safety with the word-list toxicity; removes documents above the threshold."""

    name = "safety"
    version = "1"

    def prepare(self, work_dir: Path) -> None:
        self.setup(work_dir)  # a missing list file fails in the driver, before any work

    def setup(self, work_dir: Path) -> None:
        path = self.resolve(self.cfg.safety.word_list) if self.cfg.safety.word_list else BUILTIN_LIST
        self.terms = read_terms(path)

    def applies(self, doc: Doc) -> bool:
        return bool(doc.text) and doc.bucket not in self.cfg.safety.skip_buckets

    def score(self, text: str) -> dict[str, float | int]:
        """The doc.safety struct of a text (SAFETY_FIELDS)."""
        score, matched = toxicity(text, self.terms)
        return {"toxicity": score, "matched_terms": matched}

    def process(self, doc: Doc) -> Rejection | None:
        assert doc.text is not None
        doc.safety = self.score(doc.text)
        score, limit = doc.safety["toxicity"], self.cfg.safety.threshold
        if score > limit:
            return Rejection(
                self.name,
                "toxicity",
                format_value(score),
                f"{doc.safety['matched_terms']} listed words, toxicity {score:.4f} > threshold {limit}",
            )
        return None
