"""Readers: one module per input format behind one small interface (base.Reader).

    base.py      the interface, the registry by format name, the record maker and shared checks
    decode.py    bytes to text
    streams.py   gzip / zstandard streams and line splitting, with the offset of a break
    records.py   the fields of a JSON object or Parquet row
    text.py code.py html.py jsonl.py parquet.py warc.py   one reader per format
    stdlib.py    kind=python_stdlib, the embedded demo corpus

Every module of this package is imported here, so a reader registers itself by existing:
adding a format is adding a file with a `@register`ed Reader subclass.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path

from tokenmill.data.readers.base import READERS, Reader, RecordMaker, SourceError
from tokenmill.data.readers.streams import COMPRESSION_SUFFIXES
from tokenmill.data.readers.text import DEFAULT_FORMAT

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

_claimed: dict[str, str] = {}
for _reader in READERS.values():
    for _ext in _reader.extensions:
        if _claimed.setdefault(_ext, _reader.name) != _reader.name:
            raise ImportError(f"readers {_claimed[_ext]!r} and {_reader.name!r} both claim {_ext!r}")

__all__ = ["READERS", "Reader", "RecordMaker", "SourceError", "detect_format", "get_reader", "reader_names"]


def reader_names() -> list[str]:
    return sorted(READERS)


def get_reader(name: str) -> Reader:
    try:
        return READERS[name]
    except KeyError:
        raise SourceError(f"no reader for format {name!r}; known formats: {', '.join(reader_names())}") from None


def _strip_compression(name: str) -> str:
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def detect_format(path: Path) -> str:
    """The reader for a file by its (lower-cased, possibly compound) name: a reader's whole-name
    suffixes first (.warc.gz), then its extensions once .gz / .zst is taken off, else text."""
    name = path.name.lower()
    for reader in READERS.values():
        if reader.suffixes and name.endswith(reader.suffixes):
            return reader.name
    ext = os.path.splitext(_strip_compression(name))[1]
    for reader in READERS.values():
        if ext in reader.extensions:
            return reader.name
    return DEFAULT_FORMAT
