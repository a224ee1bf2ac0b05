"""WARC / WET / ARC: Common Crawl records, truncation and corruption, HTTP encodings, real archives."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import pytest
from fastwarc.warc import WarcRecord, WarcRecordType

from tokenmill.data.document import Encoding
from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source, passages

REAL_HTML = Path("/work/real_corpora/web_html/python3.11-doc/library")
REAL_WARC = Path("/work/real_corpora/web_warc")


def _real_pages() -> list[bytes]:
    """Three real HTML pages: the Python docs from the real corpora, else pydoc's own pages."""
    names = ["json.html", "gzip.html", "csv.html"]
    if all((REAL_HTML / n).is_file() for n in names):
        return [(REAL_HTML / n).read_bytes() for n in names]
    import csv
    import json as json_module
    import pydoc

    return [pydoc.html.page(m.__name__, pydoc.html.document(m)).encode("utf-8")
            for m in (json_module, gzip, csv)]


def _warc_record(rtype: WarcRecordType, n: int, uri: str | None, content: bytes,
                 content_type: str, extra: dict[str, str] | None = None) -> bytes:
    """One record written by fastwarc, with a fixed date and id so the file is reproducible."""
    rec = WarcRecord()
    rec.init_headers(rtype, f"uuid:00000000-0000-0000-0000-{n:012d}".encode())
    rec.headers["WARC-Date"] = "2024-01-02T03:04:05Z"
    if uri:
        rec.headers["WARC-Target-URI"] = uri
    rec.headers["Content-Type"] = content_type
    for k, v in (extra or {}).items():
        rec.headers[k] = v
    rec.set_bytes_content(content)
    out = io.BytesIO()
    rec.write(out)
    return out.getvalue()


