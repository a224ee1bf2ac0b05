"""Readers: a SourceConfig in, RawRecords out, in a deterministic (sorted) order.

kind=files reads a file, a directory (recursively) or a glob; the format comes from the
extension unless the config names one:
  html    .html .htm .xhtml: one document per file, charset from <meta charset> (else UTF-8,
          then windows-1252 as the WHATWG encoding standard does for undeclared pages).
  warc    .warc .warc.gz .wet .wet.gz (Common Crawl WARC/WET, read with fastwarc) and the legacy
          .arc .arc.gz (warcio converts them): `response`/`resource` records with an HTML payload
          become format html, text/plain ones and WET `conversion` records format text, each with
          its WARC-Target-URI as url. request, metadata, warcinfo, revisit and continuation
          records hold no document and are skipped, counted nowhere.
  jsonl   .jsonl .ndjson .json (plain, gzip or zstandard, by magic bytes): one object per line
          with at least `text`; its `id`, `source` and `metadata` are kept in RawRecord.metadata
          (JSON) and `url` as the url. A .json file holding one array is read as records.
          A source marked `synthetic: true` (model output) also checks each record's lineage,
          or gives it an outside teacher's (tokenmill.synth.lineage).
  parquet a `text` column (and optional url / id / source / metadata columns).
  code    source files of known extensions; the language is recorded ({"language": "python"}).
  text    anything else, one document per file.
kind=python_stdlib is the embedded demo corpus: real text written by others that every Python
installation carries, read with no network.

Bad input is never fatal and never vanishes (DESIGN §5): a record that cannot be read is yielded
with `problem` set and ends in `_rejected` at step "read" with a rule, the measured value and a
reason naming the file and line / byte offset:
  binary        a NUL byte, or more than BINARY_CONTROL_SHARE C0 control characters, in the first
                KB (git and grep call a file binary on a NUL in its head; real text has almost no
                other C0 controls besides tab, newline, form feed and carriage return);
  undecodable   not valid in its declared charset / UTF-8 (value: the line or byte);
  empty         nothing but whitespace;
  too_large     over max_doc_bytes, checked before the bytes are parsed;
  truncated     a compressed stream or a WARC that ends inside a record: every record before the
                cut is kept, and one record stands for the cut (value: its byte offset);
  corrupt       invalid compressed data or WARC framing in the middle of a file: the records
                before it are kept; WARC reading resumes leniently after it;
  bad_json / missing_field / unreadable / bad_http / http_status (non-2xx) /
  unsupported_content_type (images, scripts …) / bad_encoding (a Content-Encoding that fails).
Only a source that cannot be read at all (a missing path) raises SourceError, before any work.
"""

from __future__ import annotations

import codecs
import glob
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import zlib
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

from tokenmill.data.config import SourceConfig
from tokenmill.data.document import RawRecord, Rejection, format_value

VERSION = "2"

HTML_EXTS = frozenset({".html", ".htm", ".xhtml"})
JSONL_EXTS = frozenset({".jsonl", ".json", ".ndjson"})
PARQUET_EXTS = frozenset({".parquet"})
WARC_SUFFIXES = (".warc", ".warc.gz", ".wet", ".wet.gz")
ARC_SUFFIXES = (".arc", ".arc.gz")
COMPRESSION_SUFFIXES = (".gz", ".zst")
# Extension -> language recorded on code documents (names as GitHub linguist spells them, lower case).
CODE_LANGUAGES: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp",
    ".cxx": "cpp", ".hpp": "cpp", ".cu": "cuda", ".rs": "rust", ".go": "go", ".java": "java",
    ".kt": "kotlin", ".scala": "scala", ".js": "javascript", ".mjs": "javascript",
    ".ts": "typescript", ".tsx": "typescript", ".jsx": "javascript", ".rb": "ruby", ".php": "php",
    ".pl": "perl", ".pm": "perl", ".lua": "lua", ".sh": "shell", ".bash": "shell", ".zsh": "shell",
    ".sql": "sql", ".swift": "swift", ".cs": "c#", ".m": "objective-c", ".jl": "julia",
    ".hs": "haskell", ".ml": "ocaml", ".r": "r", ".zig": "zig", ".nim": "nim",
}
CODE_EXTS = frozenset(CODE_LANGUAGES)

BINARY_SNIFF_BYTES = 1024
BINARY_CONTROL_SHARE = 0.10
# C0 controls that text does not use: all but \t \n \v \f \r (ESC counts: raw terminal output).
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])
_CHUNK = 1 << 20  # read size for streamed files
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)

# Directories of the standard library that are not library code: third-party installs, the
# test suites (huge, repetitive, full of deliberately odd code), the IDLE application.
STDLIB_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib",
                                  "__pycache__"})
# Modules whose import has visible side effects (opens a browser, prints, opens windows).
PYDOC_SKIP = frozenset({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo",
                        "__main__"})
PYDOC_TIMEOUT_S = 300
SYSTEM_HTML_GLOB = "/usr/share/doc/python3*/html/**/*.html"
# pydoc prints values like "<object object at 0x7f32aa14c170>" or "<PyDLL 'None', handle
# 7fb90abe02e0>": the address changes every run, and would change the text, its dedup hash and
# every token after it. Docstring blocks write spaces as &nbsp;. 8+ hex digits: a pointer.
_ADDRESS = re.compile(r"\b(at|handle)(\s|&nbsp;)(0x)?[0-9a-fA-F]{8,}\b")


class SourceError(ValueError):
    """A source that cannot be read at all; the message names the config path."""


# --------------------------------------------------------------------------- helpers
def _strip_compression(name: str) -> str:
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def detect_format(path: Path) -> str:
    """The reader for a file by its (lower-cased, possibly compound) extension."""
    name = path.name.lower()
    if name.endswith(WARC_SUFFIXES + ARC_SUFFIXES):
        return "warc"
    ext = os.path.splitext(_strip_compression(name))[1]
    if ext in JSONL_EXTS:
        return "jsonl"
    if ext in HTML_EXTS:
        return "html"
    if ext in PARQUET_EXTS:
        return "parquet"
    if ext in CODE_EXTS:
        return "code"
    return "text"


