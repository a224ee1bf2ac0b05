"""Finding the WARC records again after one that cannot be trusted, from the file's own bytes.

fastwarc trusts each record's Content-Length. When one lies (absurdly large, or a few bytes off,
so the block runs into the next record or stops short of it) fastwarc either reads to the end of
the file or stops at the garbage it lands in. The reader then asks this module where the next
record starts and reads on from there, so one bad record loses only itself:

- plain WARC: the next `WARC/1.0` / `WARC/1.1` version line at a line start whose head (up to
  the blank line) holds a Content-Length;
- WARC.gz with a gzip member per record (WARC 1.1 annex D; Common Crawl's): the next gzip member
  whose first inflated bytes are `WARC/`. A whole file in one gzip member has no such point to
  seek to: the reader falls back to fastwarc's lenient mode there.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import BinaryIO

from tokenmill.data.readers.streams import CHUNK, GZIP_MAGIC

WARC_HEAD_MAX = 1 << 16  # a WARC head longer than this is no head
_VERSION_LINE = re.compile(rb"(?:^|\n)(WARC/1\.[01]\r?\n)")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*\r*$", re.I | re.M)
_MEMBER_START = re.compile(re.escape(GZIP_MAGIC + b"\x08"))  # magic + deflate, RFC 1952
_OVERLAP = 16  # bytes a match may straddle between two read chunks


def is_member_start(fh: BinaryIO, pos: int) -> bool:
    fh.seek(pos)
    return fh.read(2) == GZIP_MAGIC


def _head_length(head: bytes) -> tuple[int, int] | None:
    """(bytes of the head with its blank line, Content-Length) of a WARC head, or None."""
    m = _HEAD_END.search(head, 0, WARC_HEAD_MAX)
    cl = _CONTENT_LENGTH.search(head, 0, m.start() + 1) if m else None
    return (m.end(), int(cl.group(1))) if m and cl else None


def _member_bytes(path: Path, pos: int, limit: int) -> bytes:
    """At most `limit` inflated bytes of the gzip member at pos (less when it ends or is bad)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    with open(path, "rb") as fh:
        fh.seek(pos)
        data = b""
        try:
            while len(out) < limit and not d.eof:
                data = data or fh.read(CHUNK)
                if not data:
                    break
                got = d.decompress(data, limit - len(out))
                if not got and data == d.unconsumed_tail:
                    break  # no progress: nothing more comes out of this member
                out += got
                data = d.unconsumed_tail
        except zlib.error:
            pass
    return bytes(out)


def _raw_bytes(path: Path, pos: int, limit: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(pos)
        return fh.read(limit)


def framing_problem(path: Path, pos: int, gz: bool) -> str | None:
    """Why the record at pos does not end where its Content-Length says, or None when it does:
    the block is all there and only line ends follow it before the next record (or the end of its
    gzip member / of the file). A length a few bytes off either way is caught here."""
    read = _member_bytes if gz else _raw_bytes
    parsed = _head_length(read(path, pos, WARC_HEAD_MAX))
    if parsed is None:
        return "its head has no Content-Length"
    end = parsed[0] + parsed[1]
    data = read(path, pos, end + 64)
    rest = data[end:]
    if (
        len(data) >= end
        and (
            rest.startswith(b"\r\n\r\n")  # as the spec ends a record: bytes after it are another matter
            or rest[:1] in (b"", b"\r", b"\n")
            and rest.lstrip(b"\r\n")[:5] in (b"", b"WARC/")
        )
    ):
        return None
    return f"its Content-Length {parsed[1]} does not end where the record does (it runs into the next record or stops short)"


def record_end(path: Path, pos: int, gz: bool) -> int | None:
    """Where the record at pos ends, with the line ends after it (a .warc.gz: where its gzip
    member ends); None when that cannot be told."""
    if gz:
        return _member_end(path, pos)
    parsed = _head_length(_raw_bytes(path, pos, WARC_HEAD_MAX))
    if parsed is None:
        return None
    end = pos + parsed[0] + parsed[1]
    rest = _raw_bytes(path, end, 64)
    return end + len(rest) - len(rest.lstrip(b"\r\n"))


def _member_end(path: Path, pos: int) -> int | None:
    """The offset just past the gzip member at pos (its output inflated and dropped), or None."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as fh:
        fh.seek(pos)
        try:
            while not d.eof and (data := fh.read(CHUNK)):
                while data and not d.eof:
                    d.decompress(data, CHUNK)
                    data = d.unconsumed_tail
            return fh.tell() - len(d.unused_data) if d.eof else None
        except zlib.error:
            return None


def next_record(path: Path, after: int, gz: bool) -> int | None:
    """The offset of the first record that starts after byte `after` (a gzip member start for a
    .warc.gz), or None when no record follows."""
    with open(path, "rb") as fh:
        pos = after + 1
        while True:
            fh.seek(pos)
            chunk = fh.read(CHUNK)
            if not chunk:
                return None
            pattern = _MEMBER_START if gz else _VERSION_LINE
            for m in pattern.finditer(chunk):
                at = pos + (m.start() if gz else m.start(1))
                if at > after and (_member_starts_record(path, at) if gz else _head_at(path, at)):
                    return at
            if len(chunk) < CHUNK:
                return None
            pos += len(chunk) - _OVERLAP


def _member_starts_record(path: Path, at: int) -> bool:
    return _member_bytes(path, at, 16).startswith(b"WARC/")


def _head_at(path: Path, at: int) -> bool:
    """A WARC head starts at `at`, at a line start (a chunk may begin mid-line)."""
    before = _raw_bytes(path, at - 1, 1) if at else b"\n"
    return before == b"\n" and _head_length(_raw_bytes(path, at, WARC_HEAD_MAX)) is not None
