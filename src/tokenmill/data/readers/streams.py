"""Compressed and line-split byte streams, with the offset where a stream breaks.

gzip members and zstandard frames are read chunk by chunk (bounded output per call, so a small
bomb cannot fill memory at once); a stream cut short or holding invalid data raises StreamBreak
with the compressed offset of the member / frame, so the reader can quarantine the rest by name.
"""

from __future__ import annotations

import zlib
from typing import Any, BinaryIO, Iterable, Iterator

CHUNK = 1 << 20  # read size for streamed files
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


def gunzip(chunks: Iterable[bytes], base: int = 0) -> Iterator[bytes]:
    """Decompressed bytes of concatenated gzip members (as gzip(1) reads them); raises StreamBreak
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
                out = d.decompress(data, 8 * CHUNK)
            except zlib.error as exc:
                raise StreamBreak("corrupt", member_start, f"invalid gzip data in the member at byte "
                                                      f"{member_start}: {exc}") from None
            if out:
                yield out
            if d.eof:
                data, d = d.unused_data, None
            else:
                data = d.unconsumed_tail
        consumed += len(chunk)
    if d is not None:
        raise StreamBreak("truncated", member_start, f"the gzip member at byte {member_start} ends at "
                                                f"byte {consumed} before its end-of-stream marker")


def unzstd(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Decompressed bytes of concatenated zstandard frames; StreamBreak as for gzip."""
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
                raise StreamBreak("corrupt", frame_start, f"invalid zstandard data in the frame at byte "
                                                     f"{frame_start}: {exc}") from None
            if out:
                yield out
            data = d.unused_data if d.eof else b""
            if d.eof:
                d = None
        consumed += len(chunk)
    if d is not None:
        raise StreamBreak("truncated", frame_start, f"the zstandard frame at byte {frame_start} ends at "
                                               f"byte {consumed} before its end")


def content_chunks(fh: BinaryIO) -> tuple[str, Iterator[bytes]]:
    """(compression, decompressed chunks): gzip and zstandard are told by their magic bytes."""
    head = fh.read(4)
    fh.seek(0)
    if head.startswith(GZIP_MAGIC):
        return "gzip", gunzip(file_chunks(fh))
    if head == ZSTD_MAGIC:
        return "zstandard", unzstd(file_chunks(fh))
    return "none", file_chunks(fh)


class Lines:
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