def code_language(path: Path) -> str | None:
    return CODE_LANGUAGES.get(path.suffix.lower())


def _walk_sorted(root: Path, excluded: frozenset[str] = frozenset()) -> Iterator[Path]:
    """Files under root in sorted order; hidden entries (.git, .DS_Store) are not content."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in excluded)
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def source_root(path: str) -> Path:
    """The directory a source's locators are relative to (no listing: cheap for every shard)."""
    if glob.has_magic(path):
        prefix = path[: min(m.start() for m in re.finditer(r"[*?\[]", path))]
        return Path(prefix) if prefix.endswith(os.sep) else Path(prefix).parent
    p = Path(path)
    return p.parent if p.is_file() else p


def list_source_files(path: str) -> tuple[Path, list[Path]]:
    """(root the locators are relative to, files in reading order) for a file, dir or glob."""
    if glob.has_magic(path):
        files = sorted(Path(p) for p in glob.glob(path, recursive=True) if Path(p).is_file())
        if not files:
            raise SourceError(f"source path {path!r}: the glob matches no file")
        return source_root(path), files
    p = Path(path)
    if p.is_file():
        return p.parent, [p]
    if p.is_dir():
        return p, list(_walk_sorted(p))
    raise SourceError(f"source path {path!r} does not exist")


def _relative(path: Path, root: Path) -> str:
    return Path(os.path.relpath(path, root)).as_posix()


def _decode(data: bytes) -> tuple[str | None, str | None]:
    """(text, None) or (None, problem); a leading UTF-8 BOM is not part of the text."""
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 at byte {exc.start}: {exc.reason}"


def _codec(label: str | None) -> str | None:
    """A Python codec name for a declared charset, or None when Python does not know it."""
    if not label:
        return None
    try:
        return codecs.lookup(label.strip().strip("\"'")).name
    except LookupError:
        return None


def _decode_markup(data: bytes, declared: str | None = None) -> tuple[str | None, str | None]:
    """HTML bytes to text: the HTTP charset, else <meta charset>, then UTF-8; an undeclared page
    that is not UTF-8 is windows-1252, the WHATWG encoding standard's default for the web."""
    codec = _codec(declared)
    if codec is None:
        m = _META_CHARSET.search(data, 0, 4096)
        codec = _codec(m.group(1).decode("ascii")) if m else None
        if codec and codec.startswith(("utf-16", "utf-32")):
            codec = "utf-8"  # WHATWG: a <meta> that could be read as ASCII cannot mean UTF-16
    candidates = list(dict.fromkeys([codec, "utf-8"] if codec else ["utf-8", "cp1252"]))
    for name in candidates:
        try:
            return data.decode("utf-8-sig" if name == "utf-8" else name), None
        except (UnicodeDecodeError, LookupError):  # LookupError: a bytes-to-bytes codec (hex, zip)
            continue
    _text, problem = _decode(data)
    return None, f"not valid {' nor '.join(candidates)}; {problem}"


def _binary_reason(head: bytes) -> str | None:
    """Why the first KB looks binary, or None: a NUL byte, or a high share of C0 controls."""
    head = head[:BINARY_SNIFF_BYTES]
    nul = head.find(b"\0")
    if nul >= 0:
        return f"binary: NUL byte at offset {nul}"
    n_control = len(head) - len(head.translate(None, _CONTROL_BYTES))
    if head and n_control > BINARY_CONTROL_SHARE * len(head):
        return f"binary: {n_control} of the first {len(head)} bytes are control characters"
    return None


def _is_blank(text: str) -> bool:
    return not text or text.isspace()  # isspace: no copy, unlike strip()


