"""The semantic back-check of contamination (seed 002 §2.5–§2.6: the embedding back-check beside
the 13-gram rule): benchmark items whose *meaning* appears in the training text, in other words.

Training documents are cut into overlapping windows of about an item's length (8, 16, 32 or 64
words, whichever is nearest on a log scale); every window and every eval item is embedded with the SIF embedder trained on the training text
(embedding.py), and an item is flagged when its most similar window reaches `threshold` cosine
similarity. The flagged item keeps the document id and the text of that window, so a reviewer sees
what matched. Windows are embedded block by block and only the best match per item is kept:
memory is O(items + block), whatever the size of the corpus.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

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


def best_matches(embedder: Embedder, items: list[str], docs: Iterable[tuple[str, str]] | list[tuple[str, str]],
                 size: int | None = None) -> list[Match]:
    """For each item, its most similar training window (cosine of SIF embeddings); windows of the
    length nearest the item's (or `size` words for all), so a short item is not diluted by the
    words around it and a long one is not cut short. One pass over the documents per length used."""
    docs = list(docs)
    sizes = [size or window_size(t) for t in items]
    best = [Match(-1.0, None) for _ in items]
    for length in sorted(set(sizes)):
        group = [i for i, s in enumerate(sizes) if s == length]
        for i, m in zip(group, _scan(embedder, [items[i] for i in group], docs, length)):
            best[i] = m
    return best


def _scan(embedder: Embedder, items: list[str], docs: list[tuple[str, str]], size: int) -> list[Match]:
    q = embedder.embed(items)
    best = [Match(-1.0, None) for _ in items]
    block: list[Window] = []

    def flush() -> None:
        sims = q @ embedder.embed([w.text for w in block]).T  # [items, block]
        arg = sims.argmax(axis=1)
        for i, j in enumerate(arg):
            if sims[i, j] > best[i].score:
                best[i] = Match(float(sims[i, j]), block[j])
        block.clear()

    for doc_id, text in docs:
        for w in windows(doc_id, text, size):
            block.append(w)
            if len(block) >= BLOCK:
                flush()
    if block:
        flush()
    return best


def back_check(embedder: Embedder, tasks: dict[str, list[str]], docs: list[tuple[str, str]],
               threshold: float, examples: int = 5) -> dict[str, dict]:
    """Per task: items, how many reach `threshold` against the training windows, and the top
    `examples` matches (item, score, document id, matched text)."""
    out = {}
    for name, items in tasks.items():
        matches = best_matches(embedder, items, docs)
        flagged = sorted(((m.score, i) for i, m in enumerate(matches) if m.score >= threshold), reverse=True)
        out[name] = {"items": len(items), "flagged": len(flagged), "share": len(flagged) / max(len(items), 1),
                     "threshold": threshold, "max_score": max((m.score for m in matches), default=None),
                     "examples": [{"item": items[i], "score": s, "doc_id": matches[i].window.doc_id,
                                   "match": _clip(matches[i].window.text)}
                                  for s, i in flagged[:examples] if matches[i].window is not None]}
    return out


def _clip(text: str, limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- a run's semantic back-check (eval.semantic_contamination) -----------------------------------
def training_documents(run, store) -> list[tuple[str, str]]:
    """(curated id, text) of every training document of the run's token store, in store order."""
    import pyarrow.parquet as pq

    train_ids = {i for b in store.buckets for sh in store.shards(b, "train") for i in sh.doc_table().column("id").to_pylist()}
    docs = []
    for part in sorted(run.sub("curated").glob("*/*.parquet")):
        if part.parent.name.startswith(("_", ".")):
            continue
        table = pq.read_table(part, columns=["id", "text"])
        docs += [(i, t) for i, t in zip(table.column("id").to_pylist(), table.column("text").to_pylist())
                 if i in train_ids]
    return docs


def train_embedder(docs: list[tuple[str, str]], dim: int, max_words: int, seed: int) -> Embedder:
    """The SIF embedder trained on the first `max_words` words of a seeded shuffle of the documents,
    its common component fitted on a seeded sample of their windows."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(docs))
    texts, total = [], 0
    for k in order:
        texts.append(docs[k][1])
        total += len(docs[k][1].split())
        if total >= max_words:
            break
    emb = Embedder.train(texts, dim=dim, seed=seed)
    sample = [w.text for k in order[:2000] for w in windows(docs[k][0], docs[k][1], 32)]
    emb.fit_common([sample[i] for i in rng.permutation(len(sample))[:5000]])
    return emb


def semantic_back_check(run, store, tasks: dict[str, list[str]], cfg) -> dict[str, dict]:
    """The run's check: the embedder trained on its training documents (saved under
    <run>/contamination/embedder for inspection), every task's items against every document."""
    docs = training_documents(run, store)
    if not docs:
        return {name: {"items": len(items), "flagged": 0, "share": 0.0, "threshold": cfg.threshold,
                       "note": "no curated training documents found"} for name, items in tasks.items()}
    emb = train_embedder(docs, cfg.dim, cfg.max_train_words, run.config.seed)
    emb.save(run.sub("contamination", "embedder"))
    return back_check(emb, tasks, docs, cfg.threshold)
