"""HTML pages: one document per file, decoded by its <meta charset> (else UTF-8, then
windows-1252 as the WHATWG encoding standard does for undeclared pages)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, register
from tokenmill.data.readers.text import read_whole

HTML_EXTS = frozenset({".html", ".htm", ".xhtml"})


@register
class HtmlReader(Reader):
    name = "html"
    extensions = HTML_EXTS

    def read(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
        yield read_whole(make, path, rel, self.name, max_doc_bytes)
