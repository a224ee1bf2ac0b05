"""The semantic back-check of contamination (the embedding back-check beside
the 13-gram rule of GPT-3, Brown et al. 2020): benchmark items whose *meaning* appears in the training text, in other words.

Training documents are cut into overlapping windows of about an item's length (8, 16, 32 or 64
words, whichever is nearest on a log scale); every window and every eval item is embedded with the SIF embedder trained on the training text
(embedding.py), and an item is flagged when its most similar window reaches `threshold` cosine
similarity. The flagged item keeps the document id and the text of that window, so a reviewer sees
what matched. Windows are embedded block by block and only the best match per item is kept, and
the training documents stream from the curated parts: memory is O(items + block) for the scan
and `max_train_words` of text for the embedder, whatever the size of the corpus.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import xxhash

from tokenmill.data.curated import iter_documents
from tokenmill.eval.embedding import WORD, Embedder, words

BLOCK = 8192  # training windows embedded at once


@dataclass
class Window:
    doc_id: str
    start: int  # character offsets of the window in its document
    end: int
    text: str


SIZES = (8, 16, 32, 64)  # window lengths in words; each item is compared at the one nearest its own


def window_size(item: str) -> int:
    """The window length (one of SIZES) nearest the item's length in words, on a log scale."""
    n = max(len(words(item)), 1)
    return min(SIZES, key=lambda s: abs(np.log2(s) - np.log2(n)))


