"""The data model of curation: raw records, curated documents, rejections, their Parquet schema.

A `RawRecord` is what a reader yields: one unit of input with where it came from, or the problem
that kept it from being read. A `Doc` is a record on its way through the steps; it ends either
as a row of `curated/<bucket>/part-*.parquet` (DOC_SCHEMA) or, with the `Rejection` that removed
it, as a row of `curated/_rejected/part-*.parquet` (REJECTED_SCHEMA). Nothing is dropped silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

# Every quality signal a curated row carries (computed by data.quality for every bucket, even
# those the rules skip, so the report can compare buckets). The schema is the contract; the
# quality module must produce exactly these keys.
QUALITY_FIELDS: dict[str, pa.DataType] = {
    "n_chars": pa.int64(),
    "n_lines": pa.int64(),
    "n_words": pa.int64(),
    "mean_word_len": pa.float64(),
    "hash_word_ratio": pa.float64(),
    "ellipsis_word_ratio": pa.float64(),
    "symbol_word_ratio": pa.float64(),
    "bullet_line_frac": pa.float64(),
    "ellipsis_line_frac": pa.float64(),
    "alpha_word_frac": pa.float64(),
    "n_stop_words": pa.int64(),
    # Gopher repetition (Rae et al. 2021, Table A1)
    "dup_line_frac": pa.float64(),
    "dup_para_frac": pa.float64(),
    "dup_line_char_frac": pa.float64(),
    "dup_para_char_frac": pa.float64(),
    **{f"top_{n}gram_char_frac": pa.float64() for n in (2, 3, 4)},
    **{f"dup_{n}gram_char_frac": pa.float64() for n in range(5, 11)},
    # C4 (Raffel et al. 2020): what its line rules keep, and its document rules' evidence
    "c4_kept_line_frac": pa.float64(),
    "c4_sentences": pa.int64(),
    "c4_lorem_ipsum_lines": pa.int64(),
    "c4_curly_bracket_lines": pa.int64(),
    "c4_javascript_lines": pa.int64(),
    "c4_policy_lines": pa.int64(),
    # FineWeb (Penedo et al. 2024)
    "line_punct_frac": pa.float64(),
    "short_line_frac": pa.float64(),
    "char_dup_frac": pa.float64(),
    "newline_word_ratio": pa.float64(),
}

# Counts of what PII masking replaced, by kind (data.pii).
PII_FIELDS: tuple[str, ...] = ("email", "phone", "ip", "card", "iban", "national_id")

# Model-based quality (data.model_quality): n-gram LM perplexity, classifier score, tier.
MODEL_QUALITY_FIELDS: dict[str, pa.DataType] = {
    "perplexity": pa.float64(), "classifier_score": pa.float64(), "tier": pa.string(),
}
# Safety (data.safety): toxicity score in [0, 1] and how many listed terms matched.
SAFETY_FIELDS: dict[str, pa.DataType] = {"toxicity": pa.float64(), "matched_terms": pa.int64()}
# Decontamination (data.decontaminate): the largest share of one eval item's n-grams found here.
CONTAMINATION_FIELDS: dict[str, pa.DataType] = {
    "max_overlap": pa.float64(), "eval_set": pa.string(), "shared_ngrams": pa.int64(),
}

QUALITY_TYPE = pa.struct([pa.field(k, t) for k, t in QUALITY_FIELDS.items()])
PII_TYPE = pa.struct([pa.field(k, pa.int64()) for k in PII_FIELDS])
MODEL_QUALITY_TYPE = pa.struct([pa.field(k, t) for k, t in MODEL_QUALITY_FIELDS.items()])
SAFETY_TYPE = pa.struct([pa.field(k, t) for k, t in SAFETY_FIELDS.items()])
CONTAMINATION_TYPE = pa.struct([pa.field(k, t) for k, t in CONTAMINATION_FIELDS.items()])
# How a document's bytes became text (data/readers/decode.py): the Python codec, the confidence
# (1.0 for a byte-order mark, valid UTF-8 or a declared charset; charset-normalizer's 1 - mess
# ratio for a detected one) and the method ("bom", "utf-8", "declared", "detected"). Null for
# text that came as Unicode strings (Parquet columns, the pydoc pages rendered in-process).
ENCODING_TYPE = pa.struct([pa.field("name", pa.string()), pa.field("confidence", pa.float64()),
                           pa.field("method", pa.string())])
LINEAGE_TYPE = pa.list_(pa.struct([pa.field("step", pa.string()), pa.field("version", pa.string())]))

DOC_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("text", pa.string()),
    pa.field("source", pa.string(), nullable=False),
    pa.field("url", pa.string()),
    pa.field("domain", pa.string()),
    pa.field("bucket", pa.string(), nullable=False),
    pa.field("language", pa.string()),
    pa.field("language_score", pa.float64()),
    pa.field("language_mixed", pa.bool_()),
    pa.field("license", pa.string()),
    pa.field("metadata", pa.string()),  # JSON of the input record's own metadata, when it had any
    pa.field("encoding", ENCODING_TYPE),  # how the bytes were decoded (null: the text came as strings)
    pa.field("quality", QUALITY_TYPE),
    pa.field("model_quality", MODEL_QUALITY_TYPE),
    pa.field("safety", SAFETY_TYPE),
    pa.field("pii", PII_TYPE),
    pa.field("dup_cluster", pa.string()),
    pa.field("dup_cluster_size", pa.int64()),
    pa.field("contamination", CONTAMINATION_TYPE),
    pa.field("lineage", LINEAGE_TYPE),
])

REJECTED_SCHEMA = pa.schema([
    *DOC_SCHEMA,
    pa.field("step", pa.string(), nullable=False),
    pa.field("rule", pa.string(), nullable=False),
    pa.field("value", pa.string()),
    pa.field("reason", pa.string()),
])


def doc_id(source: str, locator: str) -> str:
    """Stable id: xxh3-128 of source and locator (NUL-separated so 'a'+'bc' != 'ab'+'c'). A row's
    `id` is this hash unless the record named its own unique id (data/doc_ids.py)."""
    return xxhash.xxh3_128_hexdigest(f"{source}\x00{locator}".encode("utf-8"))


def format_value(value: Any) -> str:
    """A measured value as the string stored in `_rejected.value` (floats to 6 significant digits)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a document left the pipeline: the step, the rule, the measured value, in words."""

    step: str
    rule: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True)
class Encoding:
    """How a record's bytes were decoded: codec, confidence in [0, 1], method (see ENCODING_TYPE)."""

    name: str
    confidence: float
    method: str

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "confidence": self.confidence, "method": self.method}


