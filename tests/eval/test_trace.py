"""`tokenmill trace`: a planted passage is traced back to its document and the steps that trained on it.

One real run per module (curated text, tokenizer, token store; the trace index is built once),
then every test queries it: the planted document must rank first with full n-gram overlap, its
steps must equal the ones an independent look at the sampler's batches finds, a reworded
passage must still find it by embedding, and an unrelated text must hit no n-gram.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.adversarial.conftest import assert_clean_error, run_cli
from tests.conftest import real_documents
from tokenmill.config import load_config
from tokenmill.eval.contamination import ngram_hashes
from tokenmill.eval.trace import TraceError, exact_overlap, read_outputs, trace_outputs
from tokenmill.runs import RunDir

PLANT = (
    "Our release checklist says that every coroutine must close its socket before the event loop shuts down, "
    "otherwise the garbage collector reports an unclosed resource warning and the test suite fails."
)
REWORDED = (
    "The test suite fails with an unclosed resource warning from the garbage collector unless each coroutine "
    "closes its socket before shutting down the event loop."
)
UNRELATED = "Quantum chromodynamics describes the strong interaction between quarks and gluons inside hadrons."


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize

    root = tmp_path_factory.mktemp("trace")
    overrides = ["name=t", f"root={root}", "tokenizer.vocab_size=512", "tokenize.val_fraction=0.1"]
    overrides += ["tokenize.min_val_docs=1", "train.max_steps=40", "train.seq_len=64", "train.micro_batch=4", "train.grad_accum=1"]
    r = RunDir.create(load_config(None, overrides))
    docs = real_documents()
    write_sourced(r.path, {"prose": docs["prose"][:12] + [PLANT], "code": docs["code"][:2]})
    run_tokenizer(r)
    run_tokenize(r)
    return r


@pytest.fixture(scope="module")
def traced(run: RunDir) -> list[dict]:
    return trace_outputs(run, [PLANT, REWORDED, UNRELATED], top=3)


def write_sourced(root: Path, docs: dict[str, list[str]]) -> None:
    """Curated parts with the columns a source is read from (source, url)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for bucket, texts in docs.items():
        ids = [f"{bucket}-{i}" for i in range(len(texts))]
        urls = [f"file:///corpus/{bucket}/{i}.txt" for i in range(len(texts))]
        table = pa.table({"id": ids, "text": texts, "bucket": [bucket] * len(texts), "source": [f"{bucket}-src"] * len(texts), "url": urls})
        (root / "curated" / bucket).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / "curated" / bucket / "part-00000.parquet")


def planted_id(run: RunDir) -> str:
    return "prose-12"


def test_planted_document_ranks_first_with_full_overlap(run: RunDir, traced: list[dict]) -> None:
    first = traced[0]["documents"][0]
    assert first["doc_id"] == planted_id(run) and first["bucket"] == "prose"
    assert (first["source"], first["url"]) == ("prose-src", "file:///corpus/prose/12.txt")
    assert traced[0]["ngrams"] > 50 and first["ngram_overlap"] == traced[0]["ngrams"]
    assert first["similarity"] == pytest.approx(1.0, abs=1e-2)  # the text is one of its own windows
    assert all(d["ngram_overlap"] == 0 for d in traced[0]["documents"][1:])


def test_steps_equal_an_independent_look_at_the_batches(run: RunDir, traced: list[dict]) -> None:
    """The steps whose global batch held the planted document: by the replayed batch lineage (by id),
    and by the batch tokens themselves (a planted 13-gram inside a row)."""
    from tokenmill.train.replay import _loader, documents_of_steps
    from tokenmill.tokens.store import TokenStore

    first = traced[0]["documents"][0]
    by_id = documents_of_steps(run, list(range(1, 41)))
    expected = sorted(s for s, docs in by_id.items() if any(d["doc_id"] == first["doc_id"] for d in docs))
    assert expected and first["steps"] == expected and first["steps_count"] == len(expected)
    store = TokenStore(run.sub("tokens"))
    shard = store.shards("prose", "train")[0]
    planted = set(ngram_hashes(shard.doc(first["doc"]).astype(np.int64), 13).tolist())
    loader = _loader(run, store)
    seen = [s for s in range(1, 41) if any(planted & set(ngram_hashes(row.numpy(), 13).tolist()) for row in loader.batch(s, 0).tokens)]
    assert seen and set(seen) <= set(expected)  # a step holding only a few of its tokens shows no 13-gram


