import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

import tokenmill.tokens.tokenize as tz
from tokenmill.tokenizer import fast_encode
from tokenmill.tokenizer.bpe import load_tokenizer, tokenizer_sha256
from tokenmill.tokenizer.special import EOS, EOS_ID, sentinel
from tokenmill.tokenizer.stage import run_tokenizer
from tokenmill.data.curated import iter_documents
from tokenmill.data.heldout_split import heldout_ids
from tokenmill.tokens.store import TokenStore
from tokenmill.tokens.tokenize import run_tokenize

from tests.conftest import real_documents


def _hf_ids(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def test_every_document_lands_once_with_hf_ids_and_ends_with_eos(curated_run):
    run_tokenizer(curated_run)
    run_tokenize(curated_run)
    store = TokenStore(curated_run.sub("tokens"))
    tok_path = curated_run.sub("tokenizer", "tokenizer.json")
    tok = load_tokenizer(tok_path)
    assert store.dtype == np.uint16 and store.eos_id == EOS_ID
    assert store.meta["tokenizer_sha256"] == tokenizer_sha256(tok_path) and store.meta["encoder"] == "tiktoken"
    assert store.meta["mask_id"] == 3 and store.meta["sentinel_ids"] == list(range(4, 36))
    assert not curated_run.sub("tokens.tmp").exists() and not curated_run.sub("tokens.parts").exists()
    for bucket in ("code", "prose"):
        source = dict(iter_documents(curated_run.sub("curated"), bucket))
        held = heldout_ids(list(source), 0.1, 1, curated_run.config.seed)
        seen = {}
        for split in ("train", "val"):
            for shard in store.shards(bucket, split):
                table = shard.doc_table().to_pylist()
                for i in range(shard.n_docs):
                    ids = shard.doc(i)
                    doc_id = table[i]["id"]
                    assert ids.tolist() == [*_hf_ids(tok, source[doc_id]), EOS_ID]
                    assert (split == "val") == (doc_id in held)
                    seen[doc_id] = tok.decode(ids[:-1].tolist())
                    assert table[i]["n_bytes"] == len(source[doc_id].encode())
        assert seen == source
        meta = store.meta["buckets"][bucket]
        assert meta["train"]["tokens"] + meta["val"]["tokens"] == sum(
            len(_hf_ids(tok, t)) + 1 for t in source.values())


def test_small_shards_rotate_and_locate_maps_back(curated_run):
    curated_run.config.tokenize.shard_tokens = 2000
    run_tokenizer(curated_run)
    run_tokenize(curated_run)
    store = TokenStore(curated_run.sub("tokens"))
    shards = store.shards("prose", "train")
    assert len(shards) > 1
    assert all(s.n_tokens >= 2000 and s.n_tokens - len(s.doc(s.n_docs - 1)) < 2000 for s in shards[:-1])
    s = max(shards, key=lambda sh: sh.n_docs)
    last = s.n_docs - 1
    pos = int(s.offsets[last]) + 5
    assert s.locate(pos) == (last, 5)
    assert s.tokens[pos] == s.doc(last)[5]
    assert s.locate(0) == (0, 0)


# --------------------------------------------------------------------------- many parts
SPECIAL_DOC = f"data that says {EOS} or {sentinel(0)} must stay text"


def _split_into_parts(run, parts_per_bucket=3):
    """Rewrite curated/ with several parts per bucket, one document quoting special tokens."""
    docs = real_documents()
    docs["prose"] = docs["prose"] + [SPECIAL_DOC]
    for bucket, texts in docs.items():
        out = run.sub("curated", bucket)
        for p in out.glob("*.parquet"):
            p.unlink()
        ids = [xxhash.xxh64_hexdigest(f"{bucket}:{i}".encode()) for i in range(len(texts))]
        for k, chunk in enumerate(np.array_split(np.arange(len(texts)), parts_per_bucket)):
            pq.write_table(pa.table({"id": [ids[i] for i in chunk], "text": [texts[i] for i in chunk]}),
                           out / f"part-{k:05d}.parquet")


def _store_content(root):
    store = TokenStore(root)
    return {(b, s): [(sh.prefix.name, sh.tokens.tolist(), sh.offsets.tolist(), sh.doc_table().to_pydict())
                     for sh in store.shards(b, s)] for b in store.buckets for s in ("train", "val")}


@pytest.fixture()
def parted_run(curated_run):
    _split_into_parts(curated_run)
    curated_run.config.tokenize.shard_tokens = 3000
    run_tokenizer(curated_run)
    return curated_run


def test_output_does_not_depend_on_workers(parted_run, monkeypatch):
    parted_run.config.tokenize.workers = 1
    run_tokenize(parted_run)
    one = _store_content(parted_run.sub("tokens"))
    parted_run.config.tokenize.workers = 2
    run_tokenize(parted_run)  # small data: one process, two encode threads
    assert _store_content(parted_run.sub("tokens")) == one
    monkeypatch.setattr(tz, "PROCESS_MIN_BYTES", 1)
    run_tokenize(parted_run)  # two processes
    assert _store_content(parted_run.sub("tokens")) == one
    events = parted_run.events.read()
    layouts = [k for k, e in enumerate(events) if e["kind"] == "layout"]
    assert [(events[k]["processes"], events[k]["threads"]) for k in layouts] == [(1, 1), (1, 2), (2, 1)]
    pids = {e["pid"] for e in events[layouts[-1]:] if e["kind"] == "part"}
    assert len(pids) == 2  # this process and one child each encoded parts
    # Documents in curated order, split by held-out, shards cut at the same places as one pass.
    docs = [d for (b, s), shards in one.items() if (b, s) == ("prose", "train") for sh in shards for d in sh[3]["id"]]
    source = [i for i, _ in iter_documents(parted_run.sub("curated"), "prose")]
    held = heldout_ids(source, 0.1, 1, parted_run.config.seed)
    assert docs == [i for i in source if i not in held]


def test_special_token_text_in_data_is_not_special(parted_run):
    run_tokenize(parted_run)
    store = TokenStore(parted_run.sub("tokens"))
    tok = load_tokenizer(parted_run.sub("tokenizer", "tokenizer.json"))
    found = [shard.doc(i) for split in ("train", "val") for shard in store.shards("prose", split)
             for i, doc_id in enumerate(shard.doc_table().column("id").to_pylist())
             if tok.decode(shard.doc(i)[:-1].tolist()) == SPECIAL_DOC]
    assert len(found) == 1
    assert found[0][-1] == EOS_ID and not set(found[0][:-1].tolist()) & set(range(36))


def test_killed_stage_resumes_finished_parts_only(parted_run, monkeypatch):
    parted_run.config.tokenize.workers = 1
    run_tokenize(parted_run)
    reference = _store_content(parted_run.sub("tokens"))

    calls = []
    real = tz.encode_part

    def dies_on_fourth(task):
        calls.append(task.part)
        if len(calls) == 4:
            raise KeyboardInterrupt("killed")
        return real(task)

    monkeypatch.setattr(tz, "encode_part", dies_on_fourth)
    with pytest.raises(KeyboardInterrupt):
        run_tokenize(parted_run)
    assert parted_run.sub("tokens.tmp").exists() is False and len(list(parted_run.sub("tokens.parts").rglob("_done.json"))) == 3

    # A finished part whose piece was damaged afterwards is redone too.
    damaged = next(parted_run.sub("tokens.parts").rglob("train.bin"))
    damaged.write_bytes(damaged.read_bytes()[:-2])
    redone = []
    monkeypatch.setattr(tz, "encode_part", lambda task: (r := real(task), redone.append(r["skipped"]))[0])
    run_tokenize(parted_run)
    assert sorted(redone) == [False] * 4 + [True] * 2
    assert _store_content(parted_run.sub("tokens")) == reference


def test_parts_of_another_tokenizer_are_redone(parted_run, monkeypatch):
    parted_run.config.tokenize.workers = 1
    real = tz.encode_part
    calls = []

    def dies_on_third(task):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(tz, "encode_part", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        run_tokenize(parted_run)
    parted_run.config.tokenizer.vocab_size = 600
    run_tokenizer(parted_run)
    skipped = []
    monkeypatch.setattr(tz, "encode_part", lambda task: (r := real(task), skipped.append(r["skipped"]))[0])
    run_tokenize(parted_run)
    assert skipped == [False] * 6
    store = TokenStore(parted_run.sub("tokens"))
    assert store.vocab_size == 600
    assert store.tokenizer_sha256 == tokenizer_sha256(parted_run.sub("tokenizer", "tokenizer.json"))


@pytest.mark.parametrize("workers", [1, 2])
def test_unverified_or_failing_fast_encoder_falls_back_to_hf(parted_run, monkeypatch, workers):
    parted_run.config.tokenize.workers = workers  # 2: two runner threads share the encoders
    run_tokenize(parted_run)
    reference = _store_content(parted_run.sub("tokens"))

    parted_run.sub("tokenizer", "fast_encode.json").unlink()
    run_tokenize(parted_run)
    assert TokenStore(parted_run.sub("tokens")).meta["encoder"] == "hf"
    assert _store_content(parted_run.sub("tokens")) == reference
    assert any(e["kind"] == "warning" and "fast_encode.json is missing" in e["message"]
               for e in parted_run.events.read())

    run_tokenizer(parted_run)  # verified again; now tiktoken misbehaves on real data
    real_encode = fast_encode.TiktokenEncoder.encode
    monkeypatch.setattr(fast_encode.TiktokenEncoder, "encode",
                        lambda self, texts: [a + 1 for a in real_encode(self, texts)])
    run_tokenize(parted_run)
    assert _store_content(parted_run.sub("tokens")) == reference
    parts = [e for e in parted_run.events.read() if e["kind"] == "part"][-6:]
    assert all(e["spot_check_failed"] and e["encoder"] == "hf" for e in parts)


def test_layout_spends_workers_on_processes_only_for_enough_data(parted_run, monkeypatch):
    run_tokenize(parted_run)
    tasks = tz.plan_parts(parted_run, parted_run.sub("tokens.parts"), "tiktoken", np.dtype(np.uint16))
    sizes = sorted(Path(t.part).stat().st_size for t in tasks)
    assert tz.layout(tasks, 4) == (1, 4)
    monkeypatch.setattr(tz, "PROCESS_MIN_BYTES", sizes[0])
    assert tz.layout(tasks, 4) == (4, 1) and tz.layout(tasks, 8) == (6, 1) and tz.layout(tasks, 1) == (1, 1)
    monkeypatch.setattr(tz, "PROCESS_MIN_BYTES", sum(sizes) // 2 + 1)
    assert tz.layout(tasks, 4) == (2, 2)


@pytest.mark.parametrize("workers,min_bytes", [(1, None), (2, None), (2, 1)])
def test_a_bad_part_stops_the_stage_naming_it(parted_run, monkeypatch, workers, min_bytes):
    parted_run.config.tokenize.workers = workers
    if min_bytes:
        monkeypatch.setattr(tz, "PROCESS_MIN_BYTES", min_bytes)
    bad = parted_run.sub("curated", "prose", "part-00001.parquet")
    pq.write_table(pa.table({"id": ["x", "y"], "text": pa.array(["fine", None], type=pa.string())}), bad)
    with pytest.raises(ValueError, match=r"part-00001\.parquet: document y has no text"):
        run_tokenize(parted_run)
    assert not parted_run.sub("tokens").exists()


def test_heldout_duplicates_train_instead_with_no_list_of_ids_in_the_planner(parted_run, monkeypatch, request):
    """A held-out document made a copy of a training document of another part moves to training,
    as the in-memory check decides; the planner reads ids only in small batches, never a whole
    column, and its tasks carry the bucket's cut and their moved ids, not a set of held ids."""
    import tokenmill.data.heldout_split as hs
    from tokenmill.tokens.heldout_dedup import training_duplicates

    curated = parted_run.sub("curated")
    source = [i for i, _ in iter_documents(curated, "prose")]
    held = heldout_ids(source, 0.1, 1, parted_run.config.seed)
    parts = sorted(curated.joinpath("prose").glob("part-*.parquet"))
    tables = [pq.read_table(p) for p in parts]
    k, row = next((k, r) for k, t in enumerate(tables) for r, i in enumerate(t.column("id").to_pylist()) if i in held)
    j, src = next((j, r) for j, t in enumerate(tables) for r, i in enumerate(t.column("id").to_pylist())
                  if j != k and i not in held and len(t.column("text")[r].as_py()) > 200)
    copy = tables[j].column("text")[src].as_py().upper()
    texts = tables[k].column("text").to_pylist()
    texts[row] = copy
    pq.write_table(tables[k].set_column(1, "text", pa.array(texts)), parts[k])
    copied = tables[k].column("id")[row].as_py()
    everything = {i: t for b in ("code", "prose") for i, t in iter_documents(curated, b)}
    expected = training_duplicates(everything, held | heldout_ids([i for i, _ in iter_documents(curated, "code")], 0.1, 1,
                                                                  parted_run.config.seed),
                                   parted_run.config.curate.minhash_dedup, parted_run.config.seed)
    assert copied in expected

    batches: list[int] = []
    real = hs.part_id_batches
    monkeypatch.setattr(hs, "part_id_batches", lambda part, rows: (batches.append(len(b)) or b for b in real(part, rows)))
    monkeypatch.setattr(hs, "ID_BATCH", 4)
    request.getfixturevalue("no_whole_curated_column")
    parted_run.config.tokenize.shuffle_records = 50  # many partitions
    run_tokenize(parted_run)
    assert max(batches) <= 4 and sum(batches) == len(everything)

    store = TokenStore(parted_run.sub("tokens"))
    assert store.meta["heldout_moved_to_train"] == expected
    val = [i for sh in store.shards("prose", "val") for i in sh.doc_table().column("id").to_pylist()]
    assert sorted(val) == sorted(held - set(expected))
    tasks = tz.plan_parts(parted_run, parted_run.sub("tokens.parts"), "tiktoken", np.dtype(np.uint16))
    assert [t.moved for t in tasks if copied in t.moved] == [frozenset({copied})]
    assert not hasattr(tasks[0], "held")


def test_a_bucket_with_too_small_a_heldout_set_is_warned_about_once(curated_run, capsys):
    from tokenmill.tokens.heldout_size import MIN_HELDOUT_DOCS, too_small

    # prose (40 documents) can hold out 10; code has 4 documents, so 3 at most: only code is warned about
    curated_run.config.tokenize.min_val_docs = 10
    run_tokenizer(curated_run)
    run_tokenize(curated_run)
    err = capsys.readouterr().err
    meta = TokenStore(curated_run.sub("tokens")).meta["buckets"]
    warned = {e["bucket"]: e for e in curated_run.events.read() if e["kind"] == "small_heldout"}
    for bucket, splits in meta.items():
        val = splits["val"]
        assert (bucket in warned) == too_small(val["docs"], val["tokens"] - val["docs"])
    assert set(warned) == {"code"} and meta["prose"]["val"]["docs"] == 10 >= MIN_HELDOUT_DOCS
    code = warned["code"]
    assert code["docs"] == 3 and code["tokens"] == meta["code"]["val"]["tokens"] - 3
    assert "bucket 'code' holds out 3 documents (fewer than 9)" in code["message"] and "4 documents in all" in code["message"]
    lines = [line for line in err.splitlines() if "holds out" in line]
    assert lines == [code["message"]]  # one line, on the console as in the log


def test_no_warning_when_nothing_is_held_out_on_purpose(curated_run, capsys):
    curated_run.config.tokenize.val_fraction = 0.0
    curated_run.config.tokenize.min_val_docs = 0
    assert tz.warn_small_heldout(curated_run, {"code": {"train": {"docs": 4}, "val": {"docs": 0, "tokens": 0}}}) == []
    curated_run.config.tokenize.min_val_docs = 1  # held out, but one document: warned
    lines = tz.warn_small_heldout(curated_run, {"code": {"train": {"docs": 40}, "val": {"docs": 1, "tokens": 900}}})
    assert len(lines) == 1 and "1 document (fewer than 9) and 899 tokens" in lines[0] and lines[0] in capsys.readouterr().err
