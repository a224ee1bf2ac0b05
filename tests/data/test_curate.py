"""The curation stage end to end on a small corpus of every format."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import RunConfig
from tokenmill.data import curate as curate_mod
from tokenmill.data.curate import Settings, curate_inputs_fingerprint, process_record, run_curate
from tokenmill.data.document import DOC_SCHEMA, REJECTED_SCHEMA, RawRecord, doc_id, read_parts
from tokenmill.data.funnel import STEPS
from tokenmill.data.sources import SourceError
from tokenmill.runs import RunDir

PROSE = ("Rivers carry sediment from the mountains to the sea, and the shape of a delta records "
         "the balance between that supply and the waves that rework it. Where the supply wins, "
         "the delta grows long fingers of land; where the waves win, the coast stays smooth and "
         "the sand is spread along the shore. Engineers who build levees change that balance, "
         "and the consequences can be seen within a few decades on satellite images of the coast.")


def _article(title: str, body: str) -> str:
    return (f"<html><head><title>{title}</title></head><body>"
            "<nav><a href='/'>Home</a> | <a href='/news'>News</a> | <a href='/contact'>Contact</a></nav>"
            f"<article><h1>{title}</h1><p>{body}</p><p>{body}</p></article>"
            "<footer>Copyright Example Org. All rights reserved.</footer></body></html>")


def _corpus(root: Path) -> Path:
    web, code, ref = root / "web", root / "code", root / "ref"
    for d in (web, code, ref):
        d.mkdir(parents=True)
    (web / "a.html").write_text(_article("Deltas", PROSE))
    (web / "b.htm").write_text("<html><body><script>var x = 1;</script></body></html>")
    lines = [json.dumps({"text": PROSE.replace("Rivers", "Streams"), "url": "https://ex.org/s"}),
             "{broken json",
             json.dumps({"text": PROSE.replace("Rivers", "Streams"), "url": "https://ex.org/copy"}),
             json.dumps({"text": "too short"}),
             json.dumps({"text": " ".join(["lorem ipsum dolor sit amet"] * 30)})]
    (web / "c.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(pa.table({"text": [PROSE.replace("Rivers", "Glaciers"), None]}), web / "d.parquet")
    func = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n" * 4
    (code / "m1.py").write_text(func)
    (code / "m2.py").write_text(func)  # exact duplicate of m1
    (code / "tiny.py").write_text("x = 1\n")
    (code / "util.rs").write_text("fn main() {\n    println!(\"hello\");\n}\n" * 8)
    (ref / "notes.txt").write_text(PROSE.replace("Rivers", "Winds"))
    return root


def _run(tmp_path: Path, corpus: Path, name: str, **curate) -> RunDir:
    cfg = RunConfig.model_validate({"name": name, "root": str(tmp_path / "runs"), "curate": {
        "sources": [
            {"kind": "files", "path": str(corpus / "web"), "bucket": "web", "license": "CC-BY-4.0"},
            {"kind": "files", "path": str(corpus / "code"), "bucket": "code"},
            {"kind": "files", "path": str(corpus / "ref" / "*.txt"), "bucket": "reference"},
            {"kind": "python_stdlib", "part": "reference", "bucket": "reference", "max_docs": 6},
        ], **curate}})
    return RunDir.create(cfg)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("curate")
    corpus = _corpus(tmp / "corpus")
    one = _run(tmp, corpus, "w1", workers=1, shard_docs=2)
    two = _run(tmp, corpus, "w2", workers=2, shard_docs=2)
    return (one, run_curate(one, progress=False)), (two, run_curate(two, progress=False)), corpus


def _tables(run: RunDir) -> dict[str, pa.Table]:
    out = run.path / "curated"
    return {d.name: read_parts(d) for d in sorted(out.iterdir()) if d.is_dir()}


def test_same_output_for_any_worker_count(two_runs):
    (one, s1), (two, s2), _ = two_runs
    t1, t2 = _tables(one), _tables(two)
    assert t1.keys() == t2.keys() == {"web", "code", "reference", "_rejected"}
    for name in t1:
        assert t1[name].equals(t2[name]), name
    assert (one.path / "curated/_funnel.json").read_text() == (two.path / "curated/_funnel.json").read_text()
    assert {k: v for k, v in s1.items() if k != "seconds"} == {k: v for k, v in s2.items() if k != "seconds"}


def test_schema_and_rows(two_runs):
    (run, summary), _, corpus = two_runs
    tables = _tables(run)
    for name, table in tables.items():
        assert table.schema.equals(REJECTED_SCHEMA if name == "_rejected" else DOC_SCHEMA), name
    web = tables["web"].to_pylist()
    assert [r["url"] for r in web] == [str(corpus / "web/a.html"), "https://ex.org/s",
                                       str(corpus / "web/d.parquet") + "#0"]
    article = web[0]
    assert "Rivers carry sediment" in article["text"] and "All rights reserved" not in article["text"]
    assert article["license"] == "CC-BY-4.0" and article["bucket"] == "web"
    assert article["id"] == doc_id(str(corpus / "web"), "a.html")
    assert [s["step"] for s in article["lineage"]] == list(STEPS)
    assert article["quality"]["n_words"] > 50 and article["pii"]["email"] == 0
    assert article["language"] is None and article["language_score"] is None
    ref = tables["reference"].to_pylist()
    assert ref[0]["url"] == str(corpus / "ref/notes.txt") and ref[0]["source"] == str(corpus / "ref" / "*.txt")
    assert any(r["source"] == "python_stdlib:reference" for r in ref)
    code = {Path(r["url"]).name: r for r in tables["code"].to_pylist()}
    assert set(code) == {"m1.py", "util.rs"}
    assert code["m1.py"]["text"].startswith('def add(a, b):\n    """Return')  # indentation kept
    assert [s["step"] for s in code["m1.py"]["lineage"]] == ["read", "normalize", "length", "exact_dedup"]
    all_ids = [r["id"] for t in ("web", "code", "reference") for r in tables[t].to_pylist()]
    assert len(all_ids) == len(set(all_ids))
    assert summary["docs_out"] == len(all_ids)
    assert summary["buckets"]["web"]["docs_out"] == 3 and summary["buckets"]["web"]["parts"] == 2