@dataclass(slots=True)
class RawRecord:
    """One unit of input as a reader yields it, before any processing."""

    source: str  # source name: "python_stdlib:code", or the configured path of a files source
    locator: str  # stable position inside the source (relative path, "path:line", module name)
    url: str  # where a person finds it: URL, file path, "path:line"
    bucket: str
    license: str
    format: str  # how to process the text: "html", "text" or "code"
    text: str | None  # None when the record could not be read
    n_bytes: int  # raw size as read, before decoding
    problem: Rejection | None = None  # set when the record is quarantined at step "read"
    metadata: str | None = None  # JSON object of what the reader knows beyond the text (ids, language, WARC headers)
    encoding: Encoding | None = None  # how the bytes were decoded; None: the text came as strings, or was not decoded
    record_id: str | None = None  # the record's own id (a JSONL / Parquet `id`), when it has one (data/doc_ids.py)

    @property
    def id(self) -> str:
        return doc_id(self.source, self.locator)


@dataclass(slots=True)
class Doc:
    """A document travelling through the steps; becomes a curated or a rejected row."""

    id: str
    text: str | None
    source: str
    url: str
    bucket: str
    license: str
    format: str
    domain: str | None = None
    language: str | None = None
    language_score: float | None = None
    language_mixed: bool | None = None
    metadata: str | None = None
    encoding: dict[str, Any] | None = None
    quality: dict[str, Any] | None = None
    model_quality: dict[str, Any] | None = None
    safety: dict[str, Any] | None = None
    pii: dict[str, int] = field(default_factory=lambda: {k: 0 for k in PII_FIELDS})
    dup_cluster: str | None = None
    dup_cluster_size: int | None = None
    contamination: dict[str, Any] | None = None
    lineage: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def from_raw(cls, raw: RawRecord, doc_id: str | None = None) -> "Doc":
        """The record as a document; its id is `doc_id` when given (data/doc_ids.py), else raw.id."""
        return cls(id=doc_id or raw.id, text=raw.text, source=raw.source, url=raw.url, bucket=raw.bucket,
                   license=raw.license, format=raw.format, metadata=raw.metadata,
                   encoding=raw.encoding.row() if raw.encoding is not None else None)

    def row(self) -> dict[str, Any]:
        """The curated row (DOC_SCHEMA)."""
        return {
            "id": self.id, "text": self.text, "source": self.source, "url": self.url,
            "domain": self.domain, "bucket": self.bucket, "language": self.language,
            "language_score": self.language_score, "language_mixed": self.language_mixed,
            "license": self.license, "metadata": self.metadata, "encoding": self.encoding, "quality": self.quality,
            "model_quality": self.model_quality, "safety": self.safety, "pii": self.pii,
            "dup_cluster": self.dup_cluster, "dup_cluster_size": self.dup_cluster_size,
            "contamination": self.contamination,
            "lineage": [{"step": s, "version": v} for s, v in self.lineage],
        }

    def rejected_row(self, rejection: Rejection) -> dict[str, Any]:
        """The rejected row (REJECTED_SCHEMA): the document as it was when it was removed."""
        return {**self.row(), "step": rejection.step, "rule": rejection.rule,
                "value": rejection.value, "reason": rejection.reason}


