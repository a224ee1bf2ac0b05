"""JSON Lines (.jsonl .ndjson .json; plain, gzip or zstandard, told by magic bytes): one object
per line with at least the text field; its `id`, `source` and `metadata` are kept in
RawRecord.metadata (JSON), `url` as the url, and `id` as RawRecord.record_id (the row's id when it
is unique in the run: data/doc_ids.py). A .json file holding one array is read as records.
JSON exchanged between systems is UTF-8 (RFC 8259 §8.1): a line that is not is quarantined as
`undecodable`, with no guessing (a JSON array file may be UTF-16/32, as json.loads reads it)."""

from __future__ import annotations

import json
from itertools import chain
from pathlib import Path
from typing import Iterator

from tokenmill.data.document import Encoding, RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, binary_reason, register
from tokenmill.data.readers.decode import UTF8, decode_utf8
from tokenmill.data.readers.records import fields_record, record_fields
from tokenmill.data.readers.streams import Lines, StreamBreak, content_chunks

JSONL_EXTS = frozenset({".jsonl", ".json", ".ndjson"})


def read_jsonl(make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    field = make.src.text_field
    with open(path, "rb") as fh:
        compression, chunks = content_chunks(fh)
        lines: Lines | None = None
        try:
            head = next(chunks, b"")
            binary = binary_reason(head)
            if binary is not None:  # one record for the file, not one per garbage "line"
                yield make.bad(rel, str(path), "text", path.stat().st_size, "binary", 0, binary)
                return
            lines = Lines(chain([head], chunks), max_doc_bytes)
            for lineno, _offset, line, n in lines:
                locator, where = f"{rel}:{lineno}", f"{path}:{lineno}"
                if line is None:
                    yield make.too_large(locator, where, "text", n, max_doc_bytes, f"line {lineno}")
                    continue
                if not line or line.isspace():
                    continue  # blank lines separate nothing in JSONL; they are not records
                raw, problem = decode_utf8(line)
                if raw is None:
                    yield make.bad(locator, where, "text", n, "undecodable", lineno, f"line {lineno}: {problem}")
                    continue
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as exc:
                    yield make.bad(locator, where, "text", n, "bad_json", lineno,
                                   f"line {lineno}: invalid JSON: {exc.msg} (column {exc.colno})")
                    continue
                yield fields_record(make, rel, f":{lineno}", where, f"line {lineno}", n,
                                    record_fields(obj, field), lineno, UTF8)
        except StreamBreak as brk:
            lineno, offset = (lines.lineno, lines.offset) if lines is not None else (1, 0)
            yield make.bad(f"{rel}:{lineno}", f"{path}:{lineno}", "text", 0, brk.rule, brk.offset,
                           f"{compression} stream {brk.rule}: {brk.detail}; line {lineno} "
                           f"(uncompressed byte {offset}) onward was not read")


def read_json_array(make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """A .json file holding one array of records; record i is located as path#i."""
    size = path.stat().st_size
    if size > max_doc_bytes:
        yield make.too_large(rel, str(path), "text", size, max_doc_bytes, "JSON file")
        return
    data = path.read_bytes()
    try:
        items = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        yield make.bad(rel, str(path), "text", size, "bad_json", 0, f"invalid JSON array: {exc}")
        return
    found = json.detect_encoding(data)  # what json.loads decoded it as (RFC 4627 §3)
    method = "bom" if found in ("utf-8-sig", "utf-16", "utf-32") else "json"  # "json": told by its NUL bytes
    encoding = UTF8 if found == "utf-8" else Encoding(found.removesuffix("-sig"), 1.0, method)
    for i, obj in enumerate(items):
        n = len(json.dumps(obj, ensure_ascii=False).encode("utf-8", "replace"))
        yield fields_record(make, rel, f"#{i}", f"{path}#{i}", f"record {i}", n,
                            record_fields(obj, make.src.text_field), i, encoding)


def starts_with_bracket(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4096).lstrip().startswith(b"[")


@register
class JsonlReader(Reader):
    name = "jsonl"
    extensions = JSONL_EXTS
    carries_ids = True

    def read(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
        if path.suffix.lower() == ".json" and starts_with_bracket(path):
            yield from read_json_array(make, path, rel, max_doc_bytes)
        else:
            yield from read_jsonl(make, path, rel, max_doc_bytes)
