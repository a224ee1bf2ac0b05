"""The trace index of a run (`<run>/trace/`): built once from the run's files, then every
`tokenmill trace` reads it instead of the corpus.

Files (all written into a temporary directory, published by one rename, with a `.tokenmill`
marker; `index.json` holds the key that says when it is stale):
  docs.arrow            one row per training document, global number g in store order (bucket,
                        shard, doc index, curated id, tokens, source, url); Arrow IPC, memory-mapped,
                        so a query reads only the rows it returns
  ngrams-<p>.hash/.doc  the inverted index: every distinct (hashed token n-gram, g) pair of the
                        training split, n = eval.contamination_n, partitioned by the hash's top
                        bits, sorted by hash; 16 bytes per training token on disk
  steps.bin, steps_off  batch lineage: the training steps whose global batch held document g are
                        steps[off[g]:off[g+1]] (int32, sorted); 4 bytes per (document, step) + 8 per document
  windows.bin, win_off  float16 SIF embeddings (eval/embedding.py) of every document's windows of
                        WINDOW words (stride WINDOW/2); 2 · dim bytes per window + 8 per document
  embedder/             the word vectors, trained on the run's training text (as the semantic
                        back-check does, eval/semantic_contamination.py)

Cost of a build, for D training documents, T training tokens, S trained steps, B spans per global
batch: one pass over the store for the n-grams (memory: one chunk, then one partition of at most
PARTITION_BYTES while it is sorted), two passes over the curated parts for the embedder
(max_train_words of text) and the windows (one block), and a replay of the deterministic sampler
(train/replay.py's loader) over every trained step: O(S · B) work, S · B (document, step) pairs
(12 bytes each) held while they are sorted. Memory of the open index: nothing per document in
RAM; every array is memory-mapped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from tokenmill import json_limits
from tokenmill.data.curated import bucket_parts
from tokenmill.eval.contamination import ngram_hashes
from tokenmill.ownership import claim_dir, temporary_name, write_marker
from tokenmill.runs import RunDir, read_events
from tokenmill.tokens.store import TokenStore

INDEX_VERSION = "tokenmill-trace-v1"
STAGE = "trace"
PARTITION_BYTES = 1 << 28  # (hash, doc) pairs of one partition: the build sorts one at a time
CHUNK = 1 << 22  # token windows hashed at once
WINDOW = 32  # words per embedded window (stride WINDOW // 2)
EMBED_BLOCK = 8192  # windows embedded at once
DOC_FIELDS = ("g", "bucket", "shard", "doc", "doc_id", "n_tokens", "source", "url")


def trained_steps(run: RunDir, planned: int) -> int:
    """The last step the run trained (its newest train_step event), else its planned steps."""
    last = 0
    for e in read_events(run.sub("events.jsonl")):
        if e.get("kind") == "train_step":
            last = max(last, int(e.get("step", 0)))
    return last or planned


def index_key(run: RunDir, store: TokenStore, loader: Any, last_step: int) -> dict[str, Any]:
    """What the index depends on: a change in any of these rebuilds it."""
    cfg = run.config
    return {
        "version": INDEX_VERSION,
        "data": loader.fingerprint(),  # token store + everything that fixes the data order
        "tokenizer": store.tokenizer_sha256,
        "n": cfg.eval.contamination_n,
        "dim": cfg.eval.semantic_contamination.dim,
        "max_train_words": cfg.eval.semantic_contamination.max_train_words,
        "seed": cfg.seed,
        "last_step": last_step,
    }


def train_shards(store: TokenStore) -> list[tuple[str, Any]]:
    """(shard name relative to tokens/, Shard) of the training split, in store order: g counts along it."""
    return [(s.prefix.relative_to(store.root).as_posix(), s) for b in store.buckets for s in store.shards(b, "train")]


# ---------------------------------------------------------------- documents and their windows
def _curated_rows(curated: Path, bucket: str) -> Iterator[dict[str, Any]]:
    """id, text, source, url of a bucket's curated rows in order (source/url None when absent)."""
    for part in bucket_parts(curated, bucket):
        pf = pq.ParquetFile(part)
        cols = [c for c in ("id", "text", "source", "url") if c in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=1024, columns=cols):
            yield from batch.to_pylist()


def training_rows(run: RunDir, store: TokenStore) -> Iterator[dict[str, Any]]:
    """Every training document with its curated text and metadata, in store order (a merge of the
    store's ids with the curated parts, which tokenize wrote in the same order)."""
    g = 0
    for bucket in store.buckets:
        rows = _curated_rows(run.sub("curated"), bucket)
        for shard in store.shards(bucket, "train"):
            name = shard.prefix.relative_to(store.root).as_posix()
            for i, doc_id in enumerate(shard.doc_table().column("id").to_pylist()):
                row = next((r for r in rows if r["id"] == doc_id), None)
                if row is None:
                    raise ValueError(
                        f"{run.sub('curated', bucket)}: training document {doc_id} of {name} is not there in the "
                        "token store's order; the token store was not made from this curated data (rerun `tokenmill tokenize CONFIG`)"
                    )
                meta = {
                    "g": g,
                    "bucket": bucket,
                    "shard": name,
                    "doc": i,
                    "doc_id": doc_id,
                    "n_tokens": int(shard.offsets[i + 1] - shard.offsets[i]),
                }
                yield {**meta, "source": row.get("source"), "url": row.get("url"), "text": row["text"]}
                g += 1