def text_bytes(text: str | None) -> int:
    return len(text.encode("utf-8")) if text else 0


class PartWriter:
    """Writes rows as `part-00000.parquet`, `part-00001.parquet`, ... of at most `shard_rows` rows.

    Rows are buffered and a part is written whole, so a part file on disk is always complete.
    """

    def __init__(self, directory: Path, schema: pa.Schema, shard_rows: int):
        if shard_rows <= 0:
            raise ValueError(f"shard_rows must be positive, got {shard_rows}")
        self.directory = directory
        self.schema = schema
        self.shard_rows = shard_rows
        self.rows_written = 0
        self.parts: list[Path] = []
        self._buffer: list[dict[str, Any]] = []

    def add(self, row: dict[str, Any]) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= self.shard_rows:
            self._flush()

    def _flush(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"part-{len(self.parts):05d}.parquet"
        table = pa.Table.from_pylist(self._buffer, schema=self.schema)
        pq.write_table(table, path, compression="zstd")
        self.parts.append(path)
        self.rows_written += len(self._buffer)
        self._buffer = []

    def close(self, write_empty: bool = False) -> list[Path]:
        """Flush the last part; with write_empty, an empty part carries the schema for readers."""
        if self._buffer or (write_empty and not self.parts):
            self._flush()
        return self.parts


def read_parts(directory: Path) -> pa.Table:
    """All parts of a directory in order, as one table (for tests and small inspections)."""
    parts = sorted(directory.glob("part-*.parquet"))
    if not parts:
        raise FileNotFoundError(f"{directory}: no part-*.parquet files")
    return pa.concat_tables([pq.read_table(p) for p in parts])


def fsync_tree(directory: Path) -> None:
    """Flush every file under a directory to disk before it is renamed into place."""
    for root, _dirs, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