def test_reworded_passage_found_by_embedding_not_ngrams(run: RunDir, traced: list[dict]) -> None:
    docs = traced[1]["documents"]
    planted = next(d for d in docs if d["doc_id"] == planted_id(run))
    assert planted["similarity"] == max(d["similarity"] for d in docs) and planted["similarity"] > 0.5
    assert planted["ngram_overlap"] <= 0.1 * traced[1]["ngrams"]


def test_unrelated_text_has_no_ngram_hits(traced: list[dict]) -> None:
    assert traced[2]["ngrams"] > 0 and all(d["ngram_overlap"] == 0 for d in traced[2]["documents"])


def test_second_trace_reads_the_cached_index(run: RunDir, traced: list[dict]) -> None:
    index = run.sub("trace", "index.json")
    before = index.stat().st_mtime_ns
    assert trace_outputs(run, [PLANT], top=3)[0] == traced[0]
    assert index.stat().st_mtime_ns == before
    from tokenmill.tokens.store import TokenStore

    store = TokenStore(run.sub("tokens"))
    assert json.loads(index.read_text())["docs"] == sum(len(store.docs(b, "train")) for b in store.buckets)


def test_exact_overlap_counts_windows_token_for_token() -> None:
    doc = np.arange(40, dtype=np.int64)
    assert exact_overlap(np.arange(5, 25, dtype=np.int64), doc, 13) == 8
    assert exact_overlap(np.array([1, 2, 3] * 10, dtype=np.int64), doc, 13) == 0
    assert exact_overlap(np.arange(5, dtype=np.int64), doc, 13) == 0