def _is_encodable(text: str) -> bool:
    """JSON can carry lone surrogates ("\\ud800") that no UTF-8 file can hold."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _json_meta(fields: dict[str, Any]) -> str | None:
    present = {k: v for k, v in fields.items() if v is not None}
    return json.dumps(present, ensure_ascii=False, default=str) if present else None


class _Maker:
    """Builds the records of one source, good or quarantined, with its shared fields."""

    def __init__(self, source: str, src: SourceConfig):
        self.source = source
        self.src = src

    def ok(self, locator: str, url: str, fmt: str, text: str, n_bytes: int,
           metadata: str | None = None) -> RawRecord:
        return RawRecord(self.source, locator, url, self.src.bucket, self.src.license, fmt, text,
                         n_bytes, None, metadata)

    def bad(self, locator: str, url: str, fmt: str, n_bytes: int, rule: str, value: Any,
            reason: str, metadata: str | None = None) -> RawRecord:
        problem = Rejection("read", rule, format_value(value), f"{url}: {reason}")
        return RawRecord(self.source, locator, url, self.src.bucket, self.src.license, fmt, None,
                         n_bytes, problem, metadata)

    def text(self, locator: str, url: str, fmt: str, text: str, n_bytes: int, what: str,
             metadata: str | None = None) -> RawRecord:
        """A decoded document, or its quarantine when it holds nothing but whitespace."""
        if _is_blank(text):
            return self.bad(locator, url, fmt, n_bytes, "empty", len(text), f"{what} is empty", metadata)
        return self.ok(locator, url, fmt, text, n_bytes, metadata)


def _too_large(make: _Maker, locator: str, url: str, fmt: str, n: int, limit: int, what: str) -> RawRecord:
    return make.bad(locator, url, fmt, n, "too_large", n,
                    f"{what} of {n} bytes exceeds max_doc_bytes {limit}; not parsed")


# --------------------------------------------------------------------------- whole files
def _read_whole(make: _Maker, path: Path, locator: str, fmt: str, max_doc_bytes: int) -> RawRecord:
    size = path.stat().st_size
    if size > max_doc_bytes:  # checked before reading: a stray 10 GB file must not be loaded
        return _too_large(make, locator, str(path), fmt, size, max_doc_bytes, "file")
    data = path.read_bytes()
    binary = _binary_reason(data)
    if binary is not None:
        return make.bad(locator, str(path), fmt, size, "binary", size, binary)
    language = code_language(path) if fmt == "code" else None
    meta = _json_meta({"language": language})
    text, problem = _decode_markup(data) if fmt == "html" else _decode(data)
    if text is None:
        return make.bad(locator, str(path), fmt, size, "undecodable", size, problem or "", meta)
    return make.text(locator, str(path), fmt, text, size, "file", meta)


# --------------------------------------------------------------------------- compressed streams
class _Break(Exception):
    """A stream that ends inside a compressed member / frame, or holds invalid data."""

    def __init__(self, rule: str, offset: int, detail: str):
        super().__init__(detail)
        self.rule, self.offset, self.detail = rule, offset, detail


def _file_chunks(fh: BinaryIO) -> Iterator[bytes]:
    while chunk := fh.read(_CHUNK):
        yield chunk


def _gunzip(chunks: Iterable[bytes], base: int = 0) -> Iterator[bytes]:
    """Decompressed bytes of concatenated gzip members (as gzip(1) reads them); raises _Break
    with the compressed offset of the member that is cut short or invalid. Output per call is
    bounded, so a small bomb cannot fill memory at once."""
    d: Any = None
    member_start = consumed = base
    for chunk in chunks:
        data = chunk
        while data:
            if d is None:
                rest = data.lstrip(b"\0")  # zero padding after a member (tape blocks, some tools)
                if not rest:
                    break
                member_start = consumed + len(chunk) - len(rest)
                d, data = zlib.decompressobj(16 + zlib.MAX_WBITS), rest
            try:
                out = d.decompress(data, 8 * _CHUNK)
            except zlib.error as exc:
                raise _Break("corrupt", member_start, f"invalid gzip data in the member at byte "
                                                      f"{member_start}: {exc}") from None
            if out:
                yield out
            if d.eof:
                data, d = d.unused_data, None
            else:
                data = d.unconsumed_tail
        consumed += len(chunk)
    if d is not None:
        raise _Break("truncated", member_start, f"the gzip member at byte {member_start} ends at "
                                                f"byte {consumed} before its end-of-stream marker")


def _unzstd(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Decompressed bytes of concatenated zstandard frames; _Break as for gzip."""
    import zstandard  # lazy: only .zst inputs need it

    d: Any = None
    frame_start = consumed = 0
    for chunk in chunks:
        data = chunk
        while data:
            if d is None:
                frame_start = consumed + len(chunk) - len(data)
                d = zstandard.ZstdDecompressor().decompressobj()
            try:
                out = d.decompress(data)
            except zstandard.ZstdError as exc:
                raise _Break("corrupt", frame_start, f"invalid zstandard data in the frame at byte "
                                                     f"{frame_start}: {exc}") from None
            if out:
                yield out
            data = d.unused_data if d.eof else b""
            if d.eof:
                d = None
        consumed += len(chunk)
    if d is not None:
        raise _Break("truncated", frame_start, f"the zstandard frame at byte {frame_start} ends at "
                                               f"byte {consumed} before its end")


def _content_chunks(fh: BinaryIO) -> tuple[str, Iterator[bytes]]:
    """(compression, decompressed chunks): gzip and zstandard are told by their magic bytes."""
    head = fh.read(4)
    fh.seek(0)
    if head.startswith(_GZIP_MAGIC):
        return "gzip", _gunzip(_file_chunks(fh))
    if head == _ZSTD_MAGIC:
        return "zstandard", _unzstd(_file_chunks(fh))
    return "none", _file_chunks(fh)


class _Lines:
    """Splits a chunk stream into lines; tracks the number and offset of the next line, so a
    break in the stream names the line it cut. A line longer than `max_len` is not kept in
    memory: it comes out as None with its length."""

    def __init__(self, chunks: Iterable[bytes], max_len: int):
        self.chunks, self.max_len = chunks, max_len
        self.lineno, self.offset = 1, 0  # of the next line to come out

    def __iter__(self) -> Iterator[tuple[int, int, bytes | None, int]]:
        pending: list[bytes] = []
        pending_len = 0
        for chunk in self.chunks:
            parts = chunk.split(b"\n")
            for part in parts[:-1]:
                n = pending_len + len(part) + 1
                line: bytes | None
                if pending_len > self.max_len or n > self.max_len + 1:
                    line = None
                else:
                    line = b"".join((*pending, part)) if pending else part
                yield self._emit(line, n)
                pending, pending_len = [], 0
            tail = parts[-1]
            if tail:
                pending_len += len(tail)
                pending = [] if pending_len > self.max_len else [*pending, tail]
        if pending_len:
            yield self._emit(b"".join(pending) if pending_len <= self.max_len else None, pending_len)

    def _emit(self, line: bytes | None, n: int) -> tuple[int, int, bytes | None, int]:
        out = (self.lineno, self.offset, line, n)
        self.lineno += 1
        self.offset += n
        return out


# --------------------------------------------------------------------------- JSON / Parquet records
@dataclass(slots=True)
class _Fields:
    """What a JSON object or Parquet row holds: its text, or the problem."""

    text: str | None
    url: str | None = None
    record_id: str | None = None
    metadata: str | None = None
    problem: str | None = None


def _record_fields(obj: Any, field: str) -> _Fields:
    if not isinstance(obj, dict):
        return _Fields(None, problem=f"record is a JSON {type(obj).__name__}, not an object")
    text = obj.get(field)
    if not isinstance(text, str):
        got = "missing" if text is None else f"a {type(text).__name__}"
        return _Fields(None, problem=f"text field {field!r} is {got}")
    url = obj.get("url")
    rid = obj.get("id")
    rid = str(rid) if isinstance(rid, (str, int)) and not isinstance(rid, bool) and str(rid) else None
    meta = _json_meta({"id": obj.get("id"), "source": obj.get("source"), "metadata": obj.get("metadata")})
    return _Fields(text, url if isinstance(url, str) and url else None, rid, meta)


