"""Shared fixtures. `curated_run`: a run directory with a small real curated corpus (Python's reference topics and stdlib code)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import xxhash

from tokenmill.config import load_config
from tokenmill.runs import RunDir


def real_documents() -> dict[str, list[str]]:
    import json
    import textwrap
    import pydoc_data.topics as topics

    prose = [topics.topics[k] for k in sorted(topics.topics)][:40]
    code = [inspect.getsource(m) for m in (textwrap, json.decoder, json.encoder, inspect)]
    return {"prose": prose, "code": code}


def write_curated(root: Path, docs: dict[str, list[str]]) -> None:
    for bucket, texts in docs.items():
        ids = [xxhash.xxh64_hexdigest(f"{bucket}:{i}".encode()) for i in range(len(texts))]
        table = pa.table({"id": ids, "text": texts, "bucket": [bucket] * len(texts)})
        out = root / "curated" / bucket
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / "part-00000.parquet")


@pytest.fixture()
def curated_run(tmp_path: Path) -> RunDir:
    cfg = load_config(None, ["name=t", f"root={tmp_path}", "tokenizer.vocab_size=512",
                             "tokenize.val_fraction=0.1", "tokenize.min_val_docs=1"])
    run = RunDir.create(cfg)
    write_curated(run.path, real_documents())
    return run


@pytest.fixture()
def tokenized_run(curated_run: RunDir) -> RunDir:
    """`curated_run` after the tokenizer and tokenize stages (a real token store)."""
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize

    run_tokenizer(curated_run)
    run_tokenize(curated_run)
    return curated_run


class ContextFreeModel(torch.nn.Module):
    """Logits that ignore the context: a unigram model in the shape of a language model."""

    def __init__(self, logprobs):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.as_tensor(logprobs, dtype=torch.float32))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(idx.shape[0], idx.shape[1], -1)
