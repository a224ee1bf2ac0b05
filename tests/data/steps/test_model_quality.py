"""The model_quality step: trained once, idempotent and byte-deterministic, never unpickles,
scores reference-like prose above boilerplate, tiers by cut-points, removes only when asked."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from pydoc_data.topics import topics

from tokenmill.config import CurateConfig, ModelQualityConfig
from tokenmill.data.steps import model_quality as mq
from tokenmill.data.document import MODEL_QUALITY_FIELDS, Doc

from tests.data.page_chrome import CHROME

HELD_OUT = ("for", "while", "with")
NAV_DUMP = "\n".join([
    "Navigation", "index", "modules |", "next |", "previous |", "Python »", "3.11.2 Documentation »",
    "The Python Language Reference »", "8. Compound statements", "Theme Auto Light Dark",
    "Table of Contents", "Previous topic", "7. Simple statements", "Next topic",
    "9. Top-level components", "This Page", "Report a Bug", "Show Source", "Quick search",
    "© Copyright 2001-2023, Python Software Foundation.", "Created using Sphinx 4.5.0.",
])


def _write_reference(root: Path) -> Path:
    """pydoc's language-reference topics as .txt, .md and one .jsonl: every reader path."""
    ref = root / "reference"
    ref.mkdir()
    names = [n for n in sorted(topics) if n not in HELD_OUT]
    for i, name in enumerate(names[:-10]):
        (ref / f"{name}.{'md' if i % 3 == 0 else 'txt'}").write_text(topics[name], encoding="utf-8")
    with open(ref / "more.jsonl", "w", encoding="utf-8") as fh:
        for name in names[-10:]:
            fh.write(json.dumps({"text": topics[name]}) + "\n")
    return ref


def _write_sources(root: Path) -> tuple[Path, Path]:
    """The crawl being curated: boilerplate records (JSONL and HTML), and a code tree."""
    web = root / "web"
    web.mkdir()
    rng = random.Random(0)
    with open(web / "pages.jsonl", "w", encoding="utf-8") as fh:
        for _ in range(300):
            fh.write(json.dumps({"text": "\n".join(rng.choices(CHROME, k=rng.randint(20, 40)))}) + "\n")
    for i in range(6):
        items = "".join(f"<p>{c}</p>" for c in rng.choices(CHROME, k=30))
        (web / f"page{i}.html").write_text(f"<html><body><nav><a href='/'>Home</a></nav><main>{items}"
                                           f"</main><script>var x = 1;</script></body></html>")
    code = root / "code"
    code.mkdir()
    for i in range(20):
        (code / f"m{i}.py").write_text("def f(x):\n    return x + 1\n" * 20)
    return web, code


def _cfg(root: Path, **mq_fields) -> CurateConfig:
    return CurateConfig.model_validate({
        "sources": [{"path": str(root / "code"), "bucket": "code"}, {"path": str(root / "web"), "bucket": "web"}],
        "model_quality": {"reference": str(root / "reference"), "negative_every": 2, "max_examples": 400,
                          **mq_fields},
    })


def _doc(text: str, bucket: str = "web") -> Doc:
    return Doc(id="x", text=text, source="test", url="test", bucket=bucket, license="x", format="text")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mq")
    _write_reference(root)
    _write_sources(root)
    return root


@pytest.fixture(scope="module")
def prepared(corpus: Path) -> tuple[mq.ModelQuality, Path]:
    work = corpus / "work"
    step = mq.ModelQuality(_cfg(corpus))
    step.prepare(work)
    step.setup(work)
    return step, work


def _files(work: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((work / mq.SUBDIR).iterdir())}


# --------------------------------------------------------------------------- pure pieces
def test_tiers_follow_cut_points():
    cuts = [100.0, 1000.0]
    assert [mq.tier_of(p, cuts) for p in (1.0, 99.99, 100.0, 999.9, 1000.0, 1e9)] == \
        ["head", "head", "middle", "middle", "tail", "tail"]
    assert mq.tier_of(None, cuts) is None


def test_config_wants_two_increasing_cut_points():
    assert ModelQualityConfig(tier_perplexities=[1.0, 2.0]).tier_perplexities == [1.0, 2.0]
    assert ModelQualityConfig().tier_perplexities is None  # default: CCNet's percentiles
    for bad in ([5.0], [10.0, 5.0], [1.0, 2.0, 3.0]):
        with pytest.raises(ValidationError, match="increasing cut-points"):
            ModelQualityConfig(tier_perplexities=bad)


def test_passages_keep_every_line_in_order():
    text = topics["class"] + "\n" + topics["for"]
    parts = mq.passages(text, 500)
    assert "\n".join(parts) == text.strip("\n") or "\n".join(parts).split() == text.split()
    assert all(len(p) >= 125 for p in parts) and len(parts) > 5


def test_even_sample_is_spread_and_deterministic():
    assert mq.even_sample(list(range(10)), 4) == [0, 3, 6, 9]
    assert mq.even_sample([1, 2], 5) == [1, 2]