def _record_locator(rel: str, position: str, record_id: str | None) -> str:
    """`rel#id=ID` when the record has an id (stable when lines move), else `rel` + position.
    The file stays in the locator: ids like 0, 1, 2 … restart in every file of a dataset."""
    return f"{rel}#id={record_id}" if record_id is not None else f"{rel}{position}"


def _fields_record(make: _Maker, rel: str, position: str, where: str, what: str, n: int,
                   fields: _Fields, value: Any) -> RawRecord:
    """The record of one parsed JSON object / Parquet row."""
    locator = _record_locator(rel, position, fields.record_id)
    if fields.text is None:
        return make.bad(locator, where, "text", n, "missing_field", value, f"{what}: {fields.problem}")
    if not _is_encodable(fields.text):
        return make.bad(locator, where, "text", n, "undecodable", value,
                        f"{what}: text holds lone surrogates", fields.metadata)
    return make.text(locator, fields.url or where, "text", fields.text, n, what, fields.metadata)


def _read_jsonl(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    field = make.src.text_field
    with open(path, "rb") as fh:
        compression, chunks = _content_chunks(fh)
        lines: _Lines | None = None
        try:
            head = next(chunks, b"")
            binary = _binary_reason(head)
            if binary is not None:  # one record for the file, not one per garbage "line"
                yield make.bad(rel, str(path), "text", path.stat().st_size, "binary", 0, binary)
                return
            lines = _Lines(chain([head], chunks), max_doc_bytes)
            for lineno, _offset, line, n in lines:
                locator, where = f"{rel}:{lineno}", f"{path}:{lineno}"
                if line is None:
                    yield _too_large(make, locator, where, "text", n, max_doc_bytes, f"line {lineno}")
                    continue
                if not line or line.isspace():
                    continue  # blank lines separate nothing in JSONL; they are not records
                raw, problem = _decode(line)
                if raw is None:
                    yield make.bad(locator, where, "text", n, "undecodable", lineno, f"line {lineno}: {problem}")
                    continue
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as exc:
                    yield make.bad(locator, where, "text", n, "bad_json", lineno,
                                   f"line {lineno}: invalid JSON: {exc.msg} (column {exc.colno})")
                    continue
                yield _fields_record(make, rel, f":{lineno}", where, f"line {lineno}", n,
                                     _record_fields(obj, field), lineno)
        except _Break as brk:
            lineno, offset = (lines.lineno, lines.offset) if lines is not None else (1, 0)
            yield make.bad(f"{rel}:{lineno}", f"{path}:{lineno}", "text", 0, brk.rule, brk.offset,
                           f"{compression} stream {brk.rule}: {brk.detail}; line {lineno} "
                           f"(uncompressed byte {offset}) onward was not read")


def _read_json_array(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """A .json file holding one array of records; record i is located as path#i."""
    size = path.stat().st_size
    if size > max_doc_bytes:
        yield _too_large(make, rel, str(path), "text", size, max_doc_bytes, "JSON file")
        return
    try:
        items = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        yield make.bad(rel, str(path), "text", size, "bad_json", 0, f"invalid JSON array: {exc}")
        return
    for i, obj in enumerate(items):
        n = len(json.dumps(obj, ensure_ascii=False).encode("utf-8", "replace"))
        yield _fields_record(make, rel, f"#{i}", f"{path}#{i}", f"record {i}", n,
                             _record_fields(obj, make.src.text_field), i)


def _starts_with_bracket(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4096).lstrip().startswith(b"[")


def _read_parquet(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq  # lazy: the pydoc child process imports this module too

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
        for batch in pf.iter_batches(columns=columns, batch_size=1024):
            for obj in batch.to_pylist():
                where = f"{path}#{row}"
                fields = _record_fields(obj, field)
                n = len(fields.text.encode("utf-8", "surrogatepass")) if fields.text is not None else 0
                if n > max_doc_bytes:
                    locator = _record_locator(rel, f"#{row}", fields.record_id)
                    yield _too_large(make, locator, where, "text", n, max_doc_bytes, f"row {row}")
                else:
                    yield _fields_record(make, rel, f"#{row}", where, f"row {row}", n, fields, row)
                row += 1
    except (OSError, ValueError) as exc:  # pyarrow's IOError / ArrowInvalid: a damaged page
        yield make.bad(f"{rel}#{row}", f"{path}#{row}", "text", 0, "corrupt", row,
                       f"Parquet data unreadable from row {row} on: {exc}")


# --------------------------------------------------------------------------- WARC / WET / ARC
_WARC_DOC_TYPES = frozenset({"response", "resource", "conversion"})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_SNIFF_TYPES = frozenset({"", "application/octet-stream", "unk", "unknown"})
_WARC_HEADER_MAX = 1 << 16
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*\r*$", re.I | re.M)


@dataclass(slots=True)
class _WebPayload:
    """One content-bearing archive record, whichever library read it."""

    offset: int  # where the record starts in the file (compressed offset for .gz)
    rtype: str
    url: str | None
    record_id: str | None
    date: str | None
    status: int | None
    mime: str  # payload type, lower case, without parameters ("" when unknown)
    charset: str | None
    content_encoding: str | None  # HTTP Content-Encoding still applied to the body
    transfer_encoding: str | None
    body: bytes


def _mime(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _inflate(body: bytes, encoding: str, limit: int) -> bytes | None:
    """Undo an HTTP Content-Encoding, at most limit + 1 bytes out; None when it is not that."""
    enc = encoding.strip().lower()
    if enc in ("", "identity", "none"):
        return body
    if enc in ("gzip", "x-gzip", "deflate"):
        for wbits in ((16 + zlib.MAX_WBITS,) if enc != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS)):
            try:
                return zlib.decompressobj(wbits).decompress(body, limit + 1)
            except zlib.error:
                continue
        return None
    if enc == "br":
        from fastwarc.stream_io import BrotliReader

        try:
            return BrotliReader(io.BytesIO(body)).read(limit + 1)
        except OSError:
            return None
    return None


def _dechunk(body: bytes) -> bytes:
    """HTTP chunked transfer coding, when the archive kept it (wget does; many crawlers store the
    de-chunked body but keep the header, so a body that does not parse as chunks stays as is)."""
    from fastwarc.stream_io import ChunkedReader

    try:
        return ChunkedReader(io.BytesIO(body)).read()
    except OSError:
        return body


def _payload_format(p: _WebPayload, body: bytes) -> str | None:
    """html, text, or None for a payload that is not a document (images, scripts, PDFs)."""
    if p.rtype == "conversion" or p.mime == "text/plain":
        return "text"
    if p.mime in _HTML_TYPES:
        return "html"
    if p.mime in _SNIFF_TYPES:
        head = body[:512].lstrip().lower()
        if head.startswith((b"<!doctype html", b"<html")):
            return "html"
    return None


def _web_record(make: _Maker, path: Path, locator: str, p: _WebPayload, max_doc_bytes: int) -> RawRecord:
    """One WARC/WET/ARC document record as a RawRecord, or its quarantine."""
    url = p.url or f"{path}@{p.offset}"
    where = f"record at byte {p.offset} of {path}"
    meta = _json_meta({"warc_record_id": p.record_id, "warc_date": p.date, "content_type": p.mime or None})
    n = len(p.body)
    if p.status is not None and not 200 <= p.status < 300:
        return make.bad(locator, url, "html", n, "http_status", p.status, f"{where}: HTTP status {p.status}", meta)
    body = _dechunk(p.body) if p.transfer_encoding and "chunked" in p.transfer_encoding.lower() else p.body
    if p.content_encoding and not body.startswith(b"<"):  # "<": stored already decoded
        inflated = _inflate(body, p.content_encoding, max_doc_bytes)
        if inflated is None:
            return make.bad(locator, url, "html", n, "bad_encoding", p.content_encoding,
                            f"{where}: payload is not valid {p.content_encoding!r} data", meta)
        if len(inflated) > max_doc_bytes:
            return _too_large(make, locator, url, "html", len(inflated), max_doc_bytes, f"{where}: decoded payload")
        body = inflated
    fmt = _payload_format(p, body)
    if fmt is None:
        return make.bad(locator, url, "html", n, "unsupported_content_type", p.mime or "unknown",
                        f"{where}: payload type {p.mime or 'unknown'!r} is not a text document", meta)
    binary = _binary_reason(body)
    if binary is not None:
        return make.bad(locator, url, fmt, n, "binary", n, f"{where}: {binary}", meta)
    if fmt == "html":
        text, problem = _decode_markup(body, p.charset)
    else:
        text, problem = _decode_markup(body, p.charset or "utf-8")  # WET text is UTF-8
    if text is None:
        return make.bad(locator, url, fmt, n, "undecodable", p.offset, f"{where}: {problem}", meta)
    return make.text(locator, url, fmt, text, n, where, meta)


_HTTP_HEAD_END = re.compile(rb"\n\r*\n")  # the blank line; some archives write \r\r\n line ends


def _split_http(block: bytes) -> tuple[int | None, dict[str, str], bytes] | None:
    """(status, headers with lower-case names, body) of an HTTP response block; None when the
    head has no end or no status line. Parsed here, not by fastwarc, so the block's length can be
    checked first: fastwarc's own parse reports a malformed head as an empty body."""
    m = _HTTP_HEAD_END.search(block)
    if m is None:
        return None
    lines = [ln for ln in block[: m.start()].decode("latin-1").splitlines() if ln.strip()]
    parts = lines[0].split(None, 2) if lines else []
    if len(parts) < 2 or not parts[0].upper().startswith("HTTP/") or not parts[1].isdigit():
        return None
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers, block[m.end():]


def _charset(content_type: str | None) -> str | None:
    m = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", content_type or "", re.I)
    return m.group(1) if m else None


def _fastwarc_payload(rec: Any, rtype: str, block: bytes) -> _WebPayload | None:
    """The payload of a fastwarc record whose whole block was read; None: malformed HTTP head."""
    h = rec.headers
    status, ce, te = None, None, None
    if rec.is_http:
        split = _split_http(block)
        if split is None:
            return None
        status, http, block = split
        ctype, ce, te = http.get("content-type"), http.get("content-encoding"), http.get("transfer-encoding")
    else:
        ctype = h.get("Content-Type")
    if not _mime(ctype) and h.get("WARC-Identified-Payload-Type"):
        ctype = h.get("WARC-Identified-Payload-Type")  # Common Crawl's detected type
    return _WebPayload(rec.stream_pos, rtype, h.get("WARC-Target-URI"), h.get("WARC-Record-ID"),
                       h.get("WARC-Date"), status, _mime(ctype), _charset(ctype), ce, te, block)


def _warc_item(make: _Maker, path: Path, locator: str, rec: Any,
               max_doc_bytes: int) -> tuple[RawRecord | None, bool]:
    """(record, or None for a type that holds no document; whether the file is cut inside it)."""
    rtype, pos, expected = str(rec.record_type), rec.stream_pos, rec.content_length
    short = f"its block is shorter than its {expected} bytes"
    if rtype not in _WARC_DOC_TYPES or expected > max_doc_bytes:
        if rec.consume() < expected:
            return _warc_cut(make, path, locator, pos, short), True
        if rtype not in _WARC_DOC_TYPES:
            return None, False
        url = rec.headers.get("WARC-Target-URI") or f"{path}@{pos}"
        return _too_large(make, locator, url, "html", expected, max_doc_bytes, f"record at byte {pos}"), False
    block = rec.reader.read()
    if len(block) < expected:
        return _warc_cut(make, path, locator, pos, short), True
    payload = _fastwarc_payload(rec, rtype, block)
    if payload is None:
        url = rec.headers.get("WARC-Target-URI") or f"{path}@{pos}"
        return make.bad(locator, url, "html", expected, "bad_http", pos,
                        f"record at byte {pos} of {path}: malformed HTTP head"), False
    return _web_record(make, path, locator, payload, max_doc_bytes), False


def _warc_cut(make: _Maker, path: Path, locator: str, pos: int, detail: str, rule: str = "truncated") -> RawRecord:
    what = "the file ends inside the WARC record" if rule == "truncated" else "WARC data unreadable"
    return make.bad(locator, f"{path}@{pos}", "html", 0, rule, pos,
                    f"{what} at byte {pos}: {detail}; every record before it was kept")


@dataclass(frozen=True, slots=True)
class _TailProblem:
    offset: int  # where the unreadable part starts (a gzip member's start for .gz)
    rule: str  # "truncated": the file ends early; "corrupt": bytes that are not a record
    detail: str


def _warc_tail_problem(path: Path, last_pos: int) -> _TailProblem | None:
    """Whether the file ends cleanly after the record starting at last_pos.

    fastwarc stops silently at a cut file, and even yields a record whose head was cut. So the
    last record is checked from the bytes: its head must end, its Content-Length bytes must all
    be there, nothing but line ends may follow, and every gzip member must be complete. Only the
    last record is read again (the whole file when it is one gzip member, which is rare)."""
    with open(path, "rb") as fh:
        head = fh.read(2)
        gz = bool(head) and _GZIP_MAGIC.startswith(head)  # one byte of magic: a cut gzip file
        fh.seek(last_pos)
        lead = fh.read(2)
        aligned = gz and bool(lead) and _GZIP_MAGIC.startswith(lead)  # a member per record (WARC annex D)
        fh.seek(last_pos if aligned or not gz else 0)
        chunks = _file_chunks(fh)
        try:
            if gz and not aligned:  # one member for the whole file: only its end can be checked
                for _ in _gunzip(chunks):
                    pass
                return None
            return _tail_after(_gunzip(chunks, base=last_pos) if aligned else chunks, last_pos, aligned)
        except _Break as brk:
            return _TailProblem(brk.offset if aligned else last_pos, brk.rule, brk.detail)


def _tail_after(stream: Iterable[bytes], base: int, gz: bool) -> _TailProblem | None:
    """Check the bytes from the last record's start to the end of the file (see above)."""
    buf, need, total, extra = bytearray(), -1, 0, bytearray()
    for chunk in stream:
        start, total = total, total + len(chunk)
        if need < 0:
            buf += chunk
            lead = bytes(buf[:64]).lstrip(b"\r\n")[:5]
            if not (b"WARC/".startswith(lead) or lead.startswith(b"WARC/")):
                return _TailProblem(base, "corrupt", f"no WARC record starts at byte {base}")
            m = _HTTP_HEAD_END.search(buf)
            if m is None:
                if len(buf) > _WARC_HEADER_MAX:
                    return _TailProblem(base, "corrupt", f"no end of a WARC head in {_WARC_HEADER_MAX} bytes")
                continue
            cl = _CONTENT_LENGTH.search(buf, 0, m.start() + 1)
            if cl is None:
                return _TailProblem(base, "corrupt", "its WARC head has no Content-Length")
            need = m.end() + int(cl.group(1))
            chunk, start, buf = bytes(buf), 0, bytearray()
        if len(extra) < 4096 and start + len(chunk) > need:
            extra += chunk[max(0, need - start): max(0, need - start) + 4096]
    if need < 0:
        return _TailProblem(base, "truncated", "the file ends inside its WARC head")
    if total < need:
        return _TailProblem(base, "truncated", f"its head and block need {need} bytes, {total} are left")
    rest = bytes(extra).lstrip(b"\r\n")
    if rest:
        at = base if gz else base + need + len(extra) - len(rest)
        # a cut head has no blank line yet; a complete one fastwarc would have read as a record
        rule = "corrupt" if _HTTP_HEAD_END.search(rest) else "truncated"
        return _TailProblem(at, rule, f"{total - need} bytes after the record at byte {base} are not a whole record")
    return None


def _read_warc(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """WARC/WET with fastwarc, strictly first. Where the framing breaks, the records after it are
    read in a lenient pass (fastwarc's quirks mode resynchronises at the next record) and one
    `corrupt` record stands for the break; a break with nothing after it is the file's end and is
    judged by the tail check. A record is held back until the next one is read, so a cut last
    record is replaced by its quarantine.

    Locators are `rel@offset` (the record's start, a gzip member's start in a .warc.gz); where
    offsets do not grow (a whole file in one gzip member) the record's ordinal is added."""
    if path.name.lower().endswith(ARC_SUFFIXES):
        yield from _read_arc(make, path, rel, max_doc_bytes)
        return
    from fastwarc.warc import ArchiveIterator

    held: tuple[int, str, RawRecord] | None = None  # (offset, locator, record)
    pending: RawRecord | None = None  # the strict break, out once a later record proves it no cut
    last_pos, seq, strict_seen = -1, 0, -1
    for lenient in (False, True):
        broken: OSError | None = None
        with open(path, "rb") as fh:
            it = iter(ArchiveIterator(fh, parse_http=False, auto_decode="none", quirks_mode=lenient))
            k = 0
            while True:
                try:
                    rec = next(it)
                except StopIteration:
                    break
                except OSError as exc:
                    broken = exc
                    break
                k += 1
                if k <= strict_seen:  # read before the break (both modes agree there)
                    continue
                if pending is not None:
                    yield pending
                    pending = None
                pos = rec.stream_pos
                locator = f"{rel}@{pos}" if pos > last_pos else f"{rel}@{pos}+{seq}"
                last_pos, seq = max(pos, last_pos), seq + 1
                item, cut = _warc_item(make, path, locator, rec, max_doc_bytes)
                if item is None:
                    continue
                if held is not None:
                    yield held[2]
                held = (pos, locator, item)
                if cut:
                    yield item
                    return
        if broken is None:
            break
        if held is not None:
            yield held[2]
            held = None
        at = max(last_pos, 0)
        if lenient:
            if seq > strict_seen:
                yield _warc_cut(make, path, f"{rel}@{at}:corrupt-{seq}", at,
                                f"WARC framing broken after it ({broken})", "corrupt")
            return
        pending = make.bad(f"{rel}@{at}:corrupt", f"{path}@{at}", "html", 0, "corrupt", at,
                           f"WARC framing broken after the record at byte {at} ({broken}); "
                           f"the records after it were read leniently")
        strict_seen = seq
    problem = _warc_tail_problem(path, max(last_pos, 0)) if path.stat().st_size else None
    if pending is not None and problem is None:
        yield pending
    replaced = held is not None and problem is not None and problem.offset == held[0]
    if held is not None and not replaced:
        yield held[2]
    if problem is not None:
        locator = held[1] if replaced and held else f"{rel}@{problem.offset}"
        yield _warc_cut(make, path, locator, problem.offset, problem.detail, problem.rule)


def _read_arc(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """Legacy ARC files (Internet Archive, before WARC): warcio reads them as WARC records."""
    from warcio.archiveiterator import ArchiveIterator

    last = 0
    with open(path, "rb") as fh:
        it = ArchiveIterator(fh, arc2warc=True)
        try:
            for rec in it:
                if rec.rec_type not in _WARC_DOC_TYPES:
                    continue
                h, http = rec.rec_headers, rec.http_headers
                url = h.get_header("WARC-Target-URI")
                if rec.length > max_doc_bytes:  # not read: warcio skips it on the next step
                    last = it.get_record_offset()
                    yield _too_large(make, f"{rel}@{last}", url or f"{path}@{last}", "html", rec.length,
                                     max_doc_bytes, f"record at byte {last}")
                    continue
                body = rec.content_stream().read()  # de-chunked and content-decoded by warcio
                last = it.get_record_offset()  # only after the read: asked before, it eats the body
                code = http.get_statuscode() if http else None
                ctype = http.get_header("Content-Type") if http else h.get_header("Content-Type")
                yield _web_record(make, path, f"{rel}@{last}", _WebPayload(
                    last, rec.rec_type, url, h.get_header("WARC-Record-ID"), h.get_header("WARC-Date"),
                    int(code) if code and code.isdigit() else None, _mime(ctype), _charset(ctype), None, None,
                    body), max_doc_bytes)
        except Exception as exc:  # warcio raises ArchiveLoadFailed, ValueError, zlib errors …
            yield make.bad(f"{rel}@{last}:corrupt", f"{path}@{last}", "html", 0, "corrupt", last,
                           f"ARC record after byte {last} unreadable ({type(exc).__name__}: {exc}); "
                           f"the rest was not read")


# --------------------------------------------------------------------------- files sources
def read_file(make: _Maker, path: Path, rel: str, fmt: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """Every record of one file of a files source, in file order."""
    if fmt == "warc":
        yield from _read_warc(make, path, rel, max_doc_bytes)
    elif fmt == "jsonl":
        if path.suffix.lower() == ".json" and _starts_with_bracket(path):
            yield from _read_json_array(make, path, rel, max_doc_bytes)
        else:
            yield from _read_jsonl(make, path, rel, max_doc_bytes)
    elif fmt == "parquet":
        yield from _read_parquet(make, path, rel, max_doc_bytes)
    else:
        yield _read_whole(make, path, rel, fmt, max_doc_bytes)


def file_format(src: SourceConfig, path: Path) -> str:
    return detect_format(path) if src.format == "auto" else src.format


def read_files(src: SourceConfig, max_doc_bytes: int, files: Iterable[Path] | None = None) -> Iterator[RawRecord]:
    """kind=files: every file of a file, directory or glob (or the given subset, as listed), in order."""
    if not src.path:
        raise SourceError(f"source for bucket {src.bucket!r}: kind 'files' needs a path")
    root = source_root(src.path)
    if files is None:
        root, files = list_source_files(src.path)
    make = _Maker(src.path, src)
    records = (r for path in files for r in read_file(make, path, _relative(path, root), file_format(src, path),
                                                      max_doc_bytes))
    if src.synthetic:  # model output: every record leaves with its lineage (synth/lineage.py)
        from tokenmill.synth.lineage import synthetic_records

        records = synthetic_records(records)
    yield from records


# --------------------------------------------------------------------------- python_stdlib
def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_stdlib_code(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """The standard library's own .py sources, without tests, IDLE and installed packages."""
    root = stdlib_dir()
    make = _Maker("python_stdlib:code", src)
    for path in _walk_sorted(root, STDLIB_EXCLUDED_DIRS):
        if path.suffix == ".py":
            yield _read_whole(make, path, _relative(path, root), "code", max_doc_bytes)


def pydoc_module_names() -> list[str]:
    """Public stdlib modules that are safe to import, sorted."""
    return sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in PYDOC_SKIP)


def _pydoc_child_main() -> None:
    """Runs in a fresh interpreter: import each module quietly, render its pydoc page, JSONL out.

    The job comes on stdin, not argv: the page of `sys` shows sys.argv, and a temporary path
    there would make that page differ on every run.
    """
    import contextlib
    import importlib
    import io
    import pydoc
    import warnings

    job = json.loads(sys.stdin.read())
    out_path, names = job["out"], job["names"]
    warnings.simplefilter("ignore")  # deprecation warnings at import are not content
    with open(out_path, "w", encoding="utf-8") as out:
        for name in names:
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    module = importlib.import_module(name)
                    page = pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, name))
                out.write(json.dumps({"name": name, "html": _ADDRESS.sub(r"\g<1>\g<2>0x0", page)}) + "\n")
            except ImportError:
                continue  # not built on this platform (winreg, msvcrt, ...): not a document
            except BaseException as exc:  # SystemExit or anything a module does at import
                out.write(json.dumps({"name": name, "error": f"{type(exc).__name__}: {exc}"}) + "\n")


def render_pydoc_pages(names: list[str]) -> list[dict[str, str]]:
    """Render pages in a child process, so the imports never touch the caller's interpreter.

    Pages must be the same on every run (the text feeds dedup hashes and tokens): the hash
    seed is fixed so set-valued defaults print in one order, the working directory is fixed and
    kept off sys.path (PYTHONSAFEPATH), and memory addresses are blanked.
    """
    import tokenmill

    package_parent = str(Path(tokenmill.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONSAFEPATH": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="tokenmill-pydoc-") as tmp:
        out_path = os.path.join(tmp, "pages.jsonl")
        code = "from tokenmill.data.sources import _pydoc_child_main; _pydoc_child_main()"
        try:
            proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=stdlib_dir(),
                                  input=json.dumps({"out": out_path, "names": names}).encode(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  timeout=PYDOC_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise SourceError(f"python_stdlib:pydoc_html: rendering took over {PYDOC_TIMEOUT_S} s") from exc
        if proc.returncode != 0:
            tail = proc.stderr.decode("utf-8", "replace")[-2000:]
            raise SourceError(f"python_stdlib:pydoc_html: renderer exited {proc.returncode}:\n{tail}")
        with open(out_path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]


def read_pydoc_html(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """HTML pages pydoc renders for the stdlib modules (what `python -m pydoc -w` writes)."""
    names = pydoc_module_names()
    if src.max_docs is not None:
        names = names[: src.max_docs]  # an upper bound; `limit` still applies max_docs/max_bytes
    make = _Maker("python_stdlib:pydoc_html", src)
    for page in render_pydoc_pages(names):
        name = page["name"]
        url = f"pydoc:{name}.html"
        if "error" in page:
            yield make.bad(name, url, "html", 0, "render_failed", name, page["error"])
            continue
        html = page["html"]
        n = len(html.encode("utf-8"))
        if n > max_doc_bytes:
            yield _too_large(make, name, url, "html", n, max_doc_bytes, "page")
        else:
            yield make.ok(name, url, "html", html, n)


def read_reference(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """The language reference topics `help('TOPIC')` shows (pydoc_data.topics), one per doc."""
    from pydoc_data.topics import topics

    make = _Maker("python_stdlib:reference", src)
    for key in sorted(topics):
        text = topics[key]
        n = len(text.encode("utf-8"))
        url = f"pydoc_data.topics:{key}"
        if n > max_doc_bytes:
            yield _too_large(make, key, url, "text", n, max_doc_bytes, "topic")
        else:
            yield make.ok(key, url, "text", text, n)


def system_html_files() -> list[Path]:
    return sorted(Path(p) for p in glob.glob(SYSTEM_HTML_GLOB, recursive=True) if Path(p).is_file())


def read_system_html(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """Python's HTML documentation when the distribution installed it (python3-doc); else none."""
    make = _Maker("python_stdlib:system_html", src)
    for path in system_html_files():
        yield _read_whole(make, path, _relative(path, Path("/usr/share/doc")), "html", max_doc_bytes)


_STDLIB_READERS = {"code": read_stdlib_code, "pydoc_html": read_pydoc_html,
                   "reference": read_reference, "system_html": read_system_html}


# --------------------------------------------------------------------------- entry point
def limit(records: Iterable[RawRecord], max_docs: int | None, max_bytes: int | None) -> Iterator[RawRecord]:
    """The longest prefix with at most max_docs records and max_bytes raw bytes."""
    if max_docs is not None:
        records = islice(records, max_docs)
    total = 0
    for record in records:
        total += record.n_bytes
        if max_bytes is not None and total > max_bytes:
            return
        yield record


def read_source(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """All records of one source, in sorted order, cut to its max_docs / max_bytes."""
    if src.kind == "files":
        records = read_files(src, max_doc_bytes)
    else:
        if src.part is None:
            raise SourceError(f"source for bucket {src.bucket!r}: kind 'python_stdlib' needs a part")
        records = _STDLIB_READERS[src.part](src, max_doc_bytes)
    return limit(records, src.max_docs, src.max_bytes)


def source_name(src: SourceConfig) -> str:
    return (src.path or "") if src.kind == "files" else f"python_stdlib:{src.part}"


def check_source(src: SourceConfig) -> None:
    """Fail fast, before any work, on a source that cannot be read at all."""
    if src.kind == "files":
        if not src.path:
            raise SourceError(f"source for bucket {src.bucket!r}: kind 'files' needs a path")
        list_source_files(src.path)
    elif src.part is None:
        raise SourceError(f"source for bucket {src.bucket!r}: kind 'python_stdlib' needs a part")


def inputs_fingerprint(src: SourceConfig) -> dict[str, Any]:
    """What identifies a source's raw inputs cheaply: file paths, sizes and mtimes, or versions."""
    if src.kind == "files":
        try:
            _root, files = list_source_files(src.path or "")
        except SourceError as exc:
            return {"kind": "files", "path": src.path, "error": str(exc)}
        return {"kind": "files", "path": src.path,
                "files": [[str(p), st.st_size, st.st_mtime_ns] for p in files for st in [p.stat()]]}
    fp: dict[str, Any] = {"kind": "python_stdlib", "part": src.part, "python": sys.version,
                          "stdlib": str(stdlib_dir())}
    if src.part == "system_html":
        fp["files"] = [[str(p), st.st_size, st.st_mtime_ns] for p in system_html_files() for st in [p.stat()]]
    return fp


# --------------------------------------------------------------------------- CLI inputs
CODE_TREE_SAMPLE = 10_000  # files looked at to call an input a code tree
CODE_TREE_SHARE = 0.5


def is_code_tree(files: list[Path]) -> bool:
    """Mostly files with a code extension (by count, over the first CODE_TREE_SAMPLE in order)."""
    sample = files[:CODE_TREE_SAMPLE]
    n_code = sum(1 for f in sample if f.suffix.lower() in CODE_EXTS)
    return bool(sample) and n_code > CODE_TREE_SHARE * len(sample)


def sources_from_paths(paths: list[str], bucket: str | None = None) -> list[SourceConfig]:
    """`tokenmill curate INPUT...`: one files source per input path, in the order given.

    Every path is checked before any is read (a missing one is a SourceError naming it). The
    bucket is `bucket` when given, else "code" for an input that is mostly source code files,
    else "web"."""
    if not paths:
        raise SourceError("no input path given")
    listed = [(p, list_source_files(p)[1]) for p in paths]
    return [SourceConfig(kind="files", path=p, bucket=bucket or ("code" if is_code_tree(files) else "web"))
            for p, files in listed]
