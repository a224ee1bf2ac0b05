"""Safety: the score equals an independent count, matching is whole-word, the built-in list leaves
out the words whose innocent senses fill medicine, law, fiction and scripture, the step contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.config import CurateConfig
from tokenmill.data.document import SAFETY_FIELDS, Doc, format_value
from tokenmill.data.steps.safety import BUILTIN_LIST, Safety, read_terms, toxicity

TERMS = read_terms(BUILTIN_LIST)


def _step(**safety) -> Safety:
    step = Safety(CurateConfig(safety=safety), base_dir=Path(__file__).parent)
    step.prepare(Path("."))
    step.setup(Path("."))
    return step


def _doc(text: str, bucket: str = "web") -> Doc:
    return Doc(id="d", text=text, source="s", url="u", bucket=bucket, license="l", format="text")


def test_score_equals_an_independent_count():
    text = "Well, SHIT. The build is broken again, the fucking linker! Don't panic: it's only 3 errors."
    words = [w.strip(".,!:").lower() for w in text.replace("3 ", "").split()]
    expected = sum(w in TERMS for w in words) / len(words)
    assert toxicity(text, TERMS) == (pytest.approx(expected), 2)


def test_whole_words_only():
    # Substring matching is the classic failure (Scunthorpe): none of these contains a listed word.
    clean = "The assistant passed the cockpit checks in Scunthorpe; a Matsushita engineer mishit the ball."
    assert toxicity(clean, TERMS) == (0.0, 0)
    assert toxicity("", TERMS) == (0.0, 0) and toxicity("1234 ... !!", TERMS) == (0.0, 0)


def test_builtin_list_leaves_out_words_with_innocent_senses():
    innocent = {"bastard", "whore", "ass", "cock", "pussy", "dick", "coon", "dyke", "chink", "fag", "rape",
                "sex", "anal", "penis", "vagina", "breast", "kill", "murder", "drug", "damn", "hell", "spic"}
    assert not innocent & TERMS
    assert 40 <= len(TERMS) <= 200 and all(t == t.lower() and " " not in t for t in TERMS)


def test_threshold_rule_and_signals_on_kept_documents():
    step = _step(threshold=0.1)
    assert step.name == "safety" and step.enabled()
    kept = _doc("This shit happens to everyone who writes software for a living, and it is fine.")
    assert step.process(kept) is None
    assert set(kept.safety) == set(SAFETY_FIELDS) and kept.safety["matched_terms"] == 1
    bad = _doc("Shut up, you fucking moron. Nobody gives a shit, asshole.")
    rej = step.process(bad)
    assert (rej.step, rej.rule, rej.value) == ("safety", "toxicity", format_value(bad.safety["toxicity"]))
    assert bad.safety["toxicity"] == pytest.approx(3 / 10)


def test_user_list_replaces_builtin_and_missing_list_is_an_error(tmp_path):
    (tmp_path / "words.txt").write_text("# mine\nGrumble\n\nmoan  # comment\n", encoding="utf-8")
    step = Safety(CurateConfig(safety={"word_list": "words.txt"}), base_dir=tmp_path)
    step.setup(tmp_path)
    assert step.terms == {"grumble", "moan"}
    assert step.score("grumble grumble fuck") == {"toxicity": pytest.approx(2 / 3), "matched_terms": 2,
                                                 "decided_by": "word_list", "classifier_probability": None}
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        Safety(CurateConfig(safety={"word_list": "nope.txt"}), base_dir=tmp_path).prepare(tmp_path)


def test_code_bucket_skipped():
    step = _step()
    assert not step.applies(_doc("os.kill(pid, SIGKILL)  # kill the damn zombie", bucket="code"))
    assert step.applies(_doc("prose", bucket="web"))
