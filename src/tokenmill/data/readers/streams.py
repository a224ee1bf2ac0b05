"""Compressed and line-split byte streams, with the offset where a stream breaks.

gzip members and zstandard frames are read chunk by chunk (bounded output per call, so a small
bomb cannot fill memory at once); a stream cut short or holding invalid data raises StreamBreak
with the compressed offset of the member / frame, so the reader can quarantine the rest by name.
So does a stream that inflates past `max_ratio` times the compressed bytes read so far (rule
`decompression_ratio`: a bomb is stopped after a few MB, not read to its end), and a line stream
past `max_lines` lines (rule `too_many_lines`).
"""

from __future__ import annotations

import re
import zlib
from typing import Any, BinaryIO, Iterable, Iterator

CHUNK = 1 << 20  # read size for streamed files
RATIO_MIN_OUTPUT = 4 << 20  # below this many bytes out, no ratio is judged (small files compress oddly)
ZSTD_FEED = 1 << 10  # compressed bytes per zstandard call: its output per call has no bound otherwise
COMPRESSION_SUFFIXES = (".gz", ".zst")  # taken off a name before its extension is looked at
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class StreamBreak(Exception):
    """A stream that ends inside a compressed member / frame, or holds invalid data."""

    def __init__(self, rule: str, offset: int, detail: str):
        super().__init__(detail)
        self.rule, self.offset, self.detail = rule, offset, detail


def file_chunks(fh: BinaryIO) -> Iterator[bytes]:
    while chunk := fh.read(CHUNK):
        yield chunk


def check_ratio(out: int, used: int, max_ratio: float | None, what: str, start: int) -> None:
    """StreamBreak `decompression_ratio` when `out` bytes came from `used` compressed bytes at
    more than max_ratio (judged once RATIO_MIN_OUTPUT bytes are out)."""
    if max_ratio is not None and out > RATIO_MIN_OUTPUT and out > max_ratio * max(used, 1):
        raise StreamBreak(
            "decompression_ratio",
            start,
            f"{out} bytes inflated from {used} compressed bytes (over {max_ratio:g}x "
            f"max_decompression_ratio) in the {what} at byte {start}",
        )


def gunzip(chunks: Iterable[bytes], base: int = 0, max_ratio: float | None = None) -> Iterator[bytes]:
    """Decompressed bytes of concatenated gzip members (as gzip(1) reads them); raises StreamBreak
    with the compressed offset of the member that is cut short or invalid, or that inflates past
    max_ratio. Output per call is bounded, so a small bomb cannot fill memory at once."""
    d: Any = None
    member_start = consumed = base
    total_out = 0
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
                out = d.decompress(data, 8 * CHUNK)
            except zlib.error as exc:
                raise StreamBreak(
                    "corrupt", member_start, f"invalid gzip data in the member at byte {member_start}: {exc}"
                ) from None
            if d.eof:
                data, d = d.unused_data, None
            else:
                data = d.unconsumed_tail
            if out:  # judged after the chunk is out: the records before the bomb are kept
                yield out
                total_out += len(out)
                check_ratio(total_out, consumed + len(chunk) - len(data) - base, max_ratio, "gzip member", member_start)
        consumed += len(chunk)
    if d is not None:
        raise StreamBreak(
            "truncated",
            member_start,
            f"the gzip member at byte {member_start} ends at byte {consumed} before its end-of-stream marker",
        )


def unzstd(chunks: Iterable[bytes], max_ratio: float | None = None) -> Iterator[bytes]:
    """Decompressed bytes of concatenated zstandard frames; StreamBreak as for gzip. Input goes in
    ZSTD_FEED bytes at a time: one zstandard call returns all it can, and a KB can hold ~40 MB."""
    import zstandard  # lazy: only .zst inputs need it

    d: Any = None
    frame_start = consumed = total_out = 0
    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            if d is None:
                frame_start = consumed + pos
                d = zstandard.ZstdDecompressor().decompressobj()
            piece = chunk[pos : pos + ZSTD_FEED]
            try:
                out = d.decompress(piece)
            except zstandard.ZstdError as exc:
                raise StreamBreak(
                    "corrupt", frame_start, f"invalid zstandard data in the frame at byte {frame_start}: {exc}"
                ) from None
            pos += len(piece) - (len(d.unused_data) if d.eof else 0)
            if d.eof:
                d = None
            if out:
                yield out
                total_out += len(out)
                check_ratio(total_out, consumed + pos, max_ratio, "zstandard frame", frame_start)
        consumed += len(chunk)
    if d is not None:
        raise StreamBreak(
            "truncated", frame_start, f"the zstandard frame at byte {frame_start} ends at byte {consumed} before its end"
        )