def test_every_removal_is_recorded(two_runs):
    (run, summary), _, corpus = two_runs
    rejected = _tables(run)["_rejected"].to_pylist()
    by_rule = {}
    for r in rejected:
        by_rule.setdefault((r["step"], r["rule"]), []).append(r)
    bad = by_rule[("read", "bad_json")][0]
    assert bad["url"] == f"{corpus / 'web/c.jsonl'}:2" and "line 2" in bad["reason"] and bad["text"] is None
    assert by_rule[("read", "missing_field")][0]["url"].endswith("d.parquet#1")
    assert by_rule[("extract", "no_content")][0]["url"].endswith("b.htm")
    assert {Path(r["url"]).name for r in by_rule[("length", "min_chars")]} >= {"tiny.py"}
    assert ("quality", "min_stop_words") in by_rule
    dups = by_rule[("exact_dedup", "duplicate_of")]
    kept = {r["id"]: r for t in ("web", "code") for r in _tables(run)[t].to_pylist()}
    assert {Path(d["url"]).name for d in dups} == {"copy", "m2.py"}
    for d in dups:
        assert kept[d["value"]]["dup_cluster"] == d["value"]  # the kept doc names its cluster
    assert summary["docs_in"] == summary["docs_out"] + len(rejected)


def test_funnel_file_adds_up(two_runs):
    (run, _), _, _ = two_runs
    funnel = json.loads((run.path / "curated/_funnel.json").read_text())
    assert funnel["steps"] == list(STEPS)
    for scope in [funnel["total"], *funnel["buckets"].values()]:
        for i, step in enumerate(STEPS):
            c = scope[step]
            assert c["docs_in"] == c["docs_out"] + sum(r["docs"] for r in c["rejected"].values())
            if i:
                assert c["docs_in"] == scope[STEPS[i - 1]]["docs_out"]
    assert funnel["total"]["exact_dedup"]["rejected"]["duplicate_of"]["docs"] == 2
    assert funnel["buckets"]["code"]["quality"]["docs_skipped"] == funnel["buckets"]["code"]["quality"]["docs_in"]


