"""Document ids (issue 19): a record's own unique id is its row's id, everywhere downstream."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import CurateConfig, load_config
from tokenmill.data import curate as curate_mod
from tokenmill.data.curate import curate, run_curate
from tokenmill.data.doc_ids import MAX_ID_CHARS, IdRule, id_hash, id_problem, merge
from tokenmill.data.document import RawRecord, doc_id, read_parts
from tokenmill.data.shards import plan_shards
from tokenmill.runs import RunDir

ODD = 'naïve/ü id with spaces, "quotes", \\ and 日本語'  # any string is an id, escaping included


def test_which_ids_are_usable():
    assert id_problem("doc-1") is None and id_problem(ODD) is None and id_problem("x" * MAX_ID_CHARS) is None
    assert "characters" in id_problem("") and "characters" in id_problem("x" * (MAX_ID_CHARS + 1))
    assert id_problem("a\ud800b") == "holds a lone surrogate"
    assert id_problem("line\nbreak") == "holds a control character"
    assert "canary" in id_problem("canary-c1-k0-r0")


def test_merge_finds_ids_repeated_in_a_source_or_across_sources():
    h = [np.array([id_hash(x) for x in xs], dtype=np.uint64) for xs in (["a", "b", "b"], ["c"], ["a", "d"])]
    shared, stats = merge({0: [h[0], h[1]], 1: [h[2]]})
    assert sorted(shared.tolist()) == sorted([id_hash("a"), id_hash("b")])
    assert stats == {"ids": 4, "within": 1, "across": 1}
    rule = IdRule(shared)
    raw = RawRecord("s", "f.jsonl#id=b", "u", "web", "x", "text", "t", 1, record_id="b")
    assert rule.decide(raw) == (raw.id, "shared")
    assert rule.decide(RawRecord("s", "f.jsonl#id=c", "u", "web", "x", "text", "t", 1, record_id="c")) == ("c", None)
    assert rule.decide(RawRecord("s", "f.jsonl:3", "u", "web", "x", "text", "t", 1)) == (doc_id("s", "f.jsonl:3"), None)


def _prose(i: int) -> str:
    return (f"Document number {i} is about the curation of text for language models. " * 3).strip()


def _write_sources(root: Path) -> tuple[Path, Path]:
    """A JSONL directory (two files) and a Parquet file, with every kind of id."""
    jdir = root / "jsonl"
    jdir.mkdir(parents=True)
    first = [{"id": "a-1", "text": _prose(1)}, {"id": "dup", "text": _prose(2)}, {"id": 7, "text": _prose(3)},
             {"id": ODD, "text": _prose(4)}, {"id": "canary-x", "text": _prose(5)}, {"text": _prose(6)},
             {"id": "y" * (MAX_ID_CHARS + 1), "text": _prose(7)}, {"id": "no-text", "body": "x"}]
    second = [{"id": "dup", "text": _prose(8)}, {"id": "j-9", "text": _prose(9)}]  # "dup": again, in another file
    (jdir / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    (jdir / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in second))
    pfile = root / "table.parquet"
    pq.write_table(pa.table({"text": [_prose(10), _prose(11), _prose(12)], "id": ["a-1", "p/2", "p-3"]}), pfile)
    return jdir, pfile


def _config(jdir: Path, pfile: Path, **over) -> CurateConfig:
    return CurateConfig.model_validate({
        "sources": [{"path": str(jdir), "bucket": "web"}, {"path": str(pfile), "bucket": "web"}],
        "steps": ["normalize", "exact_dedup"], "workers": 1, "chunk_docs": 3, "max_removal_share": 0.95, **over})


@pytest.fixture(scope="module")
def curated(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("ids")
    jdir, pfile = _write_sources(root)
    out = root / "out"
    curate(_config(jdir, pfile), out, progress=False)
    return out, jdir, pfile


def _by_text_number(rows: list[dict]) -> dict[int, dict]:
    return {int(r["text"].split()[2]): r for r in rows if r["text"]}


def test_a_unique_usable_id_is_the_row_id_and_the_hash_stays_in_lineage(curated):
    out, jdir, pfile = curated
    kept = _by_text_number(read_parts(out / "web").to_pylist())
    assert {n: r["id"] for n, r in kept.items() if n in (3, 4, 9, 11, 12)} == \
        {3: "7", 4: ODD, 9: "j-9", 11: "p/2", 12: "p-3"}
    hashed = {1: "a.jsonl#id=a-1", 2: "a.jsonl#id=dup", 5: "a.jsonl#id=canary-x", 6: "a.jsonl:6",
              7: f"a.jsonl#id={'y' * (MAX_ID_CHARS + 1)}", 8: "b.jsonl#id=dup"}
    for n, locator in hashed.items():  # shared in the source (dup), across sources (a-1), unusable, none
        assert kept[n]["id"] == doc_id(str(jdir), locator), n
        assert not any(s["step"] == "hash_id" for s in kept[n]["lineage"])
    assert kept[10]["id"] == doc_id(str(pfile), "table.parquet#id=a-1")
    assert json.loads(kept[2]["metadata"])["id"] == "dup"  # the user's id is still on the row
    lineage = {s["step"]: s["version"] for s in kept[4]["lineage"]}
    assert lineage["hash_id"] == doc_id(str(jdir), f"a.jsonl#id={ODD}") and "read" in lineage


def test_the_rejected_log_and_the_funnel_use_the_same_ids(curated):
    out, jdir, pfile = curated
    rejected = read_parts(out / "_rejected").to_pylist()
    [no_text] = [r for r in rejected if r["rule"] == "missing_field"]
    assert no_text["id"] == "no-text" and no_text["step"] == "read"
    assert no_text["lineage"] == [{"step": "hash_id", "version": doc_id(str(jdir), "a.jsonl#id=no-text")}]
    funnel = json.loads((out / "_funnel.json").read_text())
    assert funnel["sources"][str(jdir)]["ids"] == {"shared": 3, "unusable": 2, "user": 4}
    assert funnel["sources"][str(pfile)]["ids"] == {"shared": 1, "user": 2}
    kept_ids = [r["id"] for r in read_parts(out / "web").to_pylist()]
    assert len(set(kept_ids + [r["id"] for r in rejected])) == len(kept_ids) + len(rejected)


def test_ids_do_not_depend_on_sharding_or_chunking(curated, tmp_path, monkeypatch):
    out, jdir, pfile = curated
    monkeypatch.setattr(curate_mod, "plan_shards", lambda sources: plan_shards(sources, target_bytes=1))
    other = tmp_path / "sharded"
    curate(_config(jdir, pfile, chunk_docs=1), other, progress=False)  # a shard per file, a chunk per record
    ids = lambda d: sorted(r["id"] for r in read_parts(d).to_pylist())  # noqa: E731
    assert ids(other / "web") == ids(out / "web") and ids(other / "_rejected") == ids(out / "_rejected")


def test_user_ids_reach_the_token_store_the_heldout_split_and_replay(tmp_path):
    """Curate → tokenizer → tokenize → replay's batch listing, with ids users chose."""
    from tokenmill.data.heldout_split import heldout_ids
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.store import TokenStore
    from tokenmill.tokens.tokenize import run_tokenize
    from tokenmill.train.replay import batch_documents
    import pydoc_data.topics as topics

    texts = [topics.topics[k] for k in sorted(topics.topics) if len(topics.topics[k]) > 2000][:24]
    ids = [f"{ODD} #{i}" if i % 2 else f"user/{i}" for i in range(len(texts))]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t, "url": f"https://u.example/{k}"}) + "\n"
                           for k, (i, t) in enumerate(zip(ids, texts))))
    cfg = load_config(None, ["name=ids", f"root={tmp_path}", "tokenizer.vocab_size=512", "tokenize.val_fraction=0.2",
                             "tokenize.min_val_docs=1", "train.seq_len=64", "train.micro_batch=2", "train.grad_accum=1",
                             "train.max_steps=4"])
    cfg = cfg.model_copy(update={"curate": CurateConfig.model_validate(
        {"sources": [{"path": str(src), "bucket": "prose"}], "steps": ["normalize"], "workers": 1})})
    run = RunDir.create(cfg)
    run_curate(run, progress=False)
    run_tokenizer(run)
    run_tokenize(run)
    store = TokenStore(run.sub("tokens"))
    stored = {split: [i for sh in store.shards("prose", split) for i in sh.doc_table().column("id").to_pylist()]
              for split in ("train", "val")}
    assert sorted(stored["train"] + stored["val"]) == sorted(ids)
    assert set(stored["val"]) == heldout_ids(ids, 0.2, 1, cfg.seed)
    docs = batch_documents(run, 1)
    assert docs and all(d["doc_id"] in set(stored["train"]) for d in docs)
    assert all(d["url"] == f"https://u.example/{ids.index(d['doc_id'])}" and d["source"] == str(src) for d in docs)
