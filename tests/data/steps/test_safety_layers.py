"""Toxicity in layers: the band sends a document to the classifier and nothing else does; the
classifier is the one trained from the labelled file (same probability as an independent load);
the cache is reused until the file or the config changes; a bad file is one line naming it;
shards written before the new safety fields stay readable."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from tests.adversarial.conftest import assert_clean_error, run_cli
from tokenmill.config import CurateConfig
from tokenmill.data.classifiers import linear_classifier as lc
from tokenmill.data.classifiers.ngram_lm import tokenize
from tokenmill.data.document import DOC_SCHEMA, SAFETY_FIELDS, Doc, format_value
from tokenmill.data.steps.model_quality import read_npz
from tokenmill.data.steps.safety import CLF_FILE, SUBDIR, Safety, SafetyLabelsError, read_labelled

LABELS = Path(__file__).resolve().parents[3] / "benchmarks" / "labels" / "toxicity_train.jsonl"


def _small_labelled(path: Path, toxic: int = 40, clean: int = 120) -> Path:
    """A slice of the real label file (benchmarks/build_toxicity_labels.py): quick to train on."""
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines()]
    bad = [r for r in rows if r["label"] != "clean"][:toxic]
    good = [r for r in rows if r["label"] == "clean"][::7][:clean]
    path.write_text("".join(json.dumps(r) + "\n" for r in bad + good), encoding="utf-8")
    return path


def _step(tmp_path: Path, **safety) -> Safety:
    cfg = CurateConfig(safety={"labelled": str(_small_labelled(tmp_path / "labels.jsonl")), **safety})
    step = Safety(cfg, base_dir=tmp_path)
    step.prepare(tmp_path / "work")
    step.setup(tmp_path / "work")
    return step


def _doc(text: str) -> Doc:
    return Doc(id="d", text=text, source="s", url="u", bucket="web", license="l", format="text")


IN_BAND = "Honestly this whole thread is garbage and you are a clueless troll, shit like this is why nobody reads it anymore."
BELOW = "The committee reviewed the budget and approved the new library hours for the winter season."
ABOVE = "fuck this shit"


def test_only_documents_in_the_band_reach_the_classifier(tmp_path):
    step = _step(tmp_path, band=(0.01, 0.5), classifier_threshold=0.0)
    model = lc.LinearClassifier.from_arrays(read_npz(tmp_path / "work" / SUBDIR / CLF_FILE))
    inside, below, above = _doc(IN_BAND), _doc(BELOW), _doc(ABOVE)
    assert 0.01 <= step.score(IN_BAND)["toxicity"] <= 0.5
    rej = step.process(inside)
    p = model.score(tokenize(IN_BAND))  # the saved model, loaded independently
    assert inside.safety["decided_by"] == "classifier" and inside.safety["classifier_probability"] == pytest.approx(p)
    assert (rej.rule, rej.value) == ("toxicity_classifier", format_value(p)) and "classifier" in rej.reason
    assert step.process(below) is None
    assert below.safety == {"toxicity": 0.0, "matched_terms": 0, "decided_by": "word_list", "classifier_probability": None}
    rej = step.process(above)
    assert above.safety["decided_by"] == "word_list" and above.safety["classifier_probability"] is None
    assert (rej.rule, rej.value) == ("toxicity", format_value(2 / 3)) and "word list" in rej.reason
    assert set(inside.safety) == set(SAFETY_FIELDS)


def test_the_classifier_threshold_decides_inside_the_band(tmp_path):
    keep_all = _step(tmp_path, band=(0.01, 0.5), classifier_threshold=1.0)
    doc = _doc(IN_BAND)
    assert keep_all.process(doc) is None and doc.safety["decided_by"] == "classifier"
    # Without a labelled file the same document is judged by the word list alone (> 0.02: removed).
    alone = Safety(CurateConfig(), base_dir=tmp_path)
    alone.prepare(tmp_path / "w2")
    alone.setup(tmp_path / "w2")
    assert alone.process(_doc(IN_BAND)).rule == "toxicity"


def test_cache_is_reused_and_retrained_on_change(tmp_path):
    labels = _small_labelled(tmp_path / "labels.jsonl")
    work = tmp_path / "work"

    def prepare(**cfg) -> Safety:
        step = Safety(CurateConfig(safety={"labelled": "labels.jsonl"}, **cfg), base_dir=tmp_path)
        step.prepare(work)
        return step

    assert prepare().retrained
    before = (work / SUBDIR / CLF_FILE).read_bytes()
    mtime = (work / SUBDIR / CLF_FILE).stat().st_mtime_ns
    assert not prepare().retrained and (work / SUBDIR / CLF_FILE).stat().st_mtime_ns == mtime
    assert prepare(normalize={"fix_mojibake": False}).retrained  # the config that shapes training changed
    assert prepare().retrained
    assert (work / SUBDIR / CLF_FILE).read_bytes() == before  # same file and config: the same bytes
    with labels.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"text": "you worthless idiot, get lost", "label": "offensive"}) + "\n")
    assert prepare().retrained
    manifest = json.loads((work / SUBDIR / "manifest.json").read_text())
    assert manifest["examples"] == {"toxic": 41, "clean": 120} and 0.0 <= manifest["auc"] <= 1.0


@pytest.mark.parametrize("content, message", [
    (None, "file not found"),
    ("", "needs both toxic and clean texts (0 toxic, 0 clean)"),
    ('{"text": "a calm note", "label": "clean"}\n', "needs both toxic and clean texts (0 toxic, 1 clean)"),
    ('{"text": "a calm note", "label": "nice"}\n', ":1: needs a string 'text' and a 'label' of toxic, offensive or clean"),
    (b'{"text": "caf\xe9", "label": "clean"}\n', "not UTF-8 text"),
])
def test_unusable_labelled_file_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "tox.jsonl"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with pytest.raises(SafetyLabelsError, match="tox.jsonl") as exc:
        read_labelled(path) if content is not None else Safety(
            CurateConfig(safety={"labelled": str(path)}), tmp_path).prepare(tmp_path / "w")
    assert message in str(exc.value)


def test_cli_one_class_file_is_a_clean_error(tmp_path):
    (tmp_path / "tox.jsonl").write_text('{"text": "you idiot", "label": "toxic"}\n', encoding="utf-8")
    (tmp_path / "eval.jsonl").write_text('{"text": "fine", "toxic": false}\n', encoding="utf-8")
    result = run_cli("curate-eval", "safety", "eval.jsonl", "--set", "curate.safety.labelled=tox.jsonl", cwd=tmp_path)
    assert_clean_error(result, "tox.jsonl", "1 toxic, 0 clean", max_lines=1)


def test_band_must_hold_the_threshold():
    with pytest.raises(ValidationError, match="band"):
        CurateConfig(safety={"labelled": "x.jsonl", "band": (0.05, 0.2), "threshold": 0.02})
    CurateConfig(safety={"band": (0.05, 0.2), "threshold": 0.02})  # no classifier: the band is unused


def test_shards_written_before_the_new_fields_stay_readable(tmp_path):
    old_safety = pa.struct([pa.field("toxicity", pa.float64()), pa.field("matched_terms", pa.int64())])
    old_schema = pa.schema([f if f.name != "safety" else pa.field("safety", old_safety) for f in DOC_SCHEMA])
    doc = _doc("old text")
    doc.safety = {"toxicity": 0.5, "matched_terms": 1}
    pq.write_table(pa.Table.from_pylist([doc.row()], schema=old_schema), tmp_path / "old.parquet")
    row = pq.read_table(tmp_path / "old.parquet").to_pylist()[0]
    back = Doc.from_row(row, "text")
    assert back.safety == {"toxicity": 0.5, "matched_terms": 1}
    written = pa.Table.from_pylist([back.row()], schema=DOC_SCHEMA).to_pylist()[0]["safety"]
    assert written == {"toxicity": 0.5, "matched_terms": 1, "decided_by": None, "classifier_probability": None}


def test_a_curation_run_loads_the_classifier_in_every_worker_and_decides_alike(tmp_path):
    """The real pipeline: prepare trains in the driver, each worker loads the npz; 1 or 2 workers
    give the same decisions, and the rejected row names the pass and its score."""
    from tokenmill.config import SourceConfig
    from tokenmill.data.curate import curate
    from tokenmill.data.document import read_parts

    docs = [{"id": "band", "text": IN_BAND}, {"id": "below", "text": BELOW}, {"id": "above", "text": " ".join([ABOVE] * 3)}]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    labels = _small_labelled(tmp_path / "labels.jsonl")
    decisions = []
    for workers in (1, 2):
        cfg = CurateConfig(sources=[SourceConfig(path=str(tmp_path / "docs.jsonl"), bucket="web")], steps=["safety"],
                           safety={"labelled": str(labels), "band": (0.01, 0.5), "classifier_threshold": 0.0},
                           min_chars=5, chunk_docs=1, workers=workers, max_removal_share=1.0)
        out = tmp_path / f"out{workers}"
        curate(cfg, out, progress=False)
        rejected = {r["id"]: r for r in read_parts(out / "_rejected").to_pylist()}
        kept = {r["id"]: r for r in read_parts(out / "web").to_pylist()}
        decisions.append(({k: (r["rule"], r["value"], r["safety"]) for k, r in rejected.items()}, kept["below"]["safety"]))
    assert decisions[0] == decisions[1]
    rejected, below = decisions[0]
    assert rejected["band"][0] == "toxicity_classifier" and rejected["band"][2]["decided_by"] == "classifier"
    assert rejected["above"][:2] == ("toxicity", format_value(2 / 3)) and rejected["above"][2]["decided_by"] == "word_list"
    assert below["decided_by"] == "word_list" and below["classifier_probability"] is None