def content_chunks(fh: BinaryIO, max_ratio: float | None = None) -> tuple[str, Iterator[bytes]]:
    """(compression, decompressed chunks): gzip and zstandard are told by their magic bytes."""
    head = fh.read(4)
    fh.seek(0)
    if head.startswith(GZIP_MAGIC):
        return "gzip", gunzip(file_chunks(fh), max_ratio=max_ratio)
    if head == ZSTD_MAGIC:
        return "zstandard", unzstd(file_chunks(fh), max_ratio)
    return "none", file_chunks(fh)


_NOT_SPACE = re.compile(rb"\S")


class Lines:
    """Splits a chunk stream into lines; tracks the number and offset of the next line, so a
    break in the stream names the line it cut. A line longer than `max_len` is not kept in
    memory: it comes out as None with its length.

    Blank (whitespace-only) lines are counted but never come out: a run of them is skipped with
    one regex search and one count per chunk, so a file of millions of empty lines costs what
    reading its bytes costs (one Python step per line made 35 MB of newlines take ~15 s).
    Past `max_lines` lines, StreamBreak `too_many_lines` is raised."""

    def __init__(self, chunks: Iterable[bytes], max_len: int, max_lines: int | None = None):
        self.chunks, self.max_len, self.max_lines = chunks, max_len, max_lines
        self.lineno, self.offset = 1, 0  # of the next line to come out

    def __iter__(self) -> Iterator[tuple[int, int, bytes | None, int]]:
        pending: list[bytes] = []  # the start of a line that runs on into the next chunk
        pending_len = 0
        for chunk in self.chunks:
            first = chunk.find(b"\n")
            if first < 0:
                pending_len += len(chunk)
                pending = [] if pending_len > self.max_len else [*pending, chunk]
                continue
            n = pending_len + first + 1
            line = b"".join((*pending, chunk[:first])) if n <= self.max_len + 1 else None
            yield from self._emit(line, n)
            yield from self._whole_lines(chunk, first + 1, chunk.rfind(b"\n") + 1)
            tail = chunk[chunk.rfind(b"\n") + 1 :]
            pending, pending_len = ([tail] if tail else []), len(tail)
            if pending_len > self.max_len:
                pending = []
        if pending_len:
            yield from self._emit(b"".join(pending) if pending_len <= self.max_len else None, pending_len)

    def _whole_lines(self, chunk: bytes, pos: int, end: int) -> Iterator[tuple[int, int, bytes | None, int]]:
        """The lines of chunk[pos:end] (each ends with a newline), blank ones skipped in bulk."""
        while pos < end:
            m = _NOT_SPACE.search(chunk, pos, end)
            start = end if m is None else chunk.rfind(b"\n", pos, m.start()) + 1 or pos
            if start > pos:  # blank lines before the next non-blank one (or the chunk's end)
                self._advance(chunk.count(b"\n", pos, start), start - pos)
            if m is None:
                return
            stop = chunk.find(b"\n", m.start()) + 1
            n = stop - start
            yield from self._emit(chunk[start : stop - 1] if n <= self.max_len + 1 else None, n)
            pos = stop

    def _advance(self, lines: int, n_bytes: int) -> None:
        self.lineno += lines
        self.offset += n_bytes
        if self.max_lines is not None and self.lineno > self.max_lines + 1:
            raise StreamBreak("too_many_lines", self.offset, f"more than {self.max_lines} lines (max_lines_per_file)")

    def _emit(self, line: bytes | None, n: int) -> Iterator[tuple[int, int, bytes | None, int]]:
        out = (self.lineno, self.offset, line, n)
        self._advance(1, n)
        if line is None or (line and not line.isspace()):
            yield out