def windows(doc_id: str, text: str, size: int) -> Iterator[Window]:
    """Windows of `size` words every size // 2 words (each word in two windows), the last one
    flush with the end; a document shorter than `size` is one window."""
    spans = [m.span() for m in WORD.finditer(text)]
    if not spans:
        return
    stride = max(1, size // 2)
    starts = list(range(0, max(len(spans) - size, 0) + 1, stride))
    if starts[-1] + size < len(spans):
        starts.append(len(spans) - size)
    for s in starts:
        a, b = spans[s][0], spans[min(s + size, len(spans)) - 1][1]
        yield Window(doc_id, a, b, text[a:b])


@dataclass
class Match:
    score: float
    window: Window | None


class _Scan:
    """The running best training window of each of a group of items, windows embedded by blocks."""

    def __init__(self, embedder: Embedder, items: list[str]):
        self.embedder, self.q = embedder, embedder.embed(items)
        self.best = [Match(-1.0, None) for _ in items]
        self.block: list[Window] = []

    def add(self, window: Window) -> None:
        self.block.append(window)
        if len(self.block) >= BLOCK:
            self.flush()

    def flush(self) -> None:
        if not self.block:
            return
        sims = self.q @ self.embedder.embed([w.text for w in self.block]).T  # [items, block]
        arg = sims.argmax(axis=1)
        for i, j in enumerate(arg):
            if sims[i, j] > self.best[i].score:
                self.best[i] = Match(float(sims[i, j]), self.block[j])
        self.block.clear()


def best_matches(embedder: Embedder, items: list[str], docs: Iterable[tuple[str, str]], size: int | None = None) -> list[Match]:
    """For each item, its most similar training window (cosine of SIF embeddings); windows of the
    length nearest the item's (or `size` words for all), so a short item is not diluted by the
    words around it and a long one is not cut short. One pass over the documents, which may be a
    stream: each document is cut at every length in use, and only the best window per item stays."""
    sizes = [size or window_size(t) for t in items]
    groups = {n: [i for i, s in enumerate(sizes) if s == n] for n in sorted(set(sizes))}
    scans = {n: _Scan(embedder, [items[i] for i in group]) for n, group in groups.items()}
    for doc_id, text in docs:
        for n, scan in scans.items():
            for w in windows(doc_id, text, n):
                scan.add(w)
    best = [Match(-1.0, None) for _ in items]
    for n, scan in scans.items():
        scan.flush()
        for i, m in zip(groups[n], scan.best):
            best[i] = m
    return best


def back_check(
    embedder: Embedder, tasks: dict[str, list[str]], docs: Iterable[tuple[str, str]], threshold: float, examples: int = 5
) -> dict[str, dict]:
    """Per task: items, how many reach `threshold` against the training windows, and the top
    `examples` matches (item, score, document id, matched text). One pass over the documents
    for all tasks."""
    flat = [(name, item) for name, items in tasks.items() for item in items]
    found = best_matches(embedder, [item for _, item in flat], docs)
    out = {}
    for name, items in tasks.items():
        matches = [m for (n, _), m in zip(flat, found) if n == name]
        flagged = sorted(((m.score, i) for i, m in enumerate(matches) if m.score >= threshold), reverse=True)
        out[name] = {
            "items": len(items),
            "flagged": len(flagged),
            "share": len(flagged) / max(len(items), 1),
            "threshold": threshold,
            "max_score": max((m.score for m in matches), default=None),
            "examples": [
                {"item": items[i], "score": s, "doc_id": w.doc_id, "match": _clip(w.text)}
                for s, i in flagged[:examples]
                if (w := matches[i].window) is not None
            ],
        }
    return out


def _clip(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- a run's semantic back-check (eval.semantic_contamination) -----------------------------------
class TrainingDocuments:
    """(curated id, text) of every training document of a token store, in store order, read
    from the curated parts again on every iteration (no text and no id set is kept).

    The store holds each bucket's training documents in curated order (tokenize writes the
    parts in order, rows in order), so a merge of the two streams finds them: a curated
    document is training when it is the next id of the store's train split."""

    def __init__(self, curated: Path, store):
        self.curated, self.store = curated, store

    def _train_ids(self, bucket: str) -> Iterator[str]:
        for shard in self.store.shards(bucket, "train"):
            yield from shard.doc_table().column("id").to_pylist()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for bucket in self.store.buckets:
            want = self._train_ids(bucket)
            nxt = next(want, None)
            for doc_id, text in iter_documents(self.curated, bucket):
                if doc_id == nxt:
                    yield doc_id, text
                    nxt = next(want, None)
            if nxt is not None:
                raise ValueError(
                    f"training document {nxt} of bucket {bucket!r} is not in {self.curated} in the "
                    "token store's order: the token store was not made from this curated data "
                    "(run `tokenmill tokenize CONFIG` again)"
                )


def _priority(doc_id: str, seed: int) -> int:
    return xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF)


def train_embedder(docs: Iterable[tuple[str, str]], dim: int, max_words: int, seed: int) -> Embedder:
    """The SIF embedder trained on the documents first in a seeded order (a hash of seed and id)
    until they reach `max_words` words, its common component fitted on a seeded sample of the
    windows of the first 2000 of them. One pass over a stream of documents, holding only the
    text it trains on: a heap of the documents first in the order whose words reach `max_words`."""
    heap: list[tuple[int, int, str, str]] = []  # (-priority, words, id, text): the last in order on top
    total = 0
    for doc_id, text in docs:
        n = len(text.split())
        heapq.heappush(heap, (-_priority(doc_id, seed), n, doc_id, text))
        total += n
        while total - heap[0][1] >= max_words:  # the rest reach max_words without the last one
            total -= heapq.heappop(heap)[1]
    chosen = [(doc_id, text) for _, _, doc_id, text in sorted(heap, reverse=True)]
    emb = Embedder.train([text for _, text in chosen], dim=dim, seed=seed)
    rng = np.random.default_rng(seed)
    sample = [w.text for doc_id, text in chosen[:2000] for w in windows(doc_id, text, 32)]
    emb.fit_common([sample[i] for i in rng.permutation(len(sample))[:5000]])
    return emb


def semantic_back_check(run, store, tasks: dict[str, list[str]], cfg) -> dict[str, dict]:
    """The run's check: the embedder trained on its training documents (saved under
    <run>/contamination/embedder for inspection), every task's items against every document.
    The documents stream from disk twice (training the embedder, the scan)."""
    docs = TrainingDocuments(run.sub("curated"), store)
    if next(iter(docs), None) is None:
        return {
            name: {
                "items": len(items),
                "flagged": 0,
                "share": 0.0,
                "threshold": cfg.threshold,
                "note": "no curated training documents found",
            }
            for name, items in tasks.items()
        }
    emb = train_embedder(docs, cfg.dim, cfg.max_train_words, run.config.seed)
    emb.save(run.sub("contamination", "embedder"))
    return back_check(emb, tasks, docs, cfg.threshold)