def test_disabled_without_reference_and_skips_code():
    assert not mq.ModelQuality(CurateConfig()).enabled()
    step = mq.ModelQuality(CurateConfig.model_validate({"model_quality": {"reference": "x"}}))
    assert step.enabled() and not step.applies(_doc("x", "code")) and step.applies(_doc("x", "web"))


# --------------------------------------------------------------------------- trained models
def test_reference_prose_scores_above_boilerplate(prepared):
    step, _ = prepared
    good, nav = _doc(topics["for"]), _doc(NAV_DUMP)  # "for": a topic held out of the reference
    assert step.process(good) is None and step.process(nav) is None  # scoring only by default
    assert good.model_quality.keys() == MODEL_QUALITY_FIELDS.keys()
    g, n = good.model_quality, nav.model_quality
    assert g["perplexity"] * 5 < n["perplexity"]
    assert g["classifier_score"] > 0.5 > n["classifier_score"]
    assert g["tier"] == "head" and n["tier"] == mq.tier_of(n["perplexity"], step.cuts)


def test_default_tiers_are_the_random_samples_30th_and_60th_percentiles(prepared):
    step, work = prepared
    manifest = json.loads((work / mq.SUBDIR / mq.MANIFEST).read_text())
    pp = manifest["random"]["perplexity"]
    assert step.cuts == [pp["p30"], pp["p60"]] and pp["p10"] <= pp["p30"] <= pp["p60"] <= pp["p90"]
    assert manifest["random"]["classifier"]["held_out"]["auc"] > 0.99
    assert manifest["lm"]["order"] == 3 and manifest["lm"]["documents"] == len(topics) - len(HELD_OUT)


def test_removal_rules_when_thresholds_are_set(corpus, prepared):
    _, work = prepared
    good_pp = prepared[0].lm.perplexity(mq.ngram_lm.tokenize(topics["while"]))
    step = mq.ModelQuality(_cfg(corpus, max_perplexity=good_pp * 2, tier_perplexities=[10.0, 20.0]))
    step.setup(work)
    assert step.process(_doc(topics["while"])) is None
    nav = _doc(NAV_DUMP)
    rejection = step.process(nav)
    assert (rejection.step, rejection.rule) == ("model_quality", "perplexity")
    assert rejection.value == mq.format_value(nav.model_quality["perplexity"]) and "max_perplexity" in rejection.reason
    assert nav.model_quality["tier"] == "tail"  # signals stay on the removed document

    step = mq.ModelQuality(_cfg(corpus, min_classifier_score=0.5))
    step.setup(work)
    rejection = step.process(_doc(NAV_DUMP))
    assert rejection.rule == "classifier_score" and float(rejection.value) < 0.5
    assert step.process(_doc(topics["with"])) is None


def test_random_sample_is_every_kth_record_outside_skip_buckets(corpus):
    step = mq.ModelQuality(_cfg(corpus, negative_every=3))
    texts = list(step.random_texts())
    # Records in order: 20 code files (skipped), then 6 HTML pages, then the 300 JSONL lines.
    # Every 3rd record overall: indices 0, 3, ..., of which those past the code files are kept.
    expected_positions = [i for i in range(20 + 6 + 300) if i % 3 == 0 and i >= 20]
    assert len(texts) == len(expected_positions)
    assert not any("def f(x)" in t or "<p>" in t or "var x" in t for t in texts)  # no code, HTML extracted


# --------------------------------------------------------------------------- files on disk
def test_prepare_is_idempotent(corpus, prepared):
    step, work = prepared
    before = {p.name: p.stat().st_mtime_ns for p in (work / mq.SUBDIR).iterdir()}
    again = mq.ModelQuality(_cfg(corpus))
    again.prepare(work)
    assert "train_lm_s" not in again.timings and "read_reference_s" not in again.timings
    assert {p.name: p.stat().st_mtime_ns for p in (work / mq.SUBDIR).iterdir()} == before


def test_prepare_is_deterministic(corpus, prepared):
    _, work = prepared
    other = corpus / "work2"
    mq.ModelQuality(_cfg(corpus)).prepare(other)
    first, second = _files(work), _files(other)
    assert set(first) == {mq.LM_FILE, mq.CLF_FILE, mq.MANIFEST}
    assert first == second


def test_only_stale_models_are_retrained(corpus, prepared, tmp_path):
    _, work = prepared
    root = tmp_path / "copy"
    shutil.copytree(corpus / "reference", root / "reference")
    shutil.copytree(corpus / "web", root / "web")
    shutil.copytree(corpus / "code", root / "code")
    shutil.copytree(work / mq.SUBDIR, root / "work" / mq.SUBDIR)
    base = _files(root / "work")

    step = mq.ModelQuality(_cfg(root, negative_every=3))  # the random side changed, not the LM
    step.prepare(root / "work")
    changed = _files(root / "work")
    assert "train_lm_s" not in step.timings and "train_classifier_s" in step.timings
    assert changed[mq.LM_FILE] == base[mq.LM_FILE] and changed[mq.CLF_FILE] != base[mq.CLF_FILE]

    with open(next((root / "reference").glob("*.txt")), "a", encoding="utf-8") as fh:
        fh.write("\nA new closing sentence changes the reference.\n")
    step = mq.ModelQuality(_cfg(root, negative_every=3))
    step.prepare(root / "work")
    assert "train_lm_s" in step.timings and _files(root / "work")[mq.LM_FILE] != changed[mq.LM_FILE]


