"""`tokenmill trace RUN --text "…"`: the training documents an output most likely came from
(tracing outputs back: docs/evaluation.md), with the steps that trained on them.

For each output the nearest training documents are listed with their id, bucket, source, the
exact token n-gram overlap (how many of the output's n-grams, n = eval.contamination_n, occur
in the document, confirmed token by token), the embedding similarity (the best cosine between the
output and a window of the document, SIF embeddings trained on the run's text: eval/embedding.py)
and the training steps whose global batch held the document (batch lineage, from the run's
deterministic sampler).

Candidates never come from a dense comparison with every document held in memory: the n-gram
side looks the output's hashed n-grams up in an on-disk inverted index (partitioned, sorted,
memory-mapped; trace_index.py), the embedding side scans the memory-mapped window vectors block
by block keeping a top-k per output. Memory of a query: O(outputs · (n-grams + k) + postings of
the output's n-grams + EMBED_SCAN rows · dim), whatever the corpus size. Disk: 16 bytes per
training token (n-grams) + 2 · dim bytes per window of WINDOW words + 4 bytes per (document,
trained step) + a row per document. The index is built on first use and cached under
`<run>/trace/` (rebuilt when the store, the data order, the tokenizer, n, the embedder settings
or the trained steps change); a second trace reads only it.

Lineage follows the sampler's first draw of data: a step retrained after a guard rollback with
a new draw (train.guard) is listed with the draw the run started with.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from tokenmill import json_limits
from tokenmill.data.jsonl import capped_lines
from tokenmill.errors import UserError
from tokenmill.eval import trace_index as ti
from tokenmill.eval.contamination import ngram_hashes
from tokenmill.runs import RunDir
from tokenmill.tokens.store import TokenStore

EMBED_SCAN = 65536  # window vectors scored at once
CANDIDATES = 4  # candidates per side, as a multiple of --top
STEPS_SHOWN = 50  # steps listed per document (the count is always whole)
TRACE_BATCH = 64  # outputs traced together (one embedding scan serves them all)
# An output is cut at this many training contexts: the model cannot have produced a longer one
# from a single context, and an n-gram query costs memory per token.
OUTPUT_CONTEXTS = 4
BYTES_PER_TOKEN = 8  # about twice a BPE token's bytes in English text: the cap errs long


class TraceError(UserError, ValueError):
    """A trace that cannot run: no run there, no token store, an empty output."""


def _open(run: RunDir) -> tuple[TokenStore, Any]:
    from tokenmill.train.replay import _loader

    if not run.sub("tokens", "_meta.json").exists():
        raise TraceError(f"{run.sub('tokens')}: no token store in this run (run `tokenmill tokenize CONFIG` first)")
    store = TokenStore(run.sub("tokens"))
    return store, _loader(run, store)


def build_index(run: RunDir) -> Path:
    """The run's trace index, built (and published atomically) unless a current one is there."""
    store, loader = _open(run)
    final = run.sub("trace")
    last = ti.trained_steps(run, loader.max_steps)
    key = ti.index_key(run, store, loader, last)
    if (ti.read_key(final) or {}).get("key") == key:
        return final
    staged = ti.temporary_name(final)
    staged.mkdir(parents=True)
    t0 = time.perf_counter()
    embedder, note = _embedder(run, store, staged)
    n_docs, n_windows = ti.write_documents(run, store, staged, embedder)
    bits = ti.write_ngrams(store, staged, key["n"])
    pairs = ti.write_steps(store, loader, last, staged)
    info = {"key": key, "docs": n_docs, "windows": n_windows, "partition_bits": bits, "step_pairs": pairs}
    info.update(embedding=note, build_seconds=round(time.perf_counter() - t0, 3))
    (staged / "index.json").write_text(json.dumps(info, indent=1))
    ti.publish(staged, final)
    return final


def _embedder(run: RunDir, store: TokenStore, out: Path) -> tuple[Any, str | None]:
    """The SIF embedder trained on the training documents, or (None, why) when the text is too small."""
    from tokenmill.eval.semantic_contamination import TrainingDocuments, train_embedder

    cfg = run.config.eval.semantic_contamination
    try:
        emb = train_embedder(TrainingDocuments(run.sub("curated"), store), cfg.dim, cfg.max_train_words, run.config.seed)
    except ValueError as exc:  # too few distinct words for the vectors: n-grams still trace
        return None, f"no embedding: {exc}"
    emb.save(out / "embedder")
    return emb, None


