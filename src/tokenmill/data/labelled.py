"""A labelled file streamed into a bounded training sample: memory set by settings, not by the file.

The classify and safety steps train their classifiers from a JSONL file of {"text", "label"} the
user brings. Holding every text and its features grew with the file (a 100 MB file took 1.4 GB).
Here the file is read one line at a time (a line longer than `curate.max_doc_bytes` is refused,
naming file:line, before the rest of it is read), each record is normalized and turned into its
hashed features at once (the text is dropped), and per label only the `max_examples` records with
the smallest content hash are kept (a bottom-k sample: the same records whatever the file's order,
like the held-out split). A file with at most `max_examples` records per label is used whole, in
file order, so its model is the one it was before the sample existed.

Memory: at most `max_examples` per label x (2 x a record's words, capped at 2^dim_bits) feature
entries of 8 bytes (int32 bucket, float32 value), plus one line of at most max_doc_bytes; never
more than MAX_LABELS labels.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import xxhash

from tokenmill.data.jsonl import bounded_lines, json_objects

MAX_LABELS = 256  # a K-label model holds K x 2^dim_bits weights: more labels is a mistake, not a task
SAMPLE_SEED = 1  # the sample's hash differs from the held-out split's (seed 0), so neither biases the other

Features = tuple[np.ndarray, np.ndarray]


@dataclass(order=True)
class Example:
    """One kept record: its line, features and whether it is held out."""

    line: int
    features: Features = field(compare=False)
    held: bool = field(default=False, compare=False)


@dataclass
class Sample:
    """Per label, the kept examples in file order; `counts`: every record per label in the file."""

    kept: dict[str, list[Example]]
    counts: Counter[str]

    def examples(self) -> int:
        return sum(self.counts.values())


def labelled_records(path: Path, max_line_bytes: int, error: type[Exception]) -> Iterator[tuple[int, dict]]:
    """(line, object) of a labelled JSONL file, streamed; a line over `max_line_bytes` is one error."""
    with path.open("rb") as fh:
        yield from json_objects(bounded_lines(fh, path, max_line_bytes, error, "curate.max_doc_bytes"), path, error)


def bottom_k(
    records: Iterable[tuple[int, str, str]],
    max_examples: int,
    featurize: Callable[[str], Features],
    held: Callable[[str], bool],
    error: type[Exception],
    where: str,
) -> Sample:
    """Per label, the `max_examples` (line, text) with the smallest hash of the text, featurized
    (`held`: whether a text is held out); every record's label counted. More than MAX_LABELS
    labels raises `error` naming `where` and the line."""
    heaps: dict[str, list[tuple[int, int, Example]]] = {}
    counts: Counter[str] = Counter()
    for line, text, label in records:
        counts[label] += 1
        if len(counts) > MAX_LABELS:
            raise error(f"{where}:{line}: label {label!r} is one more than the {MAX_LABELS} labels a file may have")
        h = xxhash.xxh3_64_intdigest(text.encode("utf-8"), seed=SAMPLE_SEED)
        heap = heaps.setdefault(label, [])
        if len(heap) >= max_examples and h >= -heap[0][0]:
            continue  # not among the smallest hashes so far: never featurized
        idx, val = featurize(text)
        item = (-h, -line, Example(line, (idx.astype(np.int32), val.astype(np.float32)), held(text)))
        if len(heap) < max_examples:
            heapq.heappush(heap, item)
        else:
            heapq.heapreplace(heap, item)
    return Sample({label: sorted(e for _, _, e in heap) for label, heap in heaps.items()}, counts)


def in_file_order(kept: dict[str, list[Example]], labels: Iterable[str]) -> tuple[list[Example], list[str]]:
    """The kept examples of the given labels, merged in file order, with their labels."""
    pairs = sorted((e, label) for label in labels for e in kept.get(label, []))
    return [e for e, _ in pairs], [label for _, label in pairs]