def test_loading_never_unpickles(tmp_path, prepared):
    _, work = prepared
    for name in (mq.LM_FILE, mq.CLF_FILE):  # the saved models are plain arrays
        with np.load(work / mq.SUBDIR / name, allow_pickle=False) as npz:
            assert all(npz[k].dtype != object for k in npz.files)
    evil = tmp_path / "evil.npz"
    np.savez(evil, weights=np.array([{"a": 1}], dtype=object))  # an object array is a pickle
    with pytest.raises(ValueError, match="allow_pickle"):
        mq.read_npz(evil)


def test_setup_before_prepare_is_a_clear_error(tmp_path, corpus):
    with pytest.raises(FileNotFoundError, match="prepare must run first"):
        mq.ModelQuality(_cfg(corpus)).setup(tmp_path)


AUSTEN = Path("/work/real_corpora/books/austen")


@pytest.mark.skipif(not AUSTEN.is_dir(), reason="real corpora not installed (shared/corpora/fetch_real_corpora.sh)")
def test_austen_paragraph_beats_a_navigation_menu(corpus, tmp_path):
    """Reference: five Austen novels; a paragraph of the sixth scores better than page chrome."""
    cfg = _cfg(corpus, max_examples=300)
    cfg.model_quality.reference = str(AUSTEN / "[empn]*.txt")  # all but Sense and Sensibility
    step = mq.ModelQuality(cfg)
    step.prepare(tmp_path)
    step.setup(tmp_path)
    text = (AUSTEN / "sense-and-sensibility.txt").read_text(encoding="utf-8")
    paragraph = max(text.split("\n\n")[200:260], key=len)
    good, nav = _doc(paragraph), _doc(NAV_DUMP)
    step.process(good)
    step.process(nav)
    assert good.model_quality["perplexity"] * 5 < nav.model_quality["perplexity"]
    assert good.model_quality["classifier_score"] > 0.5 > nav.model_quality["classifier_score"]


# --------------------------------------------------------------------------- a labelled training file
def _write_labelled(path: Path, good: list[str], bad: list[str]) -> Path:
    rows = [{"text": t, "label": "good"} for t in good] + [{"text": t, "label": False} for t in bad]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_classifier_learns_from_a_labelled_file_and_retrains_when_it_changes(corpus, prepared, tmp_path):
    rng = random.Random(1)
    names = [n for n in sorted(topics) if n not in HELD_OUT]
    bad = ["\n".join(rng.choices(CHROME, k=30)) for _ in range(40)]
    labelled = _write_labelled(tmp_path / "labels.jsonl", [topics[n] for n in names[:40]], bad)
    work = tmp_path / "work"
    step = mq.ModelQuality(_cfg(corpus, labelled=str(labelled)))
    step.prepare(work)
    step.setup(work)
    manifest = json.loads((work / mq.SUBDIR / mq.MANIFEST).read_text())
    clf = manifest["random"]["classifier"]
    assert clf["trained_on"] == "labelled" and clf["held_out"]["auc"] > 0.95
    good, nav = _doc(topics[HELD_OUT[0]]), _doc("\n".join(CHROME))
    step.process(good)
    step.process(nav)
    assert good.model_quality["classifier_score"] > 0.5 > nav.model_quality["classifier_score"]
    # Not the reference-vs-random model of the same corpus: other training data, other weights.
    assert _files(work)[mq.CLF_FILE] != _files(prepared[1])[mq.CLF_FILE]
    assert _files(work)[mq.LM_FILE] == _files(prepared[1])[mq.LM_FILE]  # the LM still learns the reference
    before = _files(work)[mq.CLF_FILE]
    _write_labelled(labelled, [topics[n] for n in names[:30]], bad)
    again = mq.ModelQuality(_cfg(corpus, labelled=str(labelled)))
    again.prepare(work)
    assert "train_lm_s" not in again.timings and _files(work)[mq.CLF_FILE] != before


def test_a_bad_labelled_file_names_the_line(corpus, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine text of the right length, long enough", "label": "good"}\n'
                    '{"text": "another", "label": "maybe"}\n')
    step = mq.ModelQuality(_cfg(corpus, labelled=str(path)))
    with pytest.raises(mq.LabelledFileError, match=r"bad\.jsonl:2: .*'maybe'"):
        step.labelled_texts()
    only_good = _write_labelled(tmp_path / "good.jsonl", [topics[sorted(topics)[0]]], [])
    with pytest.raises(mq.LabelledFileError, match="both good and bad"):
        mq.ModelQuality(_cfg(corpus, labelled=str(only_good))).labelled_texts()
