"""The curation stage end to end: real text, every phase, resume after a real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tokenmill.config import CurateConfig, SourceConfig
from tokenmill.data import curate as curate_mod
from tokenmill.data.curate import CurationStopped, curate
from tokenmill.data.document import read_parts
from tokenmill.data.sources import VERSION as SOURCES_VERSION, SourceError


def topics() -> list[str]:
    import pydoc_data.topics as t

    return [t.topics[k] for k in sorted(t.topics) if len(t.topics[k]) > 1500]


def near_copy(text: str, every: int = 100) -> str:
    """The same text with one word in `every` changed: word-5-gram Jaccard stays high."""
    words = text.split(" ")
    return " ".join(w + "x" if i % every == 7 else w for i, w in enumerate(words))


FOOTER = "Copyright 2001-2024 Python Software Foundation. All rights reserved by the foundation."


def write_corpus(root: Path) -> dict[str, str]:
    """JSONL of real reference topics with planted exact and near duplicates, a shared footer,
    a broken line; returns the planted ids by role."""
    docs = topics()[:40]
    root.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": f"t{i}", "text": d + ("\n\n" + FOOTER if i < 15 else ""), "url": f"https://docs.example/{i}"})
             for i, d in enumerate(docs)]
    lines.append(json.dumps({"id": "exact", "text": docs[3] + "\n\n" + FOOTER}))
    lines.append(json.dumps({"id": "near", "text": near_copy(docs[5])}))
    lines.append("{not json")
    (root / "topics.jsonl").write_text("\n".join(lines) + "\n")
    (root / "eval.jsonl").write_text(json.dumps({"question": " ".join(docs[9].split()[40:80])}) + "\n")
    return {"exact": "exact", "near": "near"}


def config(root: Path, **over) -> CurateConfig:
    base = {"sources": [SourceConfig(path=str(root / "topics.jsonl"), bucket="reference")],
            "steps": ["normalize", "quality", "exact_dedup", "minhash_dedup", "line_dedup", "decontaminate"],
            "quality": {"c4": False, "fineweb": False, "gopher_repetition": False},
            "line_dedup": {"min_docs": 10},
            "decontaminate": {"eval_sets": [str(root / "eval.jsonl")]},
            "chunk_docs": 7, "workers": 1, "max_removal_share": 0.95}
    base.update(over)
    return CurateConfig.model_validate(base)


def rows(out: Path) -> dict[str, list[dict]]:
    return {d.name: read_parts(d).to_pylist() for d in sorted(out.iterdir()) if d.is_dir()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    return root


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "out"
    curate(config(corpus), out, progress=False)
    return out


def test_every_document_is_kept_or_rejected_with_its_reason(reference):
    r = rows(reference)
    kept, rejected = r["reference"], r["_rejected"]
    assert len(kept) + len(rejected) == 43  # 40 topics + exact + near + broken line
    by_rule = {x["rule"]: x for x in rejected}
    assert by_rule["bad_json"]["step"] == "read" and "topics.jsonl" in by_rule["bad_json"]["reason"]
    assert by_rule["duplicate_of"]["step"] == "exact_dedup"
    assert by_rule["near_duplicate_of"]["step"] == "minhash_dedup"
    assert "verified Jaccard" in by_rule["near_duplicate_of"]["reason"]
    assert by_rule["eval_overlap"]["step"] == "decontaminate"
    assert all(x["step"] and x["rule"] and x["value"] is not None for x in rejected)
    assert len({x["id"] for x in kept + rejected}) == len(kept) + len(rejected)  # nothing twice


def test_duplicates_point_at_the_first_copy_which_records_its_cluster(reference):
    r = rows(reference)
    kept = {json.loads(x["metadata"])["id"]: x for x in r["reference"] if x["metadata"]}
    rej = {json.loads(x["metadata"])["id"]: x for x in r["_rejected"] if x["metadata"]}
    assert rej["exact"]["value"] == kept["t3"]["id"] and kept["t3"]["dup_cluster_size"] == 2
    assert rej["near"]["value"] == kept["t5"]["id"] and kept["t5"]["dup_cluster_size"] == 2


def test_shared_footer_is_removed_inside_documents(reference):
    kept = rows(reference)["reference"]
    assert not any(FOOTER in x["text"] for x in kept)
    lineage = {s["step"] for x in kept for s in x["lineage"]}
    assert {"read", "normalize", "quality", "exact_dedup", "minhash_dedup", "line_dedup", "decontaminate"} <= lineage


def test_funnel_adds_up_and_decontamination_report(reference):
    f = json.loads((reference / "_funnel.json").read_text())
    assert f["steps"] == ["read", "normalize", "quality", "exact_dedup", "minhash_dedup", "line_dedup", "decontaminate"]
    for s in f["steps"]:
        t = f["total"][s]
        assert t["docs_in"] == t["docs_out"] + t["docs_rejected"]
    for a, b in zip(f["steps"], f["steps"][1:]):
        assert f["total"][a]["docs_out"] == f["total"][b]["docs_in"]
    assert f["total"]["read"]["docs_in"] == 43
    assert f["total"][f["steps"][-1]]["docs_out"] == len(rows(reference)["reference"])
    assert 0 < f["d_eff"]["total"]["r_dup"] < 0.2
    report = json.loads((reference / "_decontamination.json").read_text())
    (name, st), = report["eval_sets"].items()
    assert st["items_contaminated"] == 1
    assert st["docs_removed"] == 2  # topics 9 and 30 both quote the item (pydoc topics overlap)


def test_output_is_the_same_for_any_worker_count_and_chunking(corpus, reference, tmp_path):
    out = tmp_path / "w2"
    curate(config(corpus, workers=2, chunk_docs=5), out, progress=False)
    a, b = rows(reference), rows(out)
    for bucket in a:
        key = lambda x: x["id"]  # noqa: E731
        assert sorted(a[bucket], key=key) == sorted(b[bucket], key=key)


def test_ray_executor_gives_the_local_output(corpus, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    curate(config(corpus, executor="ray", workers=2), out, progress=False)
    a, b = rows(reference), rows(out)
    assert {k: sorted(x["id"] for x in v) for k, v in a.items()} == {k: sorted(x["id"] for x in v) for k, v in b.items()}
    assert sorted(x["text"] for x in a["reference"]) == sorted(x["text"] for x in b["reference"])


def test_a_step_removing_too_much_stops_the_run(corpus, tmp_path):
    cfg = config(corpus, min_chars=100_000, max_removal_share=0.5)
    with pytest.raises(CurationStopped, match=r"step 'quality' removed .* curate.max_removal_share=0.5"):
        curate(cfg, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # nothing published


def test_an_emptied_bucket_stops_the_run(corpus, tmp_path):
    """The message names the step that removed the last documents (the length floor, in quality),
    not the funnel's last step, and the rule that removed them with its count."""
    with pytest.raises(CurationStopped, match=r"bucket 'reference' has no documents left of (\d+) read: step "
                                              r"'quality' removed its last \d+ documents; most removed by "
                                              r"quality/min_chars: \d+") as stop:
        curate(config(corpus, min_chars=100_000, max_removal_share=1.0), tmp_path / "out", progress=False)
    assert "after step 'bucket'" not in str(stop.value)
    curate(config(corpus, min_chars=100_000, max_removal_share=1.0, allow_empty_bucket=True), tmp_path / "out",
           progress=False)
    assert not rows(tmp_path / "out").get("reference")


