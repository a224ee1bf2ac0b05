"""Readers: formats, sorted order, quarantined bad records, limits, the embedded stdlib corpus."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import SourceConfig
from tokenmill.data.sources import (SourceError, detect_format, inputs_fingerprint, limit,
                                    list_source_files, pydoc_module_names, read_source, stdlib_dir)


def _src(path, bucket="web", **kw) -> SourceConfig:
    return SourceConfig(kind="files", path=str(path), bucket=bucket, **kw)


def test_detect_format():
    assert [detect_format(Path(p)) for p in ["a.HTML", "b.htm", "c.jsonl", "d.json", "e.parquet",
                                             "f.py", "g.rs", "h.txt", "i.md", "noext"]] == \
        ["html", "html", "jsonl", "jsonl", "parquet", "code", "code", "text", "text", "text"]


def test_directory_is_recursive_sorted_and_skips_hidden(tmp_path):
    for rel in ["b/z.txt", "a.txt", "b/a.md", ".git/config", "c/.hidden.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    records = list(read_source(_src(tmp_path), 1000))
    assert [r.locator for r in records] == ["a.txt", "b/a.md", "b/z.txt"]
    assert records[0].text == "a.txt" and records[0].source == str(tmp_path)
    assert records[0].url == str(tmp_path / "a.txt")


def test_glob_and_single_file(tmp_path):
    (tmp_path / "x.txt").write_text("x")
    (tmp_path / "y.md").write_text("y")
    assert [r.text for r in read_source(_src(tmp_path / "*.txt"), 1000)] == ["x"]
    assert [r.locator for r in read_source(_src(tmp_path / "y.md"), 1000)] == ["y.md"]


def test_missing_path_names_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SourceError, match=str(missing)):
        list(read_source(_src(missing), 1000))
    with pytest.raises(SourceError, match="matches no file"):
        list_source_files(str(tmp_path / "*.nothing"))


def test_bad_jsonl_lines_are_quarantined_with_line_numbers(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"text": "first", "url": "https://a.example/1"}), "{not json", "",
             json.dumps({"body": "no text field"}), json.dumps(["a", "list"]),
             json.dumps({"text": 42}), json.dumps({"text": "last"})]
    path.write_text("\n".join(lines) + "\n")
    records = list(read_source(_src(path), 1000))
    good = [r for r in records if r.problem is None]
    bad = [r for r in records if r.problem is not None]
    assert [r.text for r in good] == ["first", "last"]
    assert good[0].url == "https://a.example/1" and good[1].url == f"{path}:7"
    assert [(r.problem.rule, r.problem.value) for r in bad] == [
        ("bad_json", "2"), ("missing_field", "4"), ("missing_field", "5"), ("missing_field", "6")]
    assert all(r.problem.step == "read" and str(path) in r.problem.reason for r in bad)
    assert "line 2" in bad[0].problem.reason and bad[0].url == f"{path}:2"
    assert bad[0].text is None


def test_text_field_is_configurable(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"content": "hello"}) + "\n")
    assert [r.text for r in read_source(_src(path, text_field="content"), 1000)] == ["hello"]


def test_undecodable_and_too_large(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"ok \xff\xfe bytes")
    (tmp_path / "big.txt").write_text("x" * 200)
    (tmp_path / "lines.jsonl").write_bytes(b'{"text": "\xff"}\n' + json.dumps({"text": "y" * 300}).encode() + b"\n")
    (tmp_path / "surrogate.jsonl").write_text('{"text": "a\\ud800b"}\n')
    records = {r.locator: r for r in read_source(_src(tmp_path), 100)}
    assert records["bad.txt"].problem.rule == "undecodable" and "byte 3" in records["bad.txt"].problem.reason
    assert records["big.txt"].problem.rule == "too_large" and records["big.txt"].problem.value == "200"
    assert records["lines.jsonl:1"].problem.rule == "undecodable"
    assert records["lines.jsonl:2"].problem.rule == "too_large"
    assert records["surrogate.jsonl:1"].problem.rule == "undecodable"


def test_utf8_bom_is_dropped(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffhello".encode("utf-8"))
    assert [r.text for r in read_source(_src(tmp_path), 100)] == ["hello"]


def test_parquet_and_json_array(tmp_path):
    pq.write_table(pa.table({"text": ["a", None, "c"], "url": ["u0", "u1", None]}), tmp_path / "p.parquet")
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "q.parquet")
    (tmp_path / "r.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "s.json").write_text(json.dumps([{"text": "j0"}, {"nope": 1}]))
    records = list(read_source(_src(tmp_path), 1000))
    summary = [(r.locator, r.text, r.problem.rule if r.problem else None) for r in records]
    assert summary == [("p.parquet#0", "a", None), ("p.parquet#1", None, "missing_field"),
                       ("p.parquet#2", "c", None), ("q.parquet", None, "missing_field"),
                       ("r.parquet", None, "unreadable"), ("s.json#0", "j0", None),
                       ("s.json#1", None, "missing_field")]
    assert records[0].url == "u0" and records[2].url == f"{tmp_path / 'p.parquet'}#2"


def test_format_override(tmp_path):
    (tmp_path / "page.txt").write_text("<html><body><p>x</p></body></html>")
    assert next(read_source(_src(tmp_path, format="html"), 1000)).format == "html"
    assert next(read_source(_src(tmp_path), 1000)).format == "text"


def test_limits_take_a_sorted_prefix(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.txt").write_text("x" * 10)
    assert [r.locator for r in read_source(_src(tmp_path, max_docs=2), 1000)] == ["0.txt", "1.txt"]
    assert [r.locator for r in read_source(_src(tmp_path, max_bytes=35), 1000)] == ["0.txt", "1.txt", "2.txt"]
    assert list(limit(iter([]), 1, 1)) == []


def test_fingerprint_tracks_size_and_mtime(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    src = _src(tmp_path)
    fp = inputs_fingerprint(src)
    assert fp == inputs_fingerprint(src)
    (tmp_path / "a.txt").write_text("three")
    assert inputs_fingerprint(src) != fp
    assert "error" in inputs_fingerprint(_src(tmp_path / "missing"))


# --------------------------------------------------------------------------- python_stdlib
def _stdlib(part: str, **kw) -> SourceConfig:
    return SourceConfig(kind="python_stdlib", part=part, bucket="b", **kw)


def test_stdlib_code_excludes_tests_and_packages():
    records = list(read_source(_stdlib("code", max_bytes=3_000_000), 2_000_000))
    locators = [r.locator for r in records]
    assert locators == [r.locator for r in read_source(_stdlib("code", max_bytes=3_000_000), 2_000_000)]
    assert "abc.py" in locators
    assert all(r.format == "code" and r.source == "python_stdlib:code" for r in records)
    assert sum(r.n_bytes for r in records) <= 3_000_000
    banned = {"test", "tests", "site-packages", "dist-packages", "idlelib"}
    assert not any(banned & set(loc.split("/")[:-1]) for loc in locators)
    assert all(Path(r.url).is_file() and Path(r.url).is_relative_to(stdlib_dir()) for r in records)


def test_pydoc_pages_render_in_a_child_process():
    names = pydoc_module_names()
    assert "antigravity" not in names and "this" not in names and "tkinter" not in names
    assert not any(n.startswith("_") for n in names) and names == sorted(names)
    first_three = names[:3]
    fresh = [n for n in first_three if n not in sys.modules]
    records = list(read_source(_stdlib("pydoc_html", max_docs=3), 2_000_000))
    assert [r.locator for r in records] == first_three
    assert all(r.format == "html" and "<html" in r.text for r in records)
    assert all(n not in sys.modules for n in fresh)  # the imports happened elsewhere
    assert " at 0x7" not in "".join(r.text for r in records)


def test_reference_topics():
    records = list(read_source(_stdlib("reference"), 2_000_000))
    from pydoc_data.topics import topics

    assert len(records) == len(topics) and [r.locator for r in records] == sorted(topics)
    assert all(r.format == "text" and r.text for r in records)


def test_system_html_is_optional():
    records = list(read_source(_stdlib("system_html", max_docs=2), 2_000_000))
    assert all(r.format == "html" for r in records)  # none on most machines, and that is fine


def test_stdlib_fingerprint():
    fp = inputs_fingerprint(_stdlib("code"))
    assert fp["python"] == sys.version and fp["stdlib"] == str(stdlib_dir())


def test_files_source_needs_path():
    with pytest.raises(SourceError, match="needs a path"):
        list(read_source(SourceConfig(kind="files", bucket="web"), 100))


# --------------------------------------------------------------------------- issue 3: more formats
import gzip  # noqa: E402
import io  # noqa: E402

import zstandard  # noqa: E402
from fastwarc.warc import WarcRecord, WarcRecordType  # noqa: E402

from tokenmill.data.sources import sources_from_paths  # noqa: E402

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
    records = list(read_source(_src(path), 2_000_000))
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
    records = list(read_source(_src(tmp_path / "a.warc.wet.gz"), 10_000))
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
    records = list(read_source(_src(path), 2_000_000))
    assert [r.problem is None for r in records] == [True, False]
    assert records[0].text == _real_pages()[0].decode("utf-8")
    bad = records[1].problem
    assert bad.rule == "truncated" and bad.value == str(offsets[second])
    assert str(path) in bad.reason and records[1].locator == f"{path.name}@{offsets[second]}"
    # cut inside a record that holds no document: the page before it stays, the cut is reported
    request_after_first = [i for i, (k, _) in enumerate(recs) if k == "html"][0] + 1
    path.write_bytes(data[: offsets[request_after_first] + 5])
    records = list(read_source(_src(path), 2_000_000))
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
            got = list(read_source(_src(path), 10_000))
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
    plain = list(read_source(_src(tmp_path / "plain.warc"), 2_000_000))
    one = list(read_source(_src(tmp_path / "one.warc.gz"), 2_000_000))
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
    records = list(read_source(_src(tmp_path / "enc.warc"), 10_000))
    assert records[0].text == page.decode("utf-8") and records[1].text == latin.decode("latin-1")
    assert records[2].problem.rule == "bad_encoding"


def test_corrupt_middle_of_a_warc_resumes_after_it(tmp_path):
    pages = [f"<html><p>page {i}</p></html>".encode() for i in range(3)]
    recs = [_warc_record(WarcRecordType.response, i, f"https://e.example/{i}",
                         _http("200 OK", "text/html", p), "application/http; msgtype=response")
            for i, p in enumerate(pages)]
    data = recs[0] + b"GARBAGE THAT IS NOT A WARC RECORD\r\n\r\n" + recs[1] + recs[2]
    (tmp_path / "bad.warc").write_bytes(data)
    records = list(read_source(_src(tmp_path / "bad.warc"), 10_000))
    assert [r.problem.rule if r.problem else r.text for r in records] == \
        [pages[0].decode(), "corrupt", pages[1].decode(), pages[2].decode()]


def test_real_warc_and_arc_files_read(tmp_path):
    if not REAL_WARC.is_dir():
        pytest.skip("real corpora not installed")
    records = list(read_source(_src(REAL_WARC), 2_000_000))
    ok = [r for r in records if r.problem is None]
    assert len(ok) >= 20 and all(r.problem.step == "read" for r in records if r.problem)
    by_file = {r.locator.split("@")[0] for r in ok}
    assert "pywb-sample-archive/warcs/example.arc" in by_file  # ARC via warcio
    assert "pywb-sample-archive/warcs/example.arc.gz" in by_file
    iana = [r for r in ok if r.locator.startswith("pywb-sample-archive/warcs/iana.warc.gz@")]
    assert len(iana) == 16 and all(r.format == "html" and r.url.startswith("http") for r in iana)
    assert all(r.text.lstrip().lower().startswith("<!doctype html") for r in iana)


# --------------------------------------------------------------------------- JSONL, compressed
def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def test_jsonl_keeps_id_source_metadata(tmp_path):
    rows = [{"id": "doc-1", "text": "alpha", "url": "https://a.example/", "source": "wiki",
             "metadata": {"lang": "en", "n": 1}},
            {"text": "beta"}, {"id": 7, "text": "gamma"}]
    (tmp_path / "d.jsonl").write_bytes(_jsonl(rows))
    records = list(read_source(_src(tmp_path / "d.jsonl"), 1000))
    assert [r.locator for r in records] == ["d.jsonl#id=doc-1", "d.jsonl:2", "d.jsonl#id=7"]
    assert json.loads(records[0].metadata) == {"id": "doc-1", "source": "wiki", "metadata": {"lang": "en", "n": 1}}
    assert records[1].metadata is None and json.loads(records[2].metadata) == {"id": 7}
    assert records[0].url == "https://a.example/"
    from tokenmill.data.document import Doc

    assert Doc.from_raw(records[0]).metadata == records[0].metadata


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_jsonl_and_its_truncation(tmp_path, codec):
    rows = [{"text": f"line {i} " + "w" * (i % 50)} for i in range(20_000)]  # zstd: several 128 KB blocks
    raw = _jsonl(rows)
    packed = gzip.compress(raw, mtime=0) if codec == "gzip" else zstandard.ZstdCompressor().compress(raw)
    ext = ".jsonl.gz" if codec == "gzip" else ".jsonl.zst"
    (tmp_path / f"a{ext}").write_bytes(packed)
    records = list(read_source(_src(tmp_path / f"a{ext}"), 10_000))
    assert [r.text for r in records] == [r["text"] for r in rows]
    assert records[-1].locator == f"a{ext}:20000"

    (tmp_path / f"a{ext}").write_bytes(packed[: len(packed) // 2])
    records = list(read_source(_src(tmp_path / f"a{ext}"), 10_000))
    good, bad = records[:-1], records[-1]
    assert all(r.problem is None for r in good) and 0 < len(good) < len(rows)
    assert [r.text for r in good] == [r["text"] for r in rows[: len(good)]]
    assert bad.problem.rule == "truncated" and bad.locator == f"a{ext}:{len(good) + 1}"
    assert f"line {len(good) + 1}" in bad.problem.reason and str(tmp_path / f"a{ext}") in bad.problem.reason


def test_multi_member_gzip_reads_whole(tmp_path):
    a, b = _jsonl([{"text": "one"}]), _jsonl([{"text": "two"}])
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress(a) + gzip.compress(b))
    assert [r.text for r in read_source(_src(tmp_path / "m.jsonl.gz"), 100)] == ["one", "two"]


def test_corrupt_gzip_is_quarantined(tmp_path):
    packed = bytearray(gzip.compress(_jsonl([{"text": f"t{i}"} for i in range(2000)]), mtime=0))
    packed[len(packed) // 2: len(packed) // 2 + 64] = b"\xff" * 64
    (tmp_path / "x.jsonl.gz").write_bytes(bytes(packed))
    records = list(read_source(_src(tmp_path / "x.jsonl.gz"), 100))
    assert all(r.problem is None for r in records[:-1])
    assert records[-1].problem.rule == "corrupt" and "invalid gzip data" in records[-1].problem.reason


def test_invalid_utf8_line_names_file_and_line(tmp_path):
    path = tmp_path / "u.jsonl"
    path.write_bytes(_jsonl([{"text": "ok"}]) + b'{"text": "caf\xe9"}\n' + _jsonl([{"text": "ok too"}]))
    records = list(read_source(_src(path), 100))
    assert [r.text for r in records] == ["ok", None, "ok too"]
    assert records[1].problem.rule == "undecodable" and records[1].problem.value == "2"
    assert f"{path}:2" in records[1].problem.reason and "line 2" in records[1].problem.reason


def test_binary_files_are_one_quarantined_record(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"text\x00with a NUL")
    (tmp_path / "b.jsonl").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "c.txt").write_bytes(b"\x01\x02\x03\x04 mostly controls \x05\x06\x07\x08" * 3)
    (tmp_path / "d.txt").write_bytes("tabs\tand\fform feeds\r\n are text".encode())
    records = {r.locator: r for r in read_source(_src(tmp_path), 100_000)}
    assert sorted(records) == ["a.txt", "b.jsonl", "c.txt", "d.txt"]
    assert records["a.txt"].problem.rule == "binary" and "NUL byte at offset 4" in records["a.txt"].problem.reason
    assert records["b.jsonl"].problem.rule == "binary"
    assert records["c.txt"].problem.rule == "binary" and "control characters" in records["c.txt"].problem.reason
    assert records["d.txt"].problem is None


def test_empty_documents_are_quarantined(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"")
    (tmp_path / "b.md").write_bytes(b" \n\t\n")
    (tmp_path / "c.jsonl").write_bytes(_jsonl([{"text": ""}, {"text": "  \n"}, {"text": "x"}]))
    records = list(read_source(_src(tmp_path), 100))
    assert [(r.locator, r.problem.rule if r.problem else "ok") for r in records] == [
        ("a.txt", "empty"), ("b.md", "empty"), ("c.jsonl:1", "empty"), ("c.jsonl:2", "empty"), ("c.jsonl:3", "ok")]


def test_parquet_keeps_id_and_metadata(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"], "id": ["x1", None], "source": ["s", "s"]}), tmp_path / "p.parquet")
    records = list(read_source(_src(tmp_path / "p.parquet"), 100))
    assert [r.locator for r in records] == ["p.parquet#id=x1", "p.parquet#1"]
    assert json.loads(records[0].metadata) == {"id": "x1", "source": "s"}


def test_code_records_carry_language(tmp_path):
    (tmp_path / "m.py").write_text("print(1)\n")
    (tmp_path / "lib.rs").write_text("fn main() {}\n")
    (tmp_path / "README").write_text("read me\n")
    records = {r.locator: r for r in read_source(_src(tmp_path, bucket="code"), 100)}
    assert json.loads(records["m.py"].metadata) == {"language": "python"}
    assert json.loads(records["lib.rs"].metadata) == {"language": "rust"}
    assert records["README"].format == "text" and records["README"].metadata is None


def test_html_charset_from_meta(tmp_path):
    page = '<html><head><meta charset="iso-8859-1"></head><body>Café</body></html>'
    (tmp_path / "p.html").write_bytes(page.encode("latin-1"))
    (tmp_path / "q.html").write_bytes("<html><body>naïve – ok</body></html>".encode("cp1252"))  # undeclared
    records = list(read_source(_src(tmp_path), 1000))
    assert records[0].text == page and "naïve – ok" in records[1].text


def test_compound_extensions():
    assert [detect_format(Path(p)) for p in ["a.warc", "a.warc.gz", "b.wet.gz", "c.arc.gz", "d.jsonl.gz",
                                             "e.jsonl.zst", "f.ndjson", "g.pm", "h.txt.gz"]] == \
        ["warc", "warc", "warc", "warc", "jsonl", "jsonl", "jsonl", "code", "text"]


def test_sources_from_paths(tmp_path):
    code, web = tmp_path / "repo", tmp_path / "site"
    for d, names in [(code, ["a.py", "b.py", "README.md"]), (web, ["a.html", "b.py", "c.txt"])]:
        d.mkdir()
        for n in names:
            (d / n).write_text("x")
    srcs = sources_from_paths([str(code), str(web)])
    assert [(s.kind, s.path, s.bucket) for s in srcs] == [("files", str(code), "code"), ("files", str(web), "web")]
    assert [s.bucket for s in sources_from_paths([str(code)], bucket="books")] == ["books"]
    with pytest.raises(SourceError, match="nope"):
        sources_from_paths([str(web), str(tmp_path / "nope")])
    with pytest.raises(SourceError):
        sources_from_paths([])
