"""The auto perplexity gate of model_quality: a word-order test at a fixed one-sided level, in the
languages whose held-out reference passages pass it. Reference: two Austen novels (real text);
judged: shuffled words of a paragraph of a third novel, the paragraph itself, Spanish text the
reference lacks."""

from __future__ import annotations

import json
import random
import re
from statistics import NormalDist
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tokenmill.config import CurateConfig
from tokenmill.data.classifiers import word_order
from tokenmill.data.steps import model_quality as mq
from tokenmill.data.document import Doc

from tests.adversarial.conftest import run_cli

BOOKS = Path("/work/real_corpora/books")
needs_corpora = pytest.mark.skipif(not BOOKS.is_dir(), reason="real corpora not installed (shared/corpora/fetch_real_corpora.sh)")


def _cfg(root: Path, **mq_fields) -> CurateConfig:
    return CurateConfig.model_validate({
        "sources": [{"path": str(root / "web"), "bucket": "web"}],
        "model_quality": {"reference": str(root / "reference"), "classifier": False,
                          "tier_perplexities": [100.0, 1000.0], **mq_fields}})


def _doc(text: str, language: str | None = None) -> Doc:
    doc = Doc(id="x", text=text, source="test", url="test", bucket="web", license="x", format="text")
    doc.language = language
    return doc


def _shuffled(paragraph: str, seed: int = 0) -> str:
    """The paragraph's words shuffled across it; each sentence keeps its length, a capital and a full stop."""
    sentences = [s.split() for s in re.split(r"(?<=[.!?])\s+", " ".join(paragraph.split())) if s]
    pool = [re.sub(r"[^\w'-]", "", w).lower() for s in sentences for w in s]
    random.Random(seed).shuffle(pool)
    it = iter(pool)
    return " ".join(" ".join([next(it) for _ in s]).capitalize() + "." for s in sentences)