def test_events_and_no_leftovers(two_runs):
    (run, summary), _, _ = two_runs
    events = [e for e in run.events.read() if e["stage"] == "curate"]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("source") == 4
    assert [e["step"] for e in events if e["kind"] == "step"] == list(STEPS)
    assert "funnel" in kinds
    assert not list(run.path.glob(".curated.*"))


def test_ids_stable_and_rerun_replaces(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    run = _run(tmp_path, corpus, "r", workers=1)
    run_curate(run, progress=False)
    ids = read_parts(run.path / "curated/web").column("id").to_pylist()
    (corpus / "web/a.html").unlink()
    run_curate(run, progress=False)
    after = read_parts(run.path / "curated/web").column("id").to_pylist()
    assert after == ids[1:]  # the same ids for the same documents, the removed one gone
    assert not list(run.path.glob(".curated.*"))


def test_failure_leaves_previous_output_intact(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path / "corpus")
    run = _run(tmp_path, corpus, "f", workers=1)
    run_curate(run, progress=False)
    before = (run.path / "curated/_funnel.json").read_text()

    def boom(*args, **kwargs):
        raise RuntimeError("killed mid-run")

    monkeypatch.setattr(curate_mod, "_write_buckets", boom)
    with pytest.raises(RuntimeError, match="killed"):
        run_curate(run, progress=False)
    assert (run.path / "curated/_funnel.json").read_text() == before
    assert not list(run.path.glob(".curated.*"))


def test_missing_source_fails_before_any_work(tmp_path):
    cfg = RunConfig.model_validate({"root": str(tmp_path), "curate": {"sources": [
        {"kind": "files", "path": str(tmp_path / "absent"), "bucket": "web"}]}})
    run = RunDir.create(cfg)
    with pytest.raises(SourceError, match="absent"):
        run_curate(run, progress=False)
    assert not (run.path / "curated").exists()


@pytest.mark.parametrize("bucket", ["_rejected", "a/b", ".x"])
def test_bucket_names_are_checked(tmp_path, bucket):
    (tmp_path / "a.txt").write_text("x")
    cfg = RunConfig.model_validate({"root": str(tmp_path), "curate": {"sources": [
        {"kind": "files", "path": str(tmp_path / "a.txt"), "bucket": bucket}]}})
    with pytest.raises(ValueError, match="bucket"):
        run_curate(RunDir.create(cfg), progress=False)


def test_inputs_fingerprint_follows_files(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    cfg = _run(tmp_path, corpus, "fp").config.curate
    fp = curate_inputs_fingerprint(cfg)
    assert len(fp) == 4 and fp == curate_inputs_fingerprint(cfg)
    json.dumps(fp)  # must be serialisable: RunDir hashes it
    (corpus / "code/m1.py").write_text("changed")
    assert curate_inputs_fingerprint(cfg) != fp


def test_process_record_marks_every_step():
    settings = Settings(RunConfig().curate.quality, 200)
    raw = RawRecord("s", "l", "u", "web", "MIT", "text", PROSE + "\x00  ", 10)
    out = process_record(raw, settings)
    assert out.rejection is None and [m.step for m in out.marks] == list(STEPS[:-1])
    assert out.marks[1].applied is False and out.doc.text == PROSE
    short = process_record(RawRecord("s", "l", "u", "web", "MIT", "text", "tiny", 4), settings)
    assert short.rejection.rule == "min_chars" and short.marks[-1].rule == "min_chars"
    assert short.doc.quality is not None  # rejected rows keep what was measured