def test_missing_input_fails_before_any_work(tmp_path):
    cfg = CurateConfig(sources=[SourceConfig(path=str(tmp_path / "nope"), bucket="web")])
    with pytest.raises(SourceError, match="nope"):
        curate(cfg, tmp_path / "out", progress=False)
    assert not list(tmp_path.iterdir())


KILL_SCRIPT = """
import sys
from pathlib import Path
from tokenmill.config import CurateConfig
from tokenmill.data.curate import curate
cfg = CurateConfig.model_validate_json(Path(sys.argv[1]).read_text())
curate(cfg, Path(sys.argv[2]), progress=False)
"""


def test_killed_run_resumes_without_redoing_or_losing_documents(corpus, reference, tmp_path, monkeypatch):
    """SIGKILL once some chunks are done; the rerun keeps those chunk files untouched and ends
    with exactly the uninterrupted output."""
    cfg = config(corpus, chunk_docs=1, steps=["normalize", "quality", "model_quality", "exact_dedup",
                                              "minhash_dedup", "line_dedup", "decontaminate"])
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(cfg.model_dump_json())
    out = tmp_path / "out"
    work = tmp_path / ".out.work"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(cfg_file), str(out)])
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline and len(list(work.glob("map/*/chunk-*.done"))) < 3:
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.fail("the run finished before it could be killed")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    done_before = len(list(work.glob("map/*/chunk-*.done")))
    assert done_before >= 3
    processed = []
    real = curate_mod._map_chunk
    monkeypatch.setattr(curate_mod, "_map_chunk", lambda *a, **k: (processed.append(a[2]), real(*a, **k)))
    curate(cfg, out, progress=False)  # workers=1: in this process, so the patch sees every chunk
    assert len(processed) == 43 - done_before  # only the chunks not finished before the kill (1 doc each)
    a, b = rows(reference), rows(out)
    assert {k: sorted(x["id"] for x in v) for k, v in a.items()} == {k: sorted(x["id"] for x in v) for k, v in b.items()}
    assert not work.exists()
    f = json.loads((out / "_funnel.json").read_text())
    assert f["total"]["read"]["docs_in"] == 43