@pytest.fixture(scope="module")
def austen(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gate")
    (root / "reference").mkdir()
    (root / "web").mkdir()
    for name in ("northanger-abbey.txt", "persuasion.txt"):
        (root / "reference" / name).write_bytes((BOOKS / "austen" / name).read_bytes())
    return root


@pytest.fixture(scope="module")
def trained(austen: Path) -> tuple[mq.ModelQuality, Path]:
    step = mq.ModelQuality(_cfg(austen))
    step.prepare(austen / "work")
    step.setup(austen / "work")
    return step, austen / "work"


def _paragraph() -> str:
    text = (BOOKS / "austen" / "sense-and-sensibility.txt").read_text(encoding="utf-8")
    return max(text.split("\n\n")[200:260], key=len)


@needs_corpora
def test_calibration_tests_held_out_passages_per_language_and_shuffles_nothing(trained):
    step, work = trained
    reference, _ = step.reference_texts()
    every = [p for text in reference for p in mq.passages(text)]
    held = every[mq.HOLDOUT_EVERY - 1::mq.HOLDOUT_EVERY]  # every 10th passage, counted from 1
    judged = word_order.judged_words(step.lm, mq.JUDGED_WORDS)
    tests = [word_order.order_test(step.lm, mq.ngram_lm.tokenize(p), judged, mq.MIN_PAIRS) for p in held]
    tested = [t for t in tests if t is not None]
    manifest = json.loads((work / mq.SUBDIR / mq.MANIFEST).read_text())
    cal = manifest["calibration"]
    assert cal["statistic"] == "word_order_z" and cal["significance"] == step.mq.order_significance == 0.01
    assert cal["critical_z"] == pytest.approx(NormalDist().inv_cdf(0.99), abs=1e-6) == pytest.approx(2.326348, abs=1e-6)
    assert cal["held_out"] == len(held) and set(cal) >= {"window", "min_held_out", "min_held_out_pass"}
    en = cal["languages"]["en"]  # Austen is English: every held-out passage is identified as such
    assert (en["held_out"], en["tested"]) == (len(held), len(tested)) and en["tested"] >= step.mq.min_held_out
    assert en["passed"] == sum(t.z >= cal["critical_z"] for t in tested) and en["passed"] / en["tested"] >= 0.95
    assert en["judged"] is True and step.judged_languages == {"en"}
    assert not any("salad" in k or "quantile" in k for k in json.dumps(cal).split('"'))
    assert manifest["lm"]["passages"] == len(every)


def test_a_language_is_judged_only_with_enough_held_out_passages_that_pass():
    assert mq._language_check(30, 25, 25, 20, 0.95)["judged"] is True
    assert mq._language_check(30, 19, 19, 20, 0.95)["judged"] is False  # too few tested
    assert mq._language_check(30, 25, 23, 20, 0.95)["judged"] is False  # 0.92 of its own held-out text passes
    assert mq._language_check(0, 0, 0, 0, 0.0)["judged"] is False  # nothing tested: nothing to go on


def test_a_config_naming_the_removed_quantile_still_loads_and_says_it_is_ignored(tmp_path):
    """A run directory saved by an older tokenmill keeps loading (report, resume), with one warning."""
    with pytest.warns(UserWarning, match="perplexity_quantile no longer has an effect.*order_significance"):
        cfg = _cfg(tmp_path, perplexity_quantile=0.99)
    assert "perplexity_quantile" not in cfg.model_quality.model_dump()
    assert cfg.model_quality == _cfg(tmp_path).model_quality


@needs_corpora
def test_shuffled_paragraph_is_removed_and_the_paragraph_kept(trained):
    step, _ = trained
    paragraph = _paragraph()
    good, salad = _doc(paragraph), _doc(_shuffled(paragraph))  # no language: the step identifies it
    assert step.process(good) is None
    assert good.model_quality["perplexity_judged"] is True
    assert good.model_quality["word_order_z"] > step.critical_z
    rejection = step.process(salad)
    assert (rejection.step, rejection.rule) == ("model_quality", "perplexity")
    assert rejection.value == mq.format_value(salad.model_quality["word_order_z"])
    assert "word order z" in rejection.reason and "one-sided level 0.01" in rejection.reason
    assert salad.model_quality["perplexity"] > 0


@needs_corpora
def test_none_only_scores(austen, trained):
    _, work = trained
    step = mq.ModelQuality(_cfg(austen, max_perplexity=None))
    step.setup(work)
    salad = _doc(_shuffled(_paragraph()))
    assert step.process(salad) is None
    assert salad.model_quality["perplexity_judged"] is None and salad.model_quality["word_order_z"] < step.critical_z


@needs_corpora
def test_a_language_the_reference_lacks_is_scored_not_judged(trained):
    step, _ = trained
    verses = (BOOKS / "bible-es-rv1909" / "01-Genesis.txt").read_text(encoding="utf-8")[2000:6000]
    for text in (verses, _shuffled(verses)):
        doc = _doc(text, language="es")
        assert step.process(doc) is None
        assert doc.model_quality["perplexity_judged"] is False and doc.model_quality["perplexity"] > 0
    assert "es" not in step.judged_languages


@needs_corpora
def test_an_old_config_with_a_number_still_cuts_the_perplexity(austen, tmp_path):
    """A config written before "auto" (max_perplexity: a number) runs through the real CLI."""
    inputs = tmp_path / "in.jsonl"
    paragraph = _paragraph()
    inputs.write_text(json.dumps({"text": paragraph}) + "\n" + json.dumps({"text": _shuffled(paragraph)}) + "\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"curate:\n  model_quality:\n    reference: {austen / 'reference'}\n"
                      "    max_perplexity: 600.0\n    classifier: false\n")
    result = run_cli("curate", inputs, "-o", tmp_path / "out", "-c", config, "--steps", "model_quality")
    assert result.returncode == 0, result.stderr
    rejected = [r for p in sorted((tmp_path / "out" / "_rejected").glob("*.parquet"))
                for r in pq.read_table(p).to_pylist()]
    assert len(rejected) == 1 and rejected[0]["rule"] == "perplexity" and "max_perplexity 600.0" in rejected[0]["reason"]
    assert np.isclose(float(rejected[0]["value"]), rejected[0]["model_quality"]["perplexity"], rtol=1e-3)
    assert rejected[0]["model_quality"]["perplexity_judged"] is True and rejected[0]["text"] != paragraph


def _python_topics(root: Path) -> list[str]:
    """Python's reference topics (every Python ships them): 7 in 8 written to root/reference, the
    rest returned as held-out text; root/web is made for the config's source."""
    import pydoc_data.topics as topics

    keys = sorted(topics.topics)
    (root / "reference").mkdir()
    (root / "web").mkdir()
    for i, key in enumerate(keys):
        if i % 8:
            (root / "reference" / f"{key}.txt").write_text(topics.topics[key], encoding="utf-8")
    return [topics.topics[k] for i, k in enumerate(keys) if i % 8 == 0]


def test_the_gate_works_on_text_every_python_ships(tmp_path):
    """Without the real corpora too (CI): Python's own reference topics as the reference, a topic
    kept out of it as clean text; its shuffled words are removed, the topic is kept."""
    held = _python_topics(tmp_path)
    paragraph = max((p for text in held for p in text.split("\n\n")), key=lambda p: p.count(". "))  # the most prose
    step = mq.ModelQuality(_cfg(tmp_path, min_held_out=10))
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    assert "en" in step.judged_languages
    assert step.process(_doc(paragraph, "en")) is None
    salad = _doc(_shuffled(paragraph), "en")
    rejection = step.process(salad)
    assert rejection is not None and rejection.rule == "perplexity", salad.model_quality


def test_misspelt_text_is_removed_by_its_nonwords_and_the_text_kept(tmp_path):
    """Rule nonword_frac, without the real corpora: a held-out Python topic is kept and measured;
    the same topic with one letter changed in most of its words (our own corruption) is removed."""
    text = max(_python_topics(tmp_path), key=len)
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    misspelt = " ".join(
        w[:j] + rng.choice(letters) + w[j + 1 :] if len(w) >= 4 and w.isalpha() and rng.random() < 0.9 else w
        for w in text.split(" ")
        for j in [rng.randrange(max(1, len(w)))]
    )
    step = mq.ModelQuality(_cfg(tmp_path, min_held_out=10))
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    good, bad = _doc(text, "en"), _doc(misspelt, "en")
    assert step.process(good) is None and good.model_quality["nonword_frac"] < 0.1
    rejection = step.process(bad)
    assert rejection is not None and rejection.rule == "nonword_frac", bad.model_quality
    assert rejection.value == mq.format_value(bad.model_quality["nonword_frac"]) and "one edit" in rejection.reason
    off = mq.ModelQuality(_cfg(tmp_path, min_held_out=10, max_nonword_frac=None))
    off.setup(tmp_path / "work")
    scored = _doc(misspelt, "en")
    kept = off.process(scored)
    assert kept is None or kept.rule != "nonword_frac"  # None only scores...
    assert scored.model_quality["nonword_frac"] == bad.model_quality["nonword_frac"]  # ...and still measures
