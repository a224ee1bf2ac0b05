"""Parquet: a text column (`text_field`) and optional url / id / source / metadata columns."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, register
from tokenmill.data.readers.records import fields_record, record_fields, record_locator

PARQUET_EXTS = frozenset({".parquet"})
BATCH_ROWS = 1024


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
            yield make.bad(rel, str(path), "text", size, "missing_field", field,
                           f"no column {field!r} (columns: {sorted(names)})")
            return
        columns = [field] + [c for c in ("url", "id", "source", "metadata") if c in names and c != field]
        row = 0
        try:
            for batch in pf.iter_batches(columns=columns, batch_size=BATCH_ROWS):
                for obj in batch.to_pylist():
                    where = f"{path}#{row}"
                    fields = record_fields(obj, field)
                    n = len(fields.text.encode("utf-8", "surrogatepass")) if fields.text is not None else 0
                    if n > max_doc_bytes:
                        locator = record_locator(rel, f"#{row}", fields.record_id)
                        record = make.too_large(locator, where, "text", n, max_doc_bytes, f"row {row}")
                        record.record_id = fields.record_id
                        yield record
                    else:
                        yield fields_record(make, rel, f"#{row}", where, f"row {row}", n, fields, row)
                    row += 1
        except (OSError, ValueError) as exc:  # pyarrow's IOError / ArrowInvalid: a damaged page
            yield make.bad(f"{rel}#{row}", f"{path}#{row}", "text", 0, "corrupt", row,
                           f"Parquet data unreadable from row {row} on: {exc}")
