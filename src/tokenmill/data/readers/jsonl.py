"""JSON Lines (.jsonl .ndjson .json; plain, gzip or zstandard, told by magic bytes): one object
per line with at least the text field; its `id`, `source` and `metadata` are kept in
RawRecord.metadata (JSON), `url` as the url, and `id` as RawRecord.record_id (the row's id when it
is unique in the run: data/doc_ids.py). A .json file holding one array is read as records.
JSON exchanged between systems is UTF-8 (RFC 8259 §8.1): a line that is not is quarantined as
`undecodable`, with no guessing (a JSON array file may be UTF-16/32, as json.loads reads it).
A line nested deeper than tokenmill.json_limits.MAX_DEPTH is quarantined as `too_deep` before the
recursive parser sees it; the lines around it are read as usual."""

from __future__ import annotations

import json
from itertools import chain
from pathlib import Path
from typing import Iterator

from tokenmill import json_limits
from tokenmill.data.document import Encoding, RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, binary_reason, line_binary_reason, register
from tokenmill.data.readers.decode import UTF8, decode_utf8
from tokenmill.data.readers.records import fields_record, record_fields
from tokenmill.data.readers.streams import Lines, StreamBreak, content_chunks

JSONL_EXTS = frozenset({".jsonl", ".json", ".ndjson"})


BINARY_FILE_LINES = 16  # bad lines, with no good one yet, after which a binary-looking file is binary


def _line_record(
    make: RecordMaker, rel: str, path: Path, lineno: int, line: bytes | None, n: int, max_doc_bytes: int
) -> RawRecord:
    """The record of one non-blank line: its object, or its quarantine naming file and line."""
    locator, where = f"{rel}:{lineno}", f"{path}:{lineno}"
    if line is None:
        return make.too_large(locator, where, "text", n, max_doc_bytes, f"line {lineno}")
    binary = line_binary_reason(line)
    if binary is not None:  # this line alone: the lines around it are read as usual
        return make.bad(locator, where, "text", n, "binary", lineno, f"line {lineno}: {binary}")
    raw, problem = decode_utf8(line)
    if raw is None:
        return make.bad(locator, where, "text", n, "undecodable", lineno, f"line {lineno}: {problem}")
    try:
        obj = json_limits.loads(raw)
    except json_limits.TooDeep as exc:  # parsing it would recurse past the stack: this line alone is lost
        return make.bad(locator, where, "text", n, "too_deep", lineno, f"line {lineno}: {exc}")
    except json.JSONDecodeError as exc:
        return make.bad(
            locator, where, "text", n, "bad_json", lineno, f"line {lineno}: invalid JSON: {exc.msg} (column {exc.colno})"
        )
    return fields_record(
        make, rel, f":{lineno}", where, f"line {lineno}", n, record_fields(obj, make.src.text_field), lineno, UTF8
    )


def _break_record(make: RecordMaker, path: Path, rel: str, compression: str, brk: StreamBreak, lines: Lines | None) -> RawRecord:
    """The quarantine of the rest of a file whose stream broke or passed a limit."""
    lineno, offset = (lines.lineno, lines.offset) if lines is not None else (1, 0)
    if brk.rule == "too_many_lines":
        lineno = make.limits.max_lines_per_file + 1
        what = brk.detail
    elif brk.rule == "decompression_ratio":
        what = f"{compression} stream inflates too far: {brk.detail}"
    else:
        what = f"{compression} stream {brk.rule}: {brk.detail}"
    return make.bad(
        f"{rel}:{lineno}",
        f"{path}:{lineno}",
        "text",
        0,
        brk.rule,
        brk.offset,
        f"{what}; line {lineno} (uncompressed byte {offset}) onward was not read",
    )


def read_jsonl(make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """Every non-blank line as a record. Binary content is judged per line, so one NUL line is
    quarantined alone; only a file whose head looks binary and whose first BINARY_FILE_LINES
    lines are all bad (an image named .jsonl) becomes one `binary` record instead of one per
    garbage "line"."""
    with open(path, "rb") as fh:
        compression, chunks = content_chunks(fh, make.limits.max_decompression_ratio)
        lines: Lines | None = None
        held: list[RawRecord] | None = None  # bad lines held back while the file may prove binary
        try:
            head = next(chunks, b"")
            held = [] if binary_reason(head) is not None else None  # None: no verdict to wait for
            lines = Lines(chain([head], chunks), max_doc_bytes, make.limits.max_lines_per_file)
            for lineno, _offset, line, n in lines:
                record = _line_record(make, rel, path, lineno, line, n, max_doc_bytes)
                if held is None:
                    yield record
                elif record.problem is None:
                    yield from held
                    yield record
                    held = None
                else:
                    held.append(record)
                    if len(held) >= BINARY_FILE_LINES:
                        break
            if held:  # a binary file: one record for it, not one per garbage "line"
                yield make.bad(
                    rel,
                    str(path),
                    "text",
                    path.stat().st_size,
                    "binary",
                    0,
                    f"{binary_reason(head)}; no line of its first {len(held)} is a record",
                )
        except StreamBreak as brk:
            yield from held or []
            yield _break_record(make, path, rel, compression, brk, lines)


def read_json_array(make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """A .json file holding one array of records; record i is located as path#i."""
    size = path.stat().st_size
    if size > max_doc_bytes:
        yield make.too_large(rel, str(path), "text", size, max_doc_bytes, "JSON file")
        return
    data = path.read_bytes()
    try:
        items = json_limits.loads(data, json_limits.MAX_DEPTH + 1)  # +1: the array holding the records
    except json_limits.TooDeep:  # one parse for the whole array: the file is one record here
        reason = f"JSON array: a record in it nests deeper than {json_limits.MAX_DEPTH} levels; the array is parsed whole"
        yield make.bad(rel, str(path), "text", size, "too_deep", 0, reason + ", so none of it was read")
        return
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        yield make.bad(rel, str(path), "text", size, "bad_json", 0, f"invalid JSON array: {exc}")
        return
    found = json.detect_encoding(data)  # what json.loads decoded it as (RFC 4627 §3)
    method = "bom" if found in ("utf-8-sig", "utf-16", "utf-32") else "json"  # "json": told by its NUL bytes
    encoding = UTF8 if found == "utf-8" else Encoding(found.removesuffix("-sig"), 1.0, method)
    for i, obj in enumerate(items):
        n = len(json.dumps(obj, ensure_ascii=False).encode("utf-8", "replace"))
        yield fields_record(
            make, rel, f"#{i}", f"{path}#{i}", f"record {i}", n, record_fields(obj, make.src.text_field), i, encoding
        )


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
