"""HTML files: UTF-8, else the charset the page declares (<meta>, http-equiv, <?xml?>), else the detector."""

from __future__ import annotations

from tokenmill.data.document import Encoding
from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source, passages


def test_html_charset_from_meta(tmp_path):
    page = '<html><head><meta charset="iso-8859-1"></head><body>Café</body></html>'
    (tmp_path / "p.html").write_bytes(page.encode("latin-1"))
    (tmp_path / "q.html").write_bytes("<html><body>naïve – ok</body></html>".encode("cp1252"))  # undeclared
    records = list(read_source(files_source(tmp_path), 1000))
    assert records[0].text == page and "naïve – ok" in records[1].text


def test_legacy_pages_by_declaration_or_detection(tmp_path):
    """Real prose in pages of the encodings crawls carry, declared three ways or not at all."""
    text = passages()
    pages = {
        "ja-meta.html": ('<html><head><meta charset="Shift_JIS"><title>献辞</title></head>'
                         f'<body><p>{text["ja"]}</p></body></html>', "shift_jis"),
        "zh-http-equiv.html": ('<html><head><meta http-equiv="Content-Type" content="text/html; charset=GB18030">'
                               f'</head><body><p>{text["zh"]}</p></body></html>', "gb18030"),
        "ru-xml.xhtml": ('<?xml version="1.0" encoding="windows-1251"?><html xmlns="http://www.w3.org/1999/xhtml">'
                         f'<body><p>{text["ru"]}</p></body></html>', "cp1251"),
        "fr-undeclared.html": (f"<html><body><p>{text['fr']}</p></body></html>", "latin-1"),
    }
    for name, (page, codec) in pages.items():
        (tmp_path / name).write_bytes(page.encode(codec))
    records = {r.locator: r for r in read_source(files_source(tmp_path), 100_000)}
    assert {k: r.text for k, r in records.items()} == {k: page for k, (page, _) in pages.items()}
    assert records["ja-meta.html"].encoding == Encoding("shift_jis", 1.0, "declared")
    assert records["zh-http-equiv.html"].encoding == Encoding("gb18030", 1.0, "declared")
    assert records["ru-xml.xhtml"].encoding == Encoding("cp1251", 1.0, "declared")
    assert records["fr-undeclared.html"].encoding.name == "cp1252"
    assert records["fr-undeclared.html"].encoding.method == "detected"
