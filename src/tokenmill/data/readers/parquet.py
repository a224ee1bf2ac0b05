"""Parquet: a text column (`text_field`) and optional url / id / source / metadata columns.

A `binary` text column is bytes like any other input: sniffed for binary content and decoded by
readers/decode.py (BOM, UTF-8, charset detection), the encoding found recorded on the row."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from typing import Any

from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, register
from tokenmill.data.readers.decode import binary_problem, decode
from tokenmill.data.readers.records import fields_record, record_fields, record_locator

PARQUET_EXTS = frozenset({".parquet"})
BATCH_ROWS = 1024


def _row_record(make: RecordMaker, path: Path, rel: str, row: int, obj: dict[str, Any], max_doc_bytes: int) -> RawRecord:
    """One row's record, or its quarantine naming the file and row."""
    raw = obj.get(make.src.text_field)
    if isinstance(raw, bytes):  # a `binary` column: decoded like any bytes
        return _bytes_row(make, path, rel, row, obj, raw, max_doc_bytes)
    fields = record_fields(obj, make.src.text_field)
    n = len(fields.text.encode("utf-8", "surrogatepass")) if fields.text is not None else 0
    if n > max_doc_bytes:
        record = make.too_large(
            record_locator(rel, f"#{row}", fields.record_id), f"{path}#{row}", "text", n, max_doc_bytes, f"row {row}"
        )
        record.record_id = fields.record_id
        return record
    return fields_record(make, rel, f"#{row}", f"{path}#{row}", f"row {row}", n, fields, row)


def _bytes_row(
    make: RecordMaker, path: Path, rel: str, row: int, obj: dict[str, Any], raw: bytes, max_doc_bytes: int
) -> RawRecord:
    """A row whose text is bytes: size checked, binary sniffed, then decoded (readers/decode.py)."""
    field, where, n = make.src.text_field, f"{path}#{row}", len(raw)
    fields = record_fields({**obj, field: ""}, field)  # its id, url and metadata
    locator = record_locator(rel, f"#{row}", fields.record_id)
    binary = binary_problem(raw) if n <= max_doc_bytes else None
    if n > max_doc_bytes:
        record = make.too_large(locator, where, "text", n, max_doc_bytes, f"row {row}")
    elif binary is not None:
        record = make.bad(locator, where, "text", n, "binary", row, f"row {row}: {binary}", fields.metadata)
    else:
        decoded = decode(raw)
        if decoded.text is not None:
            return fields_record(
                make,
                rel,
                f"#{row}",
                where,
                f"row {row}",
                n,
                record_fields({**obj, field: decoded.text}, field),
                row,
                decoded.encoding,
            )
        record = make.bad(locator, where, "text", n, "undecodable", row, f"row {row}: {decoded.problem}", fields.metadata)
    record.record_id = fields.record_id
    return record


@register
class ParquetReader(Reader):
    name = "parquet"
    extensions = PARQUET_EXTS
    carries_ids = True

    def read(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
        import pyarrow.parquet as pq  # lazy: the pydoc child process imports this package too

        field = make.src.text_field
        size = path.stat().st_size
        try:
            pf = pq.ParquetFile(path)
        except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
            yield make.bad(rel, str(path), "text", size, "unreadable", size, f"not a Parquet file: {exc}")
            return
        names = set(pf.schema_arrow.names)
        if field not in names:
            yield make.bad(
                rel, str(path), "text", size, "missing_field", field, f"no column {field!r} (columns: {sorted(names)})"
            )
            return
        columns = [field] + [c for c in ("url", "id", "source", "metadata") if c in names and c != field]
        row = 0
        try:
            for batch in pf.iter_batches(columns=columns, batch_size=BATCH_ROWS):
                for obj in batch.to_pylist():
                    yield _row_record(make, path, rel, row, obj, max_doc_bytes)
                    row += 1
        except (OSError, ValueError) as exc:  # pyarrow's IOError / ArrowInvalid: a damaged page
            yield make.bad(
                f"{rel}#{row}", f"{path}#{row}", "text", 0, "corrupt", row, f"Parquet data unreadable from row {row} on: {exc}"
            )
