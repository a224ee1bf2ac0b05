"""Tokens per license in the token store's _meta.json, against the same documents encoded apart."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from tokenmill.config import load_config
from tokenmill.report.license_section import license_tokens_table
from tokenmill.runs import RunDir
from tokenmill.tokenizer.bpe import load_tokenizer
from tests.conftest import real_documents


def test_meta_counts_documents_and_tokens_per_license_and_split(tmp_path):
    cfg = load_config(None, ["name=t", f"root={tmp_path}", "tokenizer.vocab_size=512",
                             "tokenize.val_fraction=0.2", "tokenize.min_val_docs=1"])
    run = RunDir.create(cfg)
    docs = real_documents()
    expected_docs: dict[str, int] = {}
    for bucket, texts in docs.items():
        lics = ["MIT" if i % 3 else "CC-BY-NC-4.0" for i in range(len(texts))] if bucket == "prose" else ["PSF-2.0"] * len(texts)
        ids = [xxhash.xxh64_hexdigest(f"{bucket}:{i}".encode()) for i in range(len(texts))]
        out = run.path / "curated" / bucket
        out.mkdir(parents=True)
        pq.write_table(pa.table({"id": ids, "text": texts, "bucket": [bucket] * len(texts), "license": lics}),
                       out / "part-00000.parquet")
        for lic in lics:
            expected_docs[lic] = expected_docs.get(lic, 0) + 1
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize

    run_tokenizer(run)
    run_tokenize(run)
    meta = json.loads((run.path / "tokens" / "_meta.json").read_text())
    per = meta["licenses"]
    tok = load_tokenizer(run.path / "tokenizer" / "tokenizer.json")
    expected_tokens: dict[str, int] = {}
    for bucket, texts in docs.items():
        table = pq.read_table(run.path / "curated" / bucket / "part-00000.parquet")
        for text, lic in zip(texts, table.column("license").to_pylist()):
            expected_tokens[lic] = expected_tokens.get(lic, 0) + len(tok.encode(text).ids) + 1  # + EOS
    assert {lic: sum(s["docs"] for s in splits.values()) for lic, splits in per.items()} == expected_docs
    assert {lic: sum(s["tokens"] for s in splits.values()) for lic, splits in per.items()} == expected_tokens
    for split in ("train", "val"):  # the per-license split counts add up to the buckets'
        assert sum(s.get(split, {"tokens": 0})["tokens"] for s in per.values()) == sum(
            b[split]["tokens"] for b in meta["buckets"].values())
    html = license_tokens_table(meta)
    assert f"<td>{per['MIT']['train']['tokens']:,}</td>" in html