def test_cli_runs_one_step_alone_on_jsonl(corpus, tmp_path):
    from typer.testing import CliRunner

    from tokenmill.cli import app

    out = tmp_path / "only"
    res = CliRunner().invoke(app, ["curate", str(corpus / "topics.jsonl"), "-o", str(out), "--steps", "minhash_dedup",
                                   "--workers", "1"])
    assert res.exit_code == 0, res.output
    f = json.loads((out / "_funnel.json").read_text())
    assert f["steps"] == ["read", "minhash_dedup"]
    assert f["total"]["minhash_dedup"]["rejected"]["near_duplicate_of"]["docs"] >= 1
    assert pq.read_table(next((out / "web").glob("part-*.parquet"))).num_rows == f["total"]["minhash_dedup"]["docs_out"]


def test_legacy_encodings_reach_the_rows_lineage_and_funnel(tmp_path):
    """Issue 19: a Latin-1 or Shift-JIS file is decoded, not rejected; its row says how (the
    `encoding` column and a `decode` lineage step); only bytes nothing decodes are quarantined."""
    import random

    from tests.data.readers.helpers import passages

    text = passages()
    root = tmp_path / "in"
    root.mkdir()
    (root / "fr.txt").write_bytes(text["fr"].encode("latin-1"))
    (root / "ja.txt").write_bytes(text["ja"].encode("shift_jis"))
    (root / "de.txt").write_bytes(text["de"].encode("utf-8"))
    rng = random.Random(0)
    (root / "noise.txt").write_bytes(bytes(rng.randrange(0x80, 0x100) for _ in range(2000)))
    cfg = CurateConfig.model_validate({"sources": [{"path": str(root), "bucket": "web"}], "steps": ["normalize"],
                                       "workers": 1, "max_removal_share": 0.95})
    out = tmp_path / "out"
    curate(cfg, out, progress=False)
    r = rows(out)
    kept = {Path(x["url"]).name: x for x in r["web"]}
    words = lambda t: t.split()  # noqa: E731  (normalize changes only whitespace here)
    assert words(kept["fr.txt"]["text"]) == words(text["fr"]) and words(kept["ja.txt"]["text"]) == words(text["ja"])
    assert kept["fr.txt"]["encoding"]["name"] == "cp1252" and kept["fr.txt"]["encoding"]["method"] == "detected"
    assert kept["ja.txt"]["encoding"]["name"] == "cp932" and kept["ja.txt"]["encoding"]["confidence"] > 0.9
    assert kept["de.txt"]["encoding"] == {"name": "utf-8", "confidence": 1.0, "method": "utf-8"}
    assert kept["fr.txt"]["lineage"][:2] == [{"step": "read", "version": SOURCES_VERSION}, {"step": "decode", "version": "cp1252"}]
    [noise] = r["_rejected"]
    assert noise["rule"] == "undecodable" and noise["step"] == "read" and noise["encoding"] is None
    assert "noise.txt" in noise["reason"] and "no encoding decodes it cleanly" in noise["reason"]
    funnel = json.loads((out / "_funnel.json").read_text())
    assert funnel["sources"][str(root)]["encodings"] == {"cp1252": 1, "cp932": 1, "utf-8": 1}


