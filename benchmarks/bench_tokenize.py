"""Tokenize-stage throughput: `tokenmill tokenize` vs a bare HF `tokenizers` encode_batch.

Both encode the same curated documents of a run (real text) with the same tokenizer.json.
tokenmill's side is the whole stage: Parquet read, held-out split, encode, EOS, shard + index +
doc map written and fsynced. The peer is `Tokenizer.encode_batch` over the texts already in
memory, nothing written — the floor any tokenize stage pays. Interleaved, medians reported.

    .venv/bin/python benchmarks/bench_tokenize.py --run runs/demo --repeats 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import tokenizers

from tokenmill.config import load_config
from tokenmill.runs import RunDir
from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokens.curated import curated_buckets, iter_documents
from tokenmill.tokens.tokenize import run_tokenize


def tokenmill_seconds(src: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDir.create(load_config(src / "config.yaml", [f"root={tmp}", "name=b"]))
        shutil.copytree(src / "curated", run.path / "curated")
        shutil.copytree(src / "tokenizer", run.path / "tokenizer")
        t0 = time.perf_counter()
        run_tokenize(run)
        return time.perf_counter() - t0


def hf_seconds(src: Path, texts: list[str]) -> float:
    tok = load_tokenizer(src / "tokenizer" / "tokenizer.json")
    t0 = time.perf_counter()
    for i in range(0, len(texts), 512):
        tok.encode_batch(texts[i: i + 512], add_special_tokens=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cur = args.run / "curated"
    texts = [t for b in curated_buckets(cur) for _, t in iter_documents(cur, b)]
    n_bytes = sum(len(t.encode()) for t in texts)
    tm, hf = [], []
    for _ in range(args.repeats):
        tm.append(tokenmill_seconds(args.run))
        hf.append(hf_seconds(args.run, texts))
    print(json.dumps({"tokenizers": tokenizers.__version__, "docs": len(texts), "bytes": n_bytes,
                      "tokenmill_s": statistics.median(tm), "hf_encode_s": statistics.median(hf),
                      "tokenmill_MB_per_s": n_bytes / 1e6 / statistics.median(tm),
                      "hf_MB_per_s": n_bytes / 1e6 / statistics.median(hf),
                      "time_ratio_tokenmill_over_hf": statistics.median(tm) / statistics.median(hf)}, indent=1))


if __name__ == "__main__":
    main()
