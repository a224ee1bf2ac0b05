"""Canaries in curation: deterministic secrets, exact repetition counts, always training data."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tokenmill.config import CanaryConfig, RunConfig
from tokenmill.data.canaries import (CANARIES_FILE, SOURCE, CanaryError, canary_text, is_canary_id,
                                     load_canaries, make_canaries)
from tokenmill.data.curate import run_curate
from tokenmill.data.document import read_parts
from tokenmill.data.funnel import Funnel
from tokenmill.runs import RunDir
from tokenmill.data.heldout_split import heldout_ids
from tokenmill.tokens.store import TokenStore

COUNTS = [1, 3, 5]
PER_COUNT = 2


def topics(n: int = 24) -> list[str]:
    import pydoc_data.topics as t

    return [t.topics[k][:1500] for k in sorted(t.topics) if len(t.topics[k]) > 1500][:n]


def make_run(root: Path, seed: int = 5, **canaries) -> RunDir:
    src = root / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": d}) + "\n" for i, d in enumerate(topics())))
    cfg = RunConfig.model_validate({
        "name": "canary", "root": str(root), "seed": seed,
        "curate": {"sources": [{"path": str(src), "bucket": "prose"}], "steps": ["normalize", "exact_dedup"],
                   "workers": 1, "canaries": {"counts": COUNTS, "per_count": PER_COUNT, "secret_digits": 6,
                                              "bucket": "prose", **canaries}},
        "tokenizer": {"vocab_size": 400}, "tokenize": {"val_fraction": 0.2, "min_val_docs": 2},
    })
    return RunDir.create(cfg, root / "run")


@pytest.fixture(scope="module")
def curated(tmp_path_factory) -> RunDir:
    run = make_run(tmp_path_factory.mktemp("canaries"))
    run_curate(run, progress=False)
    return run


def test_secrets_are_a_function_of_the_seed():
    cfg = CanaryConfig(counts=[1, 8, 64], per_count=3, secret_digits=10)
    a, b, other = (make_canaries(cfg, s, "web") for s in (7, 7, 8))
    assert a == b
    assert [c.secret for c in a] != [c.secret for c in other]
    secrets = [c.secret for c in a]
    assert len(set(secrets)) == 9 and all(len(s) == 10 and s.isdigit() for s in secrets)
    assert a[0].text == "my secret code is " + " ".join(a[0].secret)
    assert [(c.count, c.index) for c in a] == [(n, k) for n in (1, 8, 64) for k in range(3)]
    assert [len(c.doc_ids) for c in a] == [1] * 3 + [8] * 3 + [64] * 3
    assert len({i for c in a for i in c.doc_ids}) == 3 * 73 and all(is_canary_id(i) for c in a for i in c.doc_ids)


def test_template_keeps_other_braces():
    assert canary_text("key {x} = {secret}!", "042") == "key {x} = 0 4 2!"


def test_curated_output_holds_each_canary_count_times(curated):
    rows = read_parts(curated.sub("curated", "prose")).to_pylist()
    canary_rows = [r for r in rows if r["source"] == SOURCE]
    record = load_canaries(curated.sub("curated"))
    assert record is not None and record["template"] == "my secret code is {secret}"
    assert record["canaries"] == make_canaries(curated.config.curate.canaries, 5, "prose")
    for c in record["canaries"]:
        mine = [r for r in canary_rows if r["text"] == c.text]
        assert sorted(r["id"] for r in mine) == sorted(c.doc_ids) and len(mine) == c.count
    assert len(canary_rows) == PER_COUNT * sum(COUNTS)
    assert len([r for r in rows if r["source"] != SOURCE]) == len(topics())  # nothing else changed


def test_canaries_count_in_funnel_and_events(curated):
    funnel = json.loads(curated.sub("curated", "_funnel.json").read_text())
    n = PER_COUNT * sum(COUNTS)
    assert funnel["sources"][SOURCE]["docs_in"] == funnel["sources"][SOURCE]["docs_out"] == n
    assert funnel["total"]["exact_dedup"]["docs_out"] == len(topics()) + n
    assert funnel["total"]["exact_dedup"]["docs_rejected"] == 0  # their repetitions survived dedup
    assert Funnel.from_dict(funnel).violations() == []  # in = out + rejected still holds at every step
    events = [e for e in curated.events.read() if e["kind"] == "canaries_inserted"]
    assert events == [{**events[0], "bucket": "prose", "canaries": len(COUNTS) * PER_COUNT, "docs": n,
                       "counts": COUNTS}]


def test_canaries_are_training_data_never_heldout(curated):
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize

    run_tokenizer(curated)
    run_tokenize(curated)
    store = TokenStore(curated.sub("tokens"))
    ids = {split: {i for shard in store.shards("prose", split) for i in shard.doc_table().column("id").to_pylist()}
           for split in ("train", "val")}
    every = {i for c in load_canaries(curated.sub("curated"))["canaries"] for i in c.doc_ids}
    assert every <= ids["train"] and not every & ids["val"]
    assert ids["val"]  # the split still holds documents out


def test_split_ignores_canaries_without_moving_other_documents():
    docs = [f"doc{i}" for i in range(200)]
    canaries = [f"canary-c9-k0-r{i:06d}" for i in range(50)]
    plain = heldout_ids(docs, 0.1, 2, seed=3)
    assert heldout_ids(docs + canaries, 0.1, 2, seed=3) == plain
    assert heldout_ids(canaries, 0.5, 5, seed=3) == set()


def test_unknown_bucket_is_a_clear_error(tmp_path):
    run = make_run(tmp_path, bucket="nope")
    with pytest.raises(CanaryError, match="canaries.bucket='nope'.*buckets: prose"):
        run_curate(run, progress=False)
    assert not run.sub("curated").exists()


def test_no_canaries_by_default(tmp_path):
    run = make_run(tmp_path, counts=[])
    run_curate(run, progress=False)
    assert not (run.sub("curated") / CANARIES_FILE).exists()
    assert load_canaries(run.sub("curated")) is None
    assert SOURCE not in pq.read_table(run.sub("curated", "prose")).column("source").to_pylist()