def _curate_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`tokenmill curate ARGS` as a real process, as a user runs it."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "tokenmill", "curate", *args, "--steps", "normalize", "--workers", "1"],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)


PROSE = ("Document {i} tells of a quiet town by the river, where the baker opens at dawn and the children "
         "walk to school past the old stone bridge while the market fills with voices.")


def test_cli_reads_a_file_named_like_a_glob_as_that_file(tmp_path):
    """`tokenmill curate 'dump[1].jsonl'` curates that file (3 documents), not `dump1.jsonl` beside
    it (1), and the funnel names the file it read."""
    (tmp_path / "dump[1].jsonl").write_text("".join(json.dumps({"text": PROSE.format(i=i)}) + "\n" for i in range(3)))
    (tmp_path / "dump1.jsonl").write_text(json.dumps({"text": "the other file " + PROSE.format(i=9)}) + "\n")
    res = _curate_cli("dump[1].jsonl", "-o", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    funnel = json.loads((tmp_path / "out" / "_funnel.json").read_text())
    assert funnel["total"]["read"]["docs_in"] == 3 and funnel["total"]["normalize"]["docs_out"] == 3
    assert funnel["files_read"]["dump[1].jsonl"] == {
        "count": 1, "names": ["dump[1].jsonl"], "all_named": True,
        "sha256": __import__("hashlib").sha256(b"dump[1].jsonl\n").hexdigest()}
    assert sorted(r["text"] for r in rows(tmp_path / "out")["web"]) == [PROSE.format(i=i) for i in range(3)]
    glob_res = _curate_cli("dump[12].jsonl", "-o", "globbed", cwd=tmp_path)  # names nothing: a pattern
    assert glob_res.returncode == 0, glob_res.stderr
    assert json.loads((tmp_path / "globbed" / "_funnel.json").read_text())["files_read"]["dump[12].jsonl"]["names"] == [
        "dump1.jsonl"]


def test_cli_keeps_the_records_around_a_line_nested_too_deep(tmp_path):
    """A 4 KB JSONL line nested 2,000 levels deep between good lines: the good lines are curated,
    the deep one is one `too_deep` row of _rejected naming file:line (it was a RecursionError)."""
    lines = [json.dumps({"text": PROSE.format(i=0)}), '{"text": "x", "m": ' + "[" * 2000 + "]" * 2000 + "}",
             json.dumps({"text": PROSE.format(i=1)})]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    res = _curate_cli("in.jsonl", "-o", "out", "--set", "curate.max_removal_share=0.5", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    r = rows(tmp_path / "out")
    assert sorted(x["text"] for x in r["web"]) == [PROSE.format(i=0), PROSE.format(i=1)]
    [deep] = r["_rejected"]
    assert (deep["step"], deep["rule"], deep["value"]) == ("read", "too_deep", "2")
    assert deep["reason"] == "in.jsonl:2: line 2: JSON nested deeper than 200 levels"
    funnel = json.loads((tmp_path / "out" / "_funnel.json").read_text())
    assert funnel["total"]["read"]["rejected"] == {"too_deep": {"docs": 1, "bytes": len(lines[1]) + 1}}