@dataclass
class TraceIndex:
    """The memory-mapped index of one run (every array on disk)."""

    path: Path
    info: dict[str, Any]
    store: TokenStore

    @classmethod
    def open(cls, run: RunDir) -> "TraceIndex":
        path = build_index(run)
        return cls(path, json_limits.load_file((path / "index.json")), TokenStore(run.sub("tokens")))

    def _mm(self, name: str, dtype: Any) -> np.ndarray:
        p = self.path / name
        return np.memmap(p, dtype=dtype, mode="r") if p.stat().st_size else np.zeros(0, dtype=dtype)

    def docs(self, g: list[int]) -> list[dict[str, Any]]:
        table = pa.ipc.open_file(pa.memory_map(str(self.path / "docs.arrow"))).read_all()
        return table.take(pa.array(g, type=pa.int64())).to_pylist()

    def steps(self, g: int) -> np.ndarray:
        off = self._mm("steps_off.bin", np.int64)
        return np.asarray(self._mm("steps.bin", np.int32)[off[g] : off[g + 1]])

    def ngram_hits(self, tokens: np.ndarray) -> dict[int, int]:
        """{document g: how many of the output's n-gram windows its postings hold}."""
        n, bits = self.info["key"]["n"], self.info["partition_bits"]
        h = ngram_hashes(tokens, n)
        part = (h >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(h.size, np.int64)
        found: list[np.ndarray] = []
        for p in np.unique(part):
            keys, docs = self._mm(f"ngrams-{p}.hash", np.uint64), self._mm(f"ngrams-{p}.doc", np.int64)
            q = h[part == p]
            lo, hi = np.searchsorted(keys, q, "left"), np.searchsorted(keys, q, "right")
            found += [np.asarray(docs[a:b]) for a, b in zip(lo, hi) if b > a]
        if not found:
            return {}
        g, c = np.unique(np.concatenate(found), return_counts=True)
        return dict(zip(g.tolist(), c.tolist()))

    def embedder(self) -> Any:
        from tokenmill.eval.embedding import Embedder

        return Embedder.load(self.path / "embedder") if self.info.get("embedding") is None else None

    def window_vectors(self, dim: int) -> np.ndarray:
        return self._mm("windows.bin", np.float16).reshape(-1, dim)

    def doc_similarity(self, q: np.ndarray, g: int) -> float | None:
        """The best cosine of the output's embedding with a window of document g."""
        off = self._mm("win_off.bin", np.int64)
        rows = self.window_vectors(q.size)[off[g] : off[g + 1]]
        return float((rows.astype(np.float32) @ q).max()) if rows.shape[0] else None

    def window_doc(self, rows: np.ndarray) -> np.ndarray:
        off = self._mm("win_off.bin", np.int64)
        return np.searchsorted(off, rows, side="right") - 1

    def doc_tokens(self, row: dict[str, Any]) -> np.ndarray:
        shard = next(s for name, s in ti.train_shards(self.store) if name == row["shard"])
        return shard.doc(int(row["doc"])).astype(np.int64)


def exact_overlap(out: np.ndarray, doc: np.ndarray, n: int) -> int:
    """How many of the output's n-gram windows occur in the document, token for token."""
    if out.size < n or doc.size < n:
        return 0
    hq, hd = ngram_hashes(out, n), ngram_hashes(doc, n)
    order = np.argsort(hd, kind="stable")
    hs = hd[order]
    k = np.minimum(np.searchsorted(hs, hq), hs.size - 1)
    qi = np.nonzero(hs[k] == hq)[0]
    win_q = np.lib.stride_tricks.sliding_window_view(out, n)[qi]
    win_d = np.lib.stride_tricks.sliding_window_view(doc, n)[order[k[qi]]]
    return int((win_q == win_d).all(axis=1).sum())


def _embedding_candidates(
    index: TraceIndex, emb: Any, texts: list[str], k: int
) -> tuple[np.ndarray | None, list[dict[int, float]]]:
    """The outputs' embeddings and, per output, the documents of its k most similar windows
    (one scan of the window vectors for all outputs, EMBED_SCAN rows at a time)."""
    if emb is None:
        return None, [{} for _ in texts]
    q = emb.embed(texts)  # [outputs, dim], unit rows (zero for an output with no known word)
    vecs = index.window_vectors(q.shape[1])
    best_s = np.full((len(texts), 0), -np.inf, dtype=np.float32)
    best_r = np.zeros((len(texts), 0), dtype=np.int64)
    for start in range(0, vecs.shape[0], EMBED_SCAN):
        sims = q @ vecs[start : start + EMBED_SCAN].astype(np.float32).T  # [outputs, block]
        s = np.concatenate([best_s, sims], axis=1)
        r = np.concatenate([best_r, np.broadcast_to(np.arange(start, start + sims.shape[1]), sims.shape)], axis=1)
        keep = np.argsort(-s, axis=1, kind="stable")[:, :k]
        best_s, best_r = np.take_along_axis(s, keep, 1), np.take_along_axis(r, keep, 1)
    out = []
    for i in range(len(texts)):
        docs: dict[int, float] = {}
        for g, sim in zip(index.window_doc(best_r[i]).tolist(), best_s[i].tolist()):
            docs[g] = max(docs.get(g, -1.0), sim)
        out.append(docs if np.linalg.norm(q[i]) > 0 else {})
    return q, out


def _encode(run: RunDir, texts: list[str]) -> list[np.ndarray]:
    from tokenmill.tokenizer.bpe import load_tokenizer

    path = run.sub("tokenizer", "tokenizer.json")
    if not path.exists():
        raise TraceError(f"{path}: the run has no tokenizer to encode the output with (run `tokenmill tokenizer train CONFIG`)")
    tok = load_tokenizer(path)
    return [np.asarray(tok.encode(t, add_special_tokens=False).ids, dtype=np.int64) for t in texts]


def trace_outputs(run: RunDir, texts: list[str], top: int = 5, tokens: list[np.ndarray] | None = None) -> list[dict[str, Any]]:
    """Per output: its n-gram count and its `top` nearest training documents, ranked by exact
    n-gram overlap, then embedding similarity. `tokens`: the outputs' ids when the caller has them
    (a memorized continuation), else the run's tokenizer encodes the texts."""
    if top < 1:
        raise TraceError(f"--top must be >= 1, got {top}")
    for i, t in enumerate(texts):
        if not t.strip():
            raise TraceError(f"output {i + 1} is empty: nothing to trace")
    index = TraceIndex.open(run)
    n = index.info["key"]["n"]
    ids = tokens if tokens is not None else _encode(run, texts)
    q, by_embedding = _embedding_candidates(index, index.embedder(), texts, CANDIDATES * top)
    results = []
    for i, text in enumerate(texts):
        hits = index.ngram_hits(ids[i])
        cands = sorted(hits, key=lambda g: -hits[g])[: CANDIDATES * top]
        cands += [g for g in sorted(by_embedding[i], key=lambda g: -by_embedding[i][g]) if g not in cands][: CANDIDATES * top]
        rows = index.docs(cands) if cands else []
        scored = []
        for row in rows:
            overlap = exact_overlap(ids[i], index.doc_tokens(row), n) if row["g"] in hits else 0
            sim = index.doc_similarity(q[i], row["g"]) if q is not None and np.linalg.norm(q[i]) > 0 else None
            scored.append((overlap, -1.0 if sim is None else sim, row, sim))
        scored.sort(key=lambda x: (-x[0], -x[1], x[2]["g"]))
        results.append(
            {
                "text": text,
                "ngrams": max(int(ids[i].size) - n + 1, 0),
                "n": n,
                "documents": [_doc_entry(index, row, overlap, sim) for overlap, _, row, sim in scored[:top]],
            }
        )
    return results


def _doc_entry(index: TraceIndex, row: dict[str, Any], overlap: int, sim: float | None) -> dict[str, Any]:
    steps = index.steps(row["g"])
    return {
        "doc_id": row["doc_id"],
        "bucket": row["bucket"],
        "source": row["source"],
        "url": row["url"],
        "shard": row["shard"],
        "doc": row["doc"],
        "ngram_overlap": overlap,
        "similarity": None if sim is None else round(sim, 4),
        "steps_count": int(steps.size),
        "steps": steps[:STEPS_SHOWN].tolist(),
    }


@dataclass
class OutputFile:
    """The outputs of a file, streamed: JSONL with a 'text' field per line (when its first non-blank
    line starts with '{'), or plain text, one output per line. Each line is read with at most
    `max_bytes` + 1 MiB held (data/jsonl.capped_lines): a longer one is cut to its first `max_bytes`
    and counted in `cut`, so memory is bounded by the cap, not by the file."""

    path: Path
    max_bytes: int
    cut: int = 0

    def __iter__(self) -> Iterator[str]:
        jsonl: bool | None = None
        try:
            with self.path.open("rb") as fh:
                for no, (line, cut) in enumerate(capped_lines(fh, self.max_bytes), 1):
                    if not line.strip():
                        continue
                    self.cut += cut
                    jsonl = line.lstrip().startswith("{") if jsonl is None else jsonl
                    yield self._text(line, no) if jsonl else line.rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"{self.path}: unreadable ({getattr(exc, 'strerror', None) or exc})") from exc
        if jsonl is None:
            raise TraceError(f"{self.path}: no outputs in it (one per line, or JSONL with a 'text' field)")

    def _text(self, line: str, no: int) -> str:
        try:
            rec = json_limits.loads(line)
        except json_limits.TooDeep as exc:
            raise TraceError(f"{self.path}:{no}: {exc}") from None
        except ValueError as exc:  # a cut line is no longer whole JSON: it says so
            why = f"longer than {self.max_bytes:,} bytes" if len(line.encode()) >= self.max_bytes else getattr(exc, "msg", exc)
            raise TraceError(f"{self.path}:{no}: not valid JSON ({why})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
            raise TraceError(f"{self.path}:{no}: a JSONL output needs a string 'text' field")
        return rec["text"]


def max_output_bytes(run: RunDir) -> int:
    """An output's cap: OUTPUT_CONTEXTS training contexts at BYTES_PER_TOKEN bytes a token."""
    return OUTPUT_CONTEXTS * run.config.train.seq_len * BYTES_PER_TOKEN


def read_outputs(path: Path, max_bytes: int = 1 << 20) -> list[str]:
    """Every output of a small file (OutputFile holds one at a time)."""
    return list(OutputFile(path, max_bytes))


def trace_stream(run: RunDir, texts: Iterable[str], top: int = 5) -> Iterator[dict[str, Any]]:
    """trace_outputs over TRACE_BATCH outputs at a time: the memory of one batch, whatever the count."""
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == TRACE_BATCH:
            yield from trace_outputs(run, batch, top)
            batch = []
    if batch:
        yield from trace_outputs(run, batch, top)


MAX_TRACED = 20  # memorization hits traced per evaluation (bounds the eval's time)
REPORT_TOP = 3  # documents kept beside each hit


def attach_traces(run: RunDir, out: dict[str, Any], canary_texts: list[str]) -> None:
    """The nearest training documents beside every memorization hit (replacing its token ids by
    its text) and every canary of an evaluation record. A trace that cannot run leaves a note."""
    from tokenmill.tokenizer.bpe import load_tokenizer

    mem = out.get("memorization") or {}
    hits = mem.get("hits") or []
    try:
        if hits:
            tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
            ids = [np.asarray(h["tokens"], dtype=np.int64) for h in hits[:MAX_TRACED]]
            found = trace_outputs(run, [tok.decode(t.tolist()) for t in ids], REPORT_TOP, tokens=ids)
            mem["hits"] = [{"bucket": h["bucket"], **f} for h, f in zip(hits, found)]
            mem["hits_total"] = len(hits)
        rows = (out.get("canaries") or {}).get("canaries") or []
        if rows and len(canary_texts) == len(rows):
            for row, f in zip(rows, trace_outputs(run, canary_texts, REPORT_TOP)):
                row["trace"] = f["documents"]
    except (UserError, ValueError, OSError) as exc:  # the audit numbers stand without their traces
        mem.pop("hits", None)
        out["trace_error"] = " ".join(str(exc).split())
