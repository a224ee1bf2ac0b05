"""curate-eval: on the shipped labelled files the figures equal independent counts; the arithmetic
of recall and over-removal is checked on a file built to miss and over-mask; bad files name the
line; the results are JSON."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tokenmill.config import CurateConfig
from tokenmill.data.curate_eval import LabelledFileError, eval_pii, eval_safety
from tokenmill.data.steps.safety import BUILTIN_LIST, read_terms, toxicity

FIXTURES = Path(__file__).with_name("fixtures")
PII_FILE, SAFETY_FILE = FIXTURES / "pii_labelled.jsonl", FIXTURES / "safety_labelled.jsonl"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_pii_eval_on_the_real_labelled_file():
    res = eval_pii(PII_FILE, CurateConfig())
    json.dumps(res)  # the CLI prints it as JSON
    recs = _lines(PII_FILE)
    gold = Counter(s["kind"] for r in recs for s in r["pii"])
    assert {k: v["gold"] for k, v in res["by_kind"].items() if v["gold"]} == dict(gold)
    assert set(gold) == {"email", "phone", "ip", "card", "iban", "national_id", "name", "address"}
    assert all(v["recall"] == 1.0 and v["false_spans"] == 0 for k, v in res["by_kind"].items() if v["gold"] and k != "name")
    assert res["by_kind"]["name"]["recall"] == pytest.approx(9 / 10)  # "Frank Burger": two dictionary words
    by_bucket = Counter(r["bucket"] for r in recs)
    assert {b: v["docs"] for b, v in res["by_bucket"].items()} == dict(by_bucket)
    chars = sum(len(r["text"]) for r in recs)
    pii_chars = sum(s["end"] - s["start"] for r in recs for s in r["pii"])
    assert (res["total"]["chars"], res["total"]["pii_chars"]) == (chars, pii_chars)
    assert res["by_bucket"]["code"]["over_removed_chars"] == 0  # versions, dates, hex, ZIP codes kept


def test_pii_recall_and_over_removal_arithmetic(tmp_path):
    text = "mail a@example.com, call 962-7873 or 555-123-4567 on 8.8.8.8"
    lab = lambda s, kind: {"start": text.index(s), "end": text.index(s) + len(s), "kind": kind}  # noqa: E731
    # Labelled: the e-mail, the 7-digit number the detector leaves alone, and the phone labelled
    # as an IP (masked all the same: recall counts it, typed recall does not); 8.8.8.8 unlabelled.
    rows = [{"text": text, "bucket": "x", "pii": [lab("a@example.com", "email"), lab("962-7873", "phone"),
                                                   lab("555-123-4567", "ip")]},
            {"text": "nothing here", "pii": []}]
    path = tmp_path / "l.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    res = eval_pii(path, CurateConfig())
    x = res["by_bucket"]["x"]
    assert (x["gold"], x["recalled"], x["recall"]) == (3, 2, pytest.approx(2 / 3))
    pii_chars = len("a@example.com") + len("962-7873") + len("555-123-4567")
    assert x["over_removed_chars"] == len("8.8.8.8")
    assert x["over_removal"] == pytest.approx(len("8.8.8.8") / (len(text) - pii_chars))
    assert res["by_kind"]["ip"]["recall"] == 1.0 and res["by_kind"]["ip"]["typed_recall"] == 0.0
    assert res["by_kind"]["ip"]["false_spans"] == 1 and res["by_kind"]["phone"]["recall"] == 0.0
    assert res["by_bucket"]["default"]["docs"] == 1 and res["by_bucket"]["default"]["recall"] is None


def test_safety_eval_on_the_labelled_file_equals_an_independent_count():
    cfg = CurateConfig()
    res = eval_safety(SAFETY_FILE, cfg)
    json.dumps(res)
    terms = read_terms(BUILTIN_LIST)
    recs = _lines(SAFETY_FILE)
    for name, s in res["by_slice"].items():
        rows = [r for r in recs if r["slice"] == name]
        flagged = [toxicity(r["text"], terms)[0] > cfg.safety.threshold for r in rows]
        fp = sum(f and not r["toxic"] for f, r in zip(flagged, rows))
        negatives = sum(not r["toxic"] for r in rows)
        assert s["false_positives"] == fp and s["docs"] == len(rows)
        assert s["false_positive_rate"] == (fp / negatives if negatives else None)
    # Seed 002 §2.11's slices: nothing valuable removed on this file; one insult the list cannot see.
    assert all(res["by_slice"][k]["false_positive_rate"] == 0.0 for k in ("news", "medicine", "law", "code", "fiction"))
    assert res["by_slice"]["forum"]["recall"] == 0.75


def test_safety_eval_reports_false_positive_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"text": "shit shit happens", "slice": "news", "toxic": False}) + "\n"
                    + json.dumps({"text": "a calm report", "slice": "news", "toxic": False}) + "\n", encoding="utf-8")
    news = eval_safety(path, CurateConfig())["by_slice"]["news"]
    assert (news["false_positives"], news["false_positive_rate"], news["false_positive_lines"]) == (1, 0.5, [1])
    assert news["recall"] is None


@pytest.mark.parametrize("line, message", [
    ("{not json", ":1: not valid JSON"),
    ('{"slice": "news", "toxic": true}', ":1: field 'text'"),
    ('{"text": "x", "slice": "news", "toxic": "yes"}', ":1: field 'toxic'"),
])
def test_bad_safety_lines_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(LabelledFileError, match=message):
        eval_safety(path, CurateConfig())


def test_bad_pii_labels_and_missing_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('\n{"text": "abc", "pii": [{"start": 1, "end": 9, "kind": "email"}]}\n', encoding="utf-8")
    with pytest.raises(LabelledFileError, match=r"bad.jsonl:2: bad pii label"):
        eval_pii(path, CurateConfig())
    with pytest.raises(LabelledFileError, match="not found"):
        eval_pii(tmp_path / "missing.jsonl", CurateConfig())


# --------------------------------------------------------------------------- quality across languages
from tests.data.steps.test_quality import DE_PAGE, ZH_PAGE  # noqa: E402
from tokenmill.data.curate_eval import eval_quality  # noqa: E402

EN_PAGE = "\n".join([
    "The package manager is the core of every distribution and takes care of installing and upgrading.",
    "Each package holds program files, configuration files and metadata that describe what it depends on.",
    "Before an administrator installs new software, he should update the lists of packages first.",
    "When two packages conflict with each other, the system asks the user to make a decision.",
    "Configuration files that were changed are kept during an upgrade and are not lost at all.",
    "For servers stability matters more than new features, which is why many use only the stable release.",
])
NAV = "\n".join(f"Chapter {i}" for i in range(40))  # a table of contents


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def test_quality_eval_keeps_translations_alike_and_counts_independently(tmp_path):
    rows = []
    for g in range(3):
        for lang, page in (("en", EN_PAGE), ("de", DE_PAGE), ("zh", ZH_PAGE)):
            rows.append({"text": page, "language": lang, "group": f"p{g}", "low_quality": False})
            rows.append({"text": NAV, "language": lang, "group": f"nav{g}", "low_quality": True})
    path = _write(tmp_path / "parallel.jsonl", rows)
    cfg = CurateConfig(min_chars=10)
    out = eval_quality(path, cfg, min_docs=2)
    for lang in ("en", "de", "zh"):
        v = out["by_language"][lang]
        assert (v["docs"], v["kept"], v["keep_rate"]) == (6, 3, 0.5)
        assert (v["low_quality_removed"], v["good_kept"], v["gap_to_english"]) == (1.0, 1.0, 0.0)
        assert v["shared_with_english"] == 6
    assert out["spread"] == 0.0 and out["agreement"] == 1.0 and out["groups"] == 6
    before = eval_quality(path, CurateConfig(min_chars=10, quality={"language_rules": False}), min_docs=2)
    assert before["by_language"]["zh"]["kept"] == 0 and before["by_language"]["de"]["kept"] == 0
    # English rules: the German pages lack English stop words, the Chinese ones whitespace words;
    # the navigation pages fail alike in every language.
    assert before["by_language"]["de"]["top_rules"] == {"min_alpha_word_frac": 3, "min_stop_words": 3}
    assert before["by_language"]["zh"]["top_rules"] == {"min_alpha_word_frac": 3, "min_words": 3}
    assert before["by_language"]["en"]["top_rules"] == {"min_alpha_word_frac": 3}
    assert before["spread"] == 0.5 and before["agreement"] == 0.5  # the nav pages agree, the good ones do not
    assert before["by_language"]["de"]["gap_to_english"] == -50.0


def test_quality_eval_names_the_bad_line(tmp_path):
    path = _write(tmp_path / "bad.jsonl", [{"text": "x", "language": "en"}, {"text": "x", "language": "en",
                                                                           "kind": "novel"}])
    with pytest.raises(LabelledFileError, match=r"bad\.jsonl:2: kind 'novel'"):
        eval_quality(path, CurateConfig())
    with pytest.raises(LabelledFileError, match=r"bad2\.jsonl:1"):
        eval_quality(_write(tmp_path / "bad2.jsonl", [{"text": "x"}]), CurateConfig())


def test_layered_safety_eval_per_slice_equals_an_independent_count(tmp_path):
    """Every slice key the records carry is counted, for each pass, as an independent recount
    with the word list and the classifier the eval trained (the same file, trained here again)."""
    from tokenmill.data.steps.safety import Safety

    train = Path(__file__).resolve().parents[2] / "benchmarks" / "labels" / "toxicity_train.jsonl"
    rows = [json.loads(line) for line in train.read_text(encoding="utf-8").splitlines()]
    small = [r for r in rows if r["label"] != "clean"][:30] + [r for r in rows if r["label"] == "clean"][::9][:90]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in small), encoding="utf-8")
    recs = [
        {"text": "you clueless troll, shit like this is why this thread is garbage", "label": "offensive", "topic": "forum"},
        {"text": "The bastard son of the king was hanged for murder, as the law then required.", "toxic": False,
         "topic": "law", "language": "en"},
        {"text": "Fuck shit fuck.", "label": "toxic", "topic": "forum", "kind": "web"},
        {"text": "Excrement, shit: the dung of animals. See also manure.", "label": "clean", "topic": "dictionary",
         "kind": "reference"},
        {"text": "A calm note on the weather and the harvest.", "label": "clean", "language": "en"},
    ]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    cfg = CurateConfig(safety={"labelled": str(tmp_path / "train.jsonl"), "band": (0.01, 0.5)})
    res = eval_safety(path, cfg)
    json.dumps(res)
    step = Safety(cfg)
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    toxic = [r.get("toxic", r.get("label") in ("toxic", "offensive")) for r in recs]
    first = [toxicity(r["text"], step.terms)[0] > 0.02 for r in recs]
    both = [step.decide(step.score(r["text"])) is not None for r in recs]
    assert set(res["slices"]) == {"topic", "language", "kind"} and res["by_slice"] == {}
    for key, by in res["slices"].items():
        for value, s in by.items():
            rows_ = [i for i, r in enumerate(recs) if r.get(key) == value]
            for name, flags in (("first_pass", first), ("both_passes", both)):
                fp = sum(flags[i] and not toxic[i] for i in rows_)
                tp = sum(flags[i] and toxic[i] for i in rows_)
                assert (s[name]["false_positives"], s[name]["true_positives"]) == (fp, tp), (key, value, name)
            assert s["docs"] == len(rows_) and s["toxic"] == sum(toxic[i] for i in rows_)
    assert res["total"]["to_classifier"] == sum(step.in_band(toxicity(r["text"], step.terms)[0]) for r in recs) >= 1
    assert res["classifier"]["examples"] == {"toxic": 30, "clean": 90}
    from tokenmill.data.curate_eval import safety_table

    table = safety_table(res).splitlines()
    assert "FP both" in table[2] and table[-1].split()[:2] == ["TOTAL", "5"]
    assert any(line.startswith("topic=forum ") for line in table)


def test_safety_eval_slices_by_the_configs_own_topic_classifier(tmp_path):
    """With a curate.classify entry, every record is also counted under the label that classifier
    predicts (slice `classify:<name>`), so false positives per topic show without topic fields in
    the eval file; the counts equal an independent prediction with the model the classify step trains."""
    from tokenmill.data.classifiers.ngram_lm import tokenize
    from tokenmill.data.steps.classify import Classify

    topics = [{"text": f"the patient was given {w} for the infection and the fever", "label": "medicine"} for w in
              ("penicillin", "aspirin", "antibiotics", "morphine", "quinine", "iodine")]
    topics += [{"text": f"the court held that the {w} was void under the statute", "label": "law"} for w in
               ("contract", "will", "lease", "deed", "marriage", "sale")]
    (tmp_path / "topics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in topics * 3), encoding="utf-8")
    recs = [
        {"text": "The court held that the bastard child could inherit under the statute.", "label": "clean"},
        {"text": "The patient was given morphine for the pain; shit, the nurse said.", "label": "clean"},
        {"text": "Fuck shit fuck you idiot.", "label": "toxic"},
    ]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    cfg = CurateConfig(classify=[{"name": "topic", "labelled": str(tmp_path / "topics.jsonl"), "action": "tag"}])
    res = eval_safety(path, cfg)
    step = Classify(cfg)
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    model = step.models["topic"]
    predicted = [model.labels[int(model.predict_proba(tokenize(r["text"])).argmax())] for r in recs]
    assert predicted[:2] == ["law", "medicine"]
    by = res["slices"]["classify:topic"]
    assert {label: s["docs"] for label, s in by.items()} == dict(Counter(predicted))
    first = [toxicity(r["text"], read_terms(BUILTIN_LIST))[0] > 0.02 for r in recs]
    for label, s in by.items():
        rows = [i for i, p in enumerate(predicted) if p == label]
        fp = sum(first[i] and recs[i]["label"] == "clean" for i in rows)
        assert s["first_pass"]["false_positives"] == fp, label
