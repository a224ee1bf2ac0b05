"""Shared fixtures. `curated_run`: a run directory with a small real curated corpus (Python's reference topics and stdlib code)."""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import xxhash

from tokenmill.config import load_config
from tokenmill.runs import RunDir

ROOT = Path(__file__).resolve().parents[1]
SLOWEST_FILE = ROOT / "build" / "slowest-tests.txt"
SLOWEST_N = 20

# Under pytest-xdist (`make test` runs `-n auto`: one worker per core) each worker gets its share of the cores: two workers
# with torch's default of one thread per core would put four busy threads on two cores, and
# OpenMP's spinning threads make that slower than one each. Children (CLI and torchrun tests)
# inherit the same share through OMP_NUM_THREADS.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
    torch.set_num_threads(_share)

_durations: dict[str, float] = {}
_started = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Setup + call + teardown seconds per test (the controller sees every worker's reports)."""
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The slowest tests of a whole-suite run (no paths given: the testpaths), in the log and in
    build/slowest-tests.txt, so the suite's growth shows from one run to the next."""
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if hasattr(config, "workerinput") or not _durations or not whole_suite:
        return
    slowest = sorted(_durations.items(), key=lambda kv: -kv[1])[:SLOWEST_N]
    lines = [f"{len(_durations)} tests in {time.monotonic() - _started:.0f} s wall; the {len(slowest)} slowest "
             "(setup + call + teardown seconds):"] + [f"{secs:7.2f}  {node}" for node, secs in slowest]
    terminalreporter.write_sep("=", f"slowest {len(slowest)} tests (also in build/slowest-tests.txt)")
    for line in lines:
        terminalreporter.write_line(line)
    SLOWEST_FILE.parent.mkdir(exist_ok=True)
    SLOWEST_FILE.write_text("\n".join(lines) + "\n")


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
def no_whole_curated_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails a test that reads a whole curated Parquet file at once (pq.read_table): stages that
    must stream read curated parts batch by batch. Other files (token pieces) may still be read."""
    read_table = pq.read_table

    def guarded(path, *args, **kwargs):
        assert "curated" not in str(path), f"a whole curated file was read: {path}"
        return read_table(path, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", guarded)


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


# --------------------------------------------------------------------------- tiny_run
TINY_VOCAB = 64
TINY_EOS, TINY_BOS, TINY_PAD = 0, 1, 2


def _pattern_doc(bucket: str, rng, length: int) -> list[int]:
    """A learnable document: within a document each token determines the next one.

    bucket "a" counts up through ids 3..22 (step 1); bucket "b" walks ids 23..63 in steps of 7.
    """
    lo, n, stride = (3, 20, 1) if bucket == "a" else (23, 41, 7)
    start = int(rng.integers(0, n))
    return [lo + (start + stride * i) % n for i in range(length)] + [TINY_EOS]


def write_tiny_store(root: Path, seed: int = 0) -> None:
    """A synthetic token store: bucket "a" (two train shards, ~2/3 of the tokens) and "b"."""
    import json

    import numpy as np

    from tokenmill.tokens.store import ShardWriter, token_dtype

    rng = np.random.default_rng(seed)
    dtype = token_dtype(TINY_VOCAB)
    layout = {"a": {"train": [90, 90], "val": [12]}, "b": {"train": [90], "val": [12]}}
    meta: dict = {"dtype": dtype.name, "vocab_size": TINY_VOCAB, "eos_id": TINY_EOS, "bos_id": TINY_BOS,
                  "pad_id": TINY_PAD, "buckets": {}, "shards": []}
    for bucket, splits in layout.items():
        meta["buckets"][bucket] = {}
        for split, shard_docs in splits.items():
            total = {"docs": 0, "tokens": 0, "bytes": 0}
            for k, n_docs in enumerate(shard_docs):
                rel = f"{bucket}/{split}-{k:05d}"
                writer = ShardWriter(root / rel, dtype)
                for i in range(n_docs):
                    doc = _pattern_doc(bucket, rng, int(rng.integers(10, 41)))
                    writer.add(f"{bucket}-{split}-{k}-{i}", doc, n_bytes=3 * len(doc))
                for key, v in writer.close().items():
                    total[key] += v
                meta["shards"].append(rel)
            meta["buckets"][bucket][split] = total
    (root / "_meta.json").write_text(json.dumps(meta, indent=1))


@pytest.fixture()
def tiny_run(tmp_path: Path) -> RunDir:
    """A run directory with a tiny learnable token store (vocab 64, buckets "a" and "b", train +
    val) and a config for a 2-layer d=32 model that trains 30 steps on CPU in about a second."""
    from tokenmill.config import RunConfig

    cfg = RunConfig.model_validate({
        "name": "tiny", "root": str(tmp_path), "seed": 11,
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
        "train": {"seq_len": 32, "micro_batch": 8, "grad_accum": 2, "max_steps": 30, "lr": 0.01,
                  "warmup_steps": 5, "ckpt_every": 10, "keep_checkpoints": 2, "device": "cpu",
                  "threads": 1, "log_every": 10, "eval_every": 0},
    })
    run = RunDir.create(cfg, tmp_path / "tiny")
    write_tiny_store(run.path / "tokens")
    return run
