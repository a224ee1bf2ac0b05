"""HTML pages: one document per file; bytes that are not UTF-8 are decoded by the charset the page
declares (<meta charset>, http-equiv, <?xml encoding?>), else by the detector (readers/decode.py)."""

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