def test_bad_input_is_one_clear_error(run: RunDir, tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty"):
        trace_outputs(run, ["   "])
    with pytest.raises(TraceError, match="unreadable"):
        read_outputs(tmp_path / "missing.txt")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"prompt": 1}\n')
    with pytest.raises(TraceError, match=r"bad.jsonl:2: .*'text'"):
        read_outputs(tmp_path / "bad.jsonl")
    (tmp_path / "deep.jsonl").write_text('{"text": "ok"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(TraceError, match=r"deep.jsonl:2: JSON nested deeper than 200 levels$"):
        read_outputs(tmp_path / "deep.jsonl")
    (tmp_path / "plain.txt").write_text("first output\n\nsecond output\n")
    assert read_outputs(tmp_path / "plain.txt") == ["first output", "second output"]


def test_cli_traces_a_file_as_json(run: RunDir, traced: list[dict], tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(json.dumps({"text": PLANT}) + "\n" + json.dumps({"text": UNRELATED}) + "\n")
    result = run_cli("trace", run.path, "--file", outputs, "--top", "3", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert [g["documents"] for g in got] == [traced[0]["documents"], traced[2]["documents"]]


def test_cli_tables_keep_every_id_and_source_whole_at_80_columns(run: RunDir, traced: list[dict]) -> None:
    """A pipe or a small terminal is 80 columns: no cell is folded over lines (an id must survive a copy)."""
    result = run_cli("trace", run.path, "--text", PLANT, "--top", "3", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 or "doc_id" in line or "source" in line for line in lines)
    for doc in traced[0]["documents"]:
        assert any(doc["doc_id"] in line for line in lines) and any(doc["source"] in line for line in lines)
    assert "{" not in result.stdout and "'" not in result.stdout


def test_cli_bad_input(run: RunDir, tmp_path: Path) -> None:
    assert_clean_error(run_cli("trace", tmp_path / "nowhere", "--text", "x"), "not a run directory")
    assert_clean_error(run_cli("trace", run.path, "--text", " "), "empty")
    assert_clean_error(run_cli("trace", run.path, "--file", tmp_path / "none.txt"), "none.txt", "unreadable")


def test_run_without_token_store(run: RunDir, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(run.path, bare, ignore=shutil.ignore_patterns("tokens", "trace"))
    with pytest.raises(TraceError, match="no token store"):
        trace_outputs(RunDir(config=run.config, path=bare), [PLANT])


def test_report_shows_traces_beside_memorization_and_canary_hits(run: RunDir) -> None:
    """An evaluation record with a memorized passage (the planted document's tokens, as memorization()
    records a hit) and a canary: attach_traces adds their documents, the Evaluation section shows them."""
    from tokenmill.eval.trace import attach_traces
    from tokenmill.report.eval_section import _eval_audits
    from tokenmill.tokens.store import TokenStore

    store = TokenStore(run.sub("tokens"))
    shard = store.shards("prose", "train")[0]
    planted = next(i for i, d in enumerate(shard.doc_table().column("id").to_pylist()) if d == planted_id(run))
    rates = {"n": 1, "exact": 1.0, "token_match": 1.0}
    record = {
        "memorization": {"overall": {"train": rates, "heldout": rates}, "hits": [{"bucket": "prose", "tokens": shard.doc(planted)[:64].tolist()}]},
        "canaries": {
            "canaries": [{"count": 1, "index": 0, "exposure_empirical": 3.0}],
            "by_count": {"1": {"canaries": 1, "mean_exposure_empirical": 3.0, "mean_exposure_extrapolated": 3.0, "mean_log_ppl": 9.0}},
            "candidates": 10,
            "max_exposure": 30.0,
        },
    }
    attach_traces(run, record, [REWORDED])
    hit = record["memorization"]["hits"][0]
    assert hit["documents"][0]["doc_id"] == planted_id(run) and hit["documents"][0]["ngram_overlap"] == hit["ngrams"] == 52
    assert record["canaries"]["canaries"][0]["trace"][0]["doc_id"] == planted_id(run)
    page = _eval_audits(record)
    assert "memorized passages, traced" in page and "canaries, traced to their documents" in page
    assert page.count(planted_id(run)) == 2
    steps = ", ".join(map(str, hit["documents"][0]["steps"][:8]))
    assert steps in page


def test_output_file_streams_and_cuts_long_lines(tmp_path: Path) -> None:
    """One output a line, each read with a bounded readline: a line over the cap is traced on its
    first max_bytes (a character the cut splits is dropped) and counted; a blank line is skipped."""
    from tokenmill.eval.trace import OutputFile

    path = tmp_path / "outputs.txt"
    path.write_text("short one\n" + "é" * 3000 + "\n\n" + "x" * 100 + "\n")
    outputs = OutputFile(path, max_bytes=101)
    stream = iter(outputs)
    assert next(stream) == "short one" and outputs.cut == 0
    assert next(stream) == "é" * 50 and outputs.cut == 1  # 101 bytes cut inside the 51st two-byte character
    assert list(stream) == ["x" * 100] and outputs.cut == 1


def test_output_file_jsonl_line_over_the_cap_is_one_error(tmp_path: Path) -> None:
    from tokenmill.eval.trace import OutputFile

    path = tmp_path / "outputs.jsonl"
    path.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": "y" * 500}) + "\n")
    with pytest.raises(TraceError, match=r"outputs.jsonl:2: not valid JSON \(longer than 200 bytes\)"):
        list(OutputFile(path, max_bytes=200))


def test_cli_cuts_an_output_longer_than_four_contexts(run: RunDir, tmp_path: Path) -> None:
    """train.seq_len 64: an output is cut at 4 x 64 x 8 = 2,048 bytes, and the note says so; the
    cut output is still traced (its n-grams are those of its first 2,048 bytes)."""
    outputs = tmp_path / "long.txt"
    outputs.write_text(PLANT + "\n" + (UNRELATED + " ") * 200 + "\n")
    result = run_cli("trace", run.path, "--file", outputs, "--top", "3", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert len(got) == 2 and got[0]["documents"][0]["doc_id"] == planted_id(run)
    assert len(got[1]["text"].encode()) <= 2048 and got[1]["text"].startswith(UNRELATED)
    assert "1 output(s) longer than 2,048 bytes (4 contexts of train.seq_len) were traced on their first 2,048 bytes" in result.stderr