def write_documents(run: RunDir, store: TokenStore, out: Path, embedder: Any) -> tuple[int, int]:
    """docs.arrow, and (with an embedder) the windows' vectors and offsets. Returns (documents, windows)."""
    from tokenmill.eval.semantic_contamination import windows

    schema = pa.schema(
        [(f, pa.string() if f in ("bucket", "shard", "doc_id", "source", "url") else pa.int64()) for f in DOC_FIELDS]
    )
    offsets, block, n_windows, n_docs = [0], [], 0, 0
    with ipc.new_file(str(out / "docs.arrow"), schema) as writer, open(out / "windows.bin", "wb") as vec_out:
        batch: list[dict[str, Any]] = []
        for row in training_rows(run, store):
            n_docs += 1
            batch.append(
                {f: (None if row[f] is None else (row[f] if f in ("g", "doc", "n_tokens") else str(row[f]))) for f in DOC_FIELDS}
            )
            if embedder is not None:
                texts = [w.text for w in windows(row["doc_id"], row["text"], WINDOW)]
                block += texts
                n_windows += len(texts)
                offsets.append(n_windows)
                if len(block) >= EMBED_BLOCK:
                    vec_out.write(embedder.embed(block).astype(np.float16).tobytes())
                    block = []
            if len(batch) >= 4096:
                writer.write_table(pa.Table.from_pylist(batch, schema))
                batch = []
        writer.write_table(pa.Table.from_pylist(batch, schema))
        if block:
            vec_out.write(embedder.embed(block).astype(np.float16).tobytes())
    np.asarray(offsets if embedder is not None else [0] * (n_docs + 1), dtype=np.int64).tofile(out / "win_off.bin")
    return n_docs, n_windows


# ---------------------------------------------------------------- the n-gram inverted index
def _partition_bits(windows: int) -> int:
    """log2 of the partitions: each holds at most PARTITION_BYTES of 16-byte (hash, doc) pairs."""
    return max(0, int(np.ceil(np.log2(max(1, windows * 16 / PARTITION_BYTES)))))


def write_ngrams(store: TokenStore, out: Path, n: int) -> int:
    """ngrams-<p>.hash / .doc for every partition p; returns the number of partition bits."""
    shards = train_shards(store)
    bits = _partition_bits(sum(s.n_tokens for _, s in shards))
    shift = np.uint64(64 - bits) if bits else None
    spill = [(open(out / f"spill-{p}.hash", "wb"), open(out / f"spill-{p}.doc", "wb")) for p in range(1 << bits)]
    base = 0
    for _, shard in shards:
        for start in range(0, max(shard.n_tokens - n + 1, 0), CHUNK):
            stop = min(start + CHUNK, shard.n_tokens - n + 1)
            h = ngram_hashes(np.asarray(shard.tokens[start : stop + n - 1]), n)
            pos = np.arange(start, stop, dtype=np.int64)
            doc = np.searchsorted(shard.offsets, pos, side="right") - 1
            ok = pos + n <= shard.offsets[doc + 1]  # a window that crosses into the next document is neither's
            h, doc = h[ok], doc[ok] + base
            part = (h >> shift).astype(np.int64) if shift is not None else np.zeros(h.size, dtype=np.int64)
            for p in np.unique(part):
                sel = part == p
                spill[p][0].write(h[sel].tobytes())
                spill[p][1].write(doc[sel].tobytes())
        base += shard.n_docs
    for p, (fh, fd) in enumerate(spill):
        fh.close()
        fd.close()
        h, d = np.fromfile(out / f"spill-{p}.hash", np.uint64), np.fromfile(out / f"spill-{p}.doc", np.int64)
        order = np.lexsort((d, h))
        h, d = h[order], d[order]
        keep = np.ones(h.size, dtype=bool)
        keep[1:] = (h[1:] != h[:-1]) | (d[1:] != d[:-1])  # one posting per (n-gram, document)
        h[keep].tofile(out / f"ngrams-{p}.hash")
        d[keep].tofile(out / f"ngrams-{p}.doc")
        os.remove(out / f"spill-{p}.hash")
        os.remove(out / f"spill-{p}.doc")
    return bits


# ---------------------------------------------------------------- batch lineage
def write_steps(store: TokenStore, loader: Any, last_step: int, out: Path) -> int:
    """steps.bin / steps_off.bin: the sampler replayed over steps 1..last_step. Returns the pairs kept."""
    base, g0 = 0, {}
    for name, shard in train_shards(store):
        g0[name] = base
        base += shard.n_docs
    docs, steps = [], []
    for step in range(1, last_step + 1):
        g = {g0[span.shard] + span.doc for src in loader.global_provenance(step) for span in src.spans}
        docs.append(np.fromiter(g, dtype=np.int64, count=len(g)))
        steps.append(np.full(len(g), step, dtype=np.int32))
    d = np.concatenate(docs) if docs else np.zeros(0, np.int64)
    s = np.concatenate(steps) if steps else np.zeros(0, np.int32)
    order = np.lexsort((s, d))
    d, s = d[order], s[order]
    s.tofile(out / "steps.bin")
    np.searchsorted(d, np.arange(base + 1), side="left").astype(np.int64).tofile(out / "steps_off.bin")
    return int(s.size)


# ---------------------------------------------------------------- publishing
def publish(staged: Path, final: Path) -> None:
    """Replace `final` (tokenmill's own trace index, or nothing) by `staged` with renames."""
    write_marker(staged, STAGE, outputs=[p.name for p in staged.iterdir()])
    if not final.exists():
        os.replace(staged, final)
        return
    claim_dir(final, STAGE)  # refuses a directory tokenmill did not write
    aside = temporary_name(final)
    os.replace(final, aside)
    os.replace(staged, final)
    shutil.rmtree(aside)


def read_key(final: Path) -> dict[str, Any] | None:
    try:
        return json_limits.load_file((final / "index.json"))
    except (OSError, ValueError):
        return None