def _http(status: str, ctype: str, body: bytes) -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def _common_crawl_records(pages: list[bytes]) -> list[tuple[str | None, bytes]]:
    """A Common-Crawl-shaped WARC: warcinfo, then request / response / metadata per page, plus
    a 404 page and an image. (kind, bytes): kind is what the reader must make of the record."""
    recs: list[tuple[str | None, bytes]] = [
        (None, _warc_record(WarcRecordType.warcinfo, 0, None, b"software: test\r\n", "application/warc-fields"))]
    n = 1
    for i, page in enumerate(pages):
        uri = f"https://docs.example.org/page{i}.html"
        recs.append((None, _warc_record(WarcRecordType.request, n, uri, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                                        "application/http; msgtype=request")))
        recs.append(("html", _warc_record(WarcRecordType.response, n + 1, uri,
                                          _http("200 OK", "text/html; charset=utf-8", page),
                                          "application/http; msgtype=response",
                                          {"WARC-Identified-Payload-Type": "text/html"})))
        recs.append((None, _warc_record(WarcRecordType.metadata, n + 2, uri, b"fetchTimeMs: 12\r\n",
                                        "application/warc-fields")))
        n += 3
    recs.append(("http_status", _warc_record(WarcRecordType.response, n, "https://docs.example.org/gone",
                                             _http("404 Not Found", "text/html", b"<html>gone</html>"),
                                             "application/http; msgtype=response")))
    recs.append(("unsupported_content_type", _warc_record(
        WarcRecordType.response, n + 1, "https://docs.example.org/logo.png",
        _http("200 OK", "image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(256))), "application/http; msgtype=response")))
    return recs


def _write_warc(path: Path, records: list[bytes], gz: bool) -> list[int]:
    """The file and each record's start offset (one gzip member per record, as WARC asks)."""
    offsets, out = [], bytearray()
    for rec in records:
        offsets.append(len(out))
        out += gzip.compress(rec, mtime=0) if gz else rec
    path.write_bytes(bytes(out))
    return offsets


@pytest.mark.parametrize("gz", [False, True])
def test_common_crawl_warc(tmp_path, gz):
    pages = _real_pages()
    recs = _common_crawl_records(pages)
    path = tmp_path / ("crawl.warc.gz" if gz else "crawl.warc")
    offsets = _write_warc(path, [r for _, r in recs], gz)
    records = list(read_source(files_source(path), 2_000_000))
    # request / metadata / warcinfo records hold no document and are counted nowhere
    kinds = [k for k, _ in recs if k is not None]
    assert [r.problem.rule if r.problem else r.format for r in records] == kinds
    good = [r for r in records if r.problem is None]
    assert [r.text for r in good] == [p.decode("utf-8") for p in pages]
    assert [r.url for r in good] == [f"https://docs.example.org/page{i}.html" for i in range(len(pages))]
    starts = [off for (k, _), off in zip(recs, offsets) if k is not None]
    assert [r.locator for r in records] == [f"{path.name}@{off}" for off in starts]
    meta = json.loads(good[0].metadata)
    assert meta["warc_record_id"] == "<urn:uuid:00000000-0000-0000-0000-000000000002>"
    assert meta["content_type"] == "text/html" and meta["warc_date"] == "2024-01-02T03:04:05Z"
    assert records[-2].problem.value == "404" and records[-1].problem.value == "image/png"


def test_wet_conversion_records_are_text(tmp_path):
    texts = ["Erste Seite.\nMit zwei Zeilen.", "Second page — UTF-8 ✓"]
    recs = [_warc_record(WarcRecordType.warcinfo, 0, None, b"x: y\r\n", "application/warc-fields")]
    recs += [_warc_record(WarcRecordType.conversion, i + 1, f"https://w.example/{i}", t.encode(), "text/plain")
             for i, t in enumerate(texts)]
    _write_warc(tmp_path / "a.warc.wet.gz", recs, gz=True)
    records = list(read_source(files_source(tmp_path / "a.warc.wet.gz"), 10_000))
    assert [(r.format, r.text, r.url) for r in records] == [
        ("text", texts[0], "https://w.example/0"), ("text", texts[1], "https://w.example/1")]


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_warc_keeps_records_before_the_cut(tmp_path, gz):
    recs = _common_crawl_records(_real_pages())
    full = tmp_path / ("full.warc.gz" if gz else "full.warc")
    offsets = _write_warc(full, [r for _, r in recs], gz)
    data = full.read_bytes()
    # cut in the middle of the second page's response record
    second = [i for i, (k, _) in enumerate(recs) if k == "html"][1]
    cut_at = (offsets[second] + offsets[second + 1]) // 2
    path = tmp_path / full.name.replace("full", "cut")
    path.write_bytes(data[:cut_at])
    records = list(read_source(files_source(path), 2_000_000))
    assert [r.problem is None for r in records] == [True, False]
    assert records[0].text == _real_pages()[0].decode("utf-8")
    bad = records[1].problem
    assert bad.rule == "truncated" and bad.value == str(offsets[second])
    assert str(path) in bad.reason and records[1].locator == f"{path.name}@{offsets[second]}"
    # cut inside a record that holds no document: the page before it stays, the cut is reported
    request_after_first = [i for i, (k, _) in enumerate(recs) if k == "html"][0] + 1
    path.write_bytes(data[: offsets[request_after_first] + 5])
    records = list(read_source(files_source(path), 2_000_000))
    assert [r.problem.rule if r.problem else "ok" for r in records] == ["ok", "truncated"]
    assert records[1].problem.value == str(offsets[request_after_first])


def test_every_cut_of_a_warc_is_reported_once(tmp_path):
    """Whatever byte the file ends at, the pages wholly before it are kept and a cut is reported."""
    pages = [f"<html><body><p>page {i} {'x' * 40}</p></body></html>".encode() for i in range(3)]
    recs = [_warc_record(WarcRecordType.response, i, f"https://e.example/{i}",
                         _http("200 OK", "text/html", p), "application/http; msgtype=response")
            for i, p in enumerate(pages)]
    for gz in (False, True):
        full = tmp_path / ("f.warc.gz" if gz else "f.warc")
        offsets = _write_warc(full, recs, gz) + [full.stat().st_size]
        data = full.read_bytes()
        for cut in range(1, len(data), 7):
            path = tmp_path / ("c.warc.gz" if gz else "c.warc")
            path.write_bytes(data[:cut])
            got = list(read_source(files_source(path), 10_000))
            whole = sum(1 for end in offsets[1:] if end <= cut)
            ok = [r for r in got if r.problem is None]
            assert [r.text for r in ok] == [p.decode() for p in pages[: len(ok)]]
            assert whole <= len(ok) <= whole + 1, (gz, cut)  # +1: only line ends / trailer missing
            if len(ok) == whole:
                assert [r.problem.rule for r in got if r.problem] == ["truncated"], (gz, cut)


def test_warc_in_one_gzip_member_reads_with_unique_locators(tmp_path):
    recs = _common_crawl_records(_real_pages())
    _write_warc(tmp_path / "plain.warc", [r for _, r in recs], gz=False)
    (tmp_path / "one.warc.gz").write_bytes(gzip.compress((tmp_path / "plain.warc").read_bytes()))
    plain = list(read_source(files_source(tmp_path / "plain.warc"), 2_000_000))
    one = list(read_source(files_source(tmp_path / "one.warc.gz"), 2_000_000))
    assert [r.text for r in one] == [r.text for r in plain]
    assert len({r.locator for r in one}) == len(one)


def test_warc_payload_transfer_and_content_encodings(tmp_path):
    page = "<html><body><p>Grüße aus dem Archiv</p></body></html>".encode("utf-8")
    packed = gzip.compress(page, mtime=0)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(packed[i:i + 7]), packed[i:i + 7]) for i in range(0, len(packed), 7))
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Encoding: gzip\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    latin = "<html><body>Café</body></html>".encode("latin-1")
    recs = [_warc_record(WarcRecordType.response, 1, "https://a.example/", head + chunked + b"0\r\n\r\n",
                         "application/http; msgtype=response"),
            _warc_record(WarcRecordType.response, 2, "https://b.example/",
                         _http("200 OK", "text/html; charset=ISO-8859-1", latin), "application/http; msgtype=response"),
            _warc_record(WarcRecordType.response, 3, "https://c.example/",
                         head.replace(b"Transfer-Encoding: chunked\r\n", b"") + b"not gzip at all",
                         "application/http; msgtype=response")]
    _write_warc(tmp_path / "enc.warc", recs, gz=False)
    records = list(read_source(files_source(tmp_path / "enc.warc"), 10_000))
    assert records[0].text == page.decode("utf-8") and records[1].text == latin.decode("latin-1")
    assert records[2].problem.rule == "bad_encoding"


def test_warc_records_in_different_charsets(tmp_path):
    """Issue 19: each record is decoded by its own HTTP charset, else its page's, else detected;
    the records are real prose in the encodings crawls carry."""
    text = passages()
    bodies = [  # (HTTP Content-Type, page, bytes' encoding, expected Encoding)
        ("text/html; charset=Shift_JIS", f"<html><body><p>{text['ja']}</p></body></html>", "shift_jis",
         Encoding("shift_jis", 1.0, "declared")),
        ("text/html; charset=gb18030", f"<html><body><p>{text['zh']}</p></body></html>", "gb18030",
         Encoding("gb18030", 1.0, "declared")),
        ("text/html; charset=iso-8859-1", f"<html><body><p>{text['de']}</p></body></html>", "cp1252",
         Encoding("cp1252", 1.0, "declared")),
        ("text/html; charset=UTF-16LE", f"<html><body><p>{text['ru']}</p></body></html>", "utf-16-le",
         Encoding("utf-16-le", 1.0, "declared")),
        ("text/html", f'<html><head><meta charset="windows-1251"></head><body>{text["ru"]}</body></html>',
         "cp1251", Encoding("cp1251", 1.0, "declared")),
        ("text/html", f"<html><body><p>{text['es']}</p></body></html>", "latin-1", None),  # undeclared
        ("text/html; charset=utf-8", f"<html><body><p>{text['fr']}</p></body></html>", "utf-8",
         Encoding("utf-8", 1.0, "utf-8")),
    ]
    recs = [_warc_record(WarcRecordType.response, i, f"https://intl.example/{i}",
                         _http("200 OK", ctype, page.encode(codec)), "application/http; msgtype=response")
            for i, (ctype, page, codec, _) in enumerate(bodies)]
    noise = random.Random(0)
    junk = bytes(noise.randrange(0x80, 0x100) for _ in range(2000))  # nothing decodes it
    recs.append(_warc_record(WarcRecordType.response, 99, "https://intl.example/junk",
                             _http("200 OK", "text/html; charset=utf-8", junk), "application/http; msgtype=response"))
    _write_warc(tmp_path / "intl.warc.gz", recs, gz=True)
    records = list(read_source(files_source(tmp_path / "intl.warc.gz"), 100_000))
    assert [r.text for r in records[:-1]] == [page for _, page, _, _ in bodies]
    for record, (_, _, _, expected) in zip(records, bodies):
        if expected is not None:
            assert record.encoding == expected
    assert records[5].encoding.name == "cp1252" and records[5].encoding.method == "detected"
    bad = records[-1]
    assert bad.problem.rule == "undecodable" and bad.url == "https://intl.example/junk" and bad.text is None
    assert "no encoding decodes it cleanly" in bad.problem.reason and "not valid UTF-8 at byte 0" in bad.problem.reason


def test_corrupt_middle_of_a_warc_resumes_after_it(tmp_path):
    pages = [f"<html><p>page {i}</p></html>".encode() for i in range(3)]
    recs = [_warc_record(WarcRecordType.response, i, f"https://e.example/{i}",
                         _http("200 OK", "text/html", p), "application/http; msgtype=response")
            for i, p in enumerate(pages)]
    data = recs[0] + b"GARBAGE THAT IS NOT A WARC RECORD\r\n\r\n" + recs[1] + recs[2]
    (tmp_path / "bad.warc").write_bytes(data)
    records = list(read_source(files_source(tmp_path / "bad.warc"), 10_000))
    assert [r.problem.rule if r.problem else r.text for r in records] == \
        [pages[0].decode(), "corrupt", pages[1].decode(), pages[2].decode()]


def test_real_warc_and_arc_files_read(tmp_path):
    if not REAL_WARC.is_dir():
        pytest.skip("real corpora not installed")
    records = list(read_source(files_source(REAL_WARC), 2_000_000))
    ok = [r for r in records if r.problem is None]
    assert len(ok) >= 20 and all(r.problem.step == "read" for r in records if r.problem)
    by_file = {r.locator.split("@")[0] for r in ok}
    assert "pywb-sample-archive/warcs/example.arc" in by_file  # ARC via warcio
    assert "pywb-sample-archive/warcs/example.arc.gz" in by_file
    iana = [r for r in ok if r.locator.startswith("pywb-sample-archive/warcs/iana.warc.gz@")]
    assert len(iana) == 16 and all(r.format == "html" and r.url.startswith("http") for r in iana)
    assert all(r.text.lstrip().lower().startswith("<!doctype html") for r in iana)
