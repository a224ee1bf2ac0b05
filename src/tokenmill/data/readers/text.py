"""Plain text: one document per file, the reader of every file no other reader claims."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, register
from tokenmill.data.readers.decode import binary_problem, decode

DEFAULT_FORMAT = "text"  # the format of a file that no reader claims


def read_whole(
    make: RecordMaker, path: Path, locator: str, fmt: str, max_doc_bytes: int, metadata: str | None = None
) -> RawRecord:
    """One file as one document: size checked before reading, binary sniffed, then decoded
    (readers/decode.py; markup also by the charset it declares)."""
    size = path.stat().st_size
    if size > max_doc_bytes:  # checked before reading: a stray 10 GB file must not be loaded
        return make.too_large(locator, str(path), fmt, size, max_doc_bytes, "file")
    data = path.read_bytes()
    binary = binary_problem(data)
    if binary is not None:
        return make.bad(locator, str(path), fmt, size, "binary", size, binary)
    decoded = decode(data, markup=fmt == "html")
    if decoded.text is None:
        return make.bad(locator, str(path), fmt, size, "undecodable", size, decoded.problem or "", metadata)
    return make.text(locator, str(path), fmt, decoded.text, size, "file", metadata, decoded.encoding)


@register
class TextReader(Reader):
    name = DEFAULT_FORMAT

    def read(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
        yield read_whole(make, path, rel, self.name, max_doc_bytes)
