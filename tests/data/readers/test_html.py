"""HTML files: decoded by their declared charset, else UTF-8, else windows-1252."""

from __future__ import annotations

from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source


def test_html_charset_from_meta(tmp_path):
    page = '<html><head><meta charset="iso-8859-1"></head><body>Café</body></html>'
    (tmp_path / "p.html").write_bytes(page.encode("latin-1"))
    (tmp_path / "q.html").write_bytes("<html><body>naïve – ok</body></html>".encode("cp1252"))  # undeclared
    records = list(read_source(files_source(tmp_path), 1000))
    assert records[0].text == page and "naïve – ok" in records[1].text
