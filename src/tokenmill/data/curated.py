"""Read side of `curated/`: the buckets and their documents, in a stable order.

Token stages read only the columns they need (`id`, `text`), part by part, so a corpus larger
than memory streams through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq


def curated_buckets(curated_dir: Path) -> list[str]:
    """Bucket names: every sub-directory except the `_`-prefixed ones (`_rejected`)."""
    if not curated_dir.is_dir():
        raise FileNotFoundError(f"{curated_dir}: no curated data here (run `tokenmill curate CONFIG`)")
    return sorted(p.name for p in curated_dir.iterdir() if p.is_dir() and not p.name.startswith("_"))


def bucket_parts(curated_dir: Path, bucket: str) -> list[Path]:
    return sorted((curated_dir / bucket).glob("part-*.parquet"))


def iter_documents(curated_dir: Path, bucket: str, batch_rows: int = 1024) -> Iterator[tuple[str, str]]:
    """(id, text) of every kept document of a bucket, part by part, row order preserved."""
    for part in bucket_parts(curated_dir, bucket):
        pf = pq.ParquetFile(part)
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["id", "text"]):
            ids = batch.column("id").to_pylist()
            texts = batch.column("text").to_pylist()
            for doc_id, text in zip(ids, texts):
                if text is None:
                    raise ValueError(f"{part}: document {doc_id} has no text")
                yield doc_id, text


ID_BATCH = 65536  # ids read at once by passes that only count or hash them


def part_id_batches(part: Path, batch_rows: int = ID_BATCH) -> Iterator[list[str]]:
    """The ids of one part, at most `batch_rows` at a time, row order preserved."""
    for batch in pq.ParquetFile(part).iter_batches(batch_size=batch_rows, columns=["id"]):
        yield batch.column("id").to_pylist()


def document_ids(curated_dir: Path, bucket: str) -> list[str]:
    return [i for part in bucket_parts(curated_dir, bucket) for i in pq.read_table(part, columns=["id"]).column("id").to_pylist()]
