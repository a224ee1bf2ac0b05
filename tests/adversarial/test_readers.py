"""Hostile inputs to the readers (issue 40): one bad record loses only itself, and a file built to
make a reader grind is quarantined by a limit instead. Every case uses real files written with
the real libraries (fastwarc, pyarrow, gzip, zstandard) and counts the good records around the
bad one exactly; the CLI cases run `tokenmill curate` as a real process and read its output."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from fastwarc.warc import WarcRecord, WarcRecordType

from tokenmill.data.config import SourceConfig
from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import ReadLimits
from tokenmill.data.sources import read_files
from tests.adversarial.conftest import assert_clean_error, run_cli

SENTENCES = ["The river rose slowly through the night and the town woke to water in the streets.",
             "A committee reviewed the budget line by line before the vote on Thursday.",
             "Her notes on the migration of swallows fill three notebooks and a shoebox.",
             "The bakery on the corner sells rye bread until noon and closes on Mondays."]


def _read(path: Path, limits: ReadLimits | None = None, max_doc_bytes: int = 2_000_000) -> list[RawRecord]:
    return list(read_files(SourceConfig(kind="files", path=str(path), bucket="web"), max_doc_bytes, limits=limits))


def _split(records: list[RawRecord]) -> tuple[list[RawRecord], list[RawRecord]]:
    return [r for r in records if r.problem is None], [r for r in records if r.problem is not None]


def _good_line(i: int) -> bytes:
    return json.dumps({"id": f"doc-{i}", "text": f"{SENTENCES[i % 4]} (document {i})"}).encode() + b"\n"


# --------------------------------------------------------------------------- JSONL: binary per line
def _jsonl_with_nul_line(path: Path, n_good: int = 50, bad_at: int = 3) -> None:
    """n_good good lines with one raw-NUL line as line `bad_at` (inside the first KB)."""
    lines = [_good_line(i) for i in range(n_good)]
    lines.insert(bad_at - 1, b'{"text": "torn \x00\x00\x00 write"}\n')
    path.write_bytes(b"".join(lines))


def test_jsonl_nul_line_in_first_kb_is_quarantined_alone(workdir):
    path = workdir / "mixed.jsonl"
    _jsonl_with_nul_line(path)
    good, bad = _split(_read(path))
    assert len(good) == 50 and [r.text for r in good][:2] == [json.loads(_good_line(i))["text"] for i in (0, 1)]
    assert [(r.problem.rule, r.problem.value, r.locator) for r in bad] == [("binary", "3", "mixed.jsonl:3")]
    assert f"{path}:3" in bad[0].problem.reason and "NUL byte" in bad[0].problem.reason


def test_jsonl_binary_lines_in_the_middle_each_lose_only_themselves(workdir):
    rows = [_good_line(i) for i in range(40)]
    rows[10] = bytes(b for b in range(256) if b != 0x0A) + b"\n"  # every byte but the newline
    rows[30] = b"\x00" * 100 + b"\n"
    path = workdir / "holes.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(rows)))
    good, bad = _split(_read(path))
    assert len(good) == 38
    assert [(r.problem.rule, r.locator) for r in bad] == [("binary", "holes.jsonl.gz:11"), ("binary", "holes.jsonl.gz:31")]


def test_a_binary_file_named_jsonl_is_one_record(workdir):
    """An image renamed .jsonl is still one `binary` record, not one per garbage 'line'."""
    rng = __import__("random").Random(7)
    path = workdir / "photo.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(20_000)))
    records = _read(path)
    assert [(r.problem.rule, r.locator) for r in records] == [("binary", "photo.jsonl")]


# --------------------------------------------------------------------------- limits: bombs, lines
def test_gzip_bomb_of_newlines_is_quarantined_fast(workdir):
    path = workdir / "bomb.jsonl.gz"
    path.write_bytes(gzip.compress(_good_line(0) * 3 + b"\n" * 40_000_000, 9))
    assert path.stat().st_size < 60_000
    t0 = time.perf_counter()
    good, bad = _split(_read(path))
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.5, elapsed
    assert len(good) == 3
    assert [r.problem.rule for r in bad] == ["decompression_ratio"]
    assert str(path) in bad[0].problem.reason and "max_decompression_ratio" in bad[0].problem.reason


def test_zstd_bomb_is_quarantined_fast(workdir):
    path = workdir / "bomb.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(_good_line(1) + b" " * 64_000_000))
    t0 = time.perf_counter()
    good, bad = _split(_read(path))
    assert time.perf_counter() - t0 < 1.5
    assert len(good) == 1 and [r.problem.rule for r in bad] == ["decompression_ratio"]


def test_empty_lines_cost_near_nothing_without_the_ratio_limit(workdir):
    """The cause, not just the limit: 40 M blank lines read in well under a second."""
    path = workdir / "blank.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * 40_000_000 + _good_line(2), 9))
    t0 = time.perf_counter()
    records = _read(path, ReadLimits(max_decompression_ratio=1e9))
    assert time.perf_counter() - t0 < 1.5
    assert [(r.problem, r.locator) for r in records] == [(None, "blank.jsonl.gz#id=doc-2")]


def test_lines_per_file_limit(workdir):
    path = workdir / "many.jsonl"
    path.write_bytes(b"".join(_good_line(i) for i in range(30)))
    good, bad = _split(_read(path, ReadLimits(max_lines_per_file=20)))
    assert len(good) == 20
    assert [(r.problem.rule, r.locator) for r in bad] == [("too_many_lines", "many.jsonl:21")]
    assert "more than 20 lines" in bad[0].problem.reason and str(path) in bad[0].problem.reason


# --------------------------------------------------------------------------- WARC: resynchronise
def _warc_response(n: int) -> bytes:
    page = f"<html><body><p>{SENTENCES[n % 4]} Page {n}.</p></body></html>".encode()
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + page
    rec = WarcRecord()
    rec.init_headers(WarcRecordType.response, f"<urn:uuid:00000000-0000-0000-0000-{n:012d}>".encode())
    rec.headers["WARC-Target-URI"] = f"https://news.example/{n}"
    rec.headers["Content-Type"] = "application/http; msgtype=response"
    rec.set_bytes_content(http)
    out = io.BytesIO()
    rec.write(out)
    return out.getvalue()


def _lie_about_length(record: bytes, how: str) -> bytes:
    m = re.search(rb"Content-Length: (\d+)", record)
    assert m is not None
    length = {"absurd": 999_999_999, "short": int(m.group(1)) - 9, "long": int(m.group(1)) + 9}[how]
    return record[: m.start(1)] + str(length).encode() + record[m.end(1):]


@pytest.mark.parametrize("gz", [False, True], ids=["warc", "warc.gz"])
@pytest.mark.parametrize("how", ["absurd", "short", "long"])
def test_warc_bad_content_length_loses_only_its_record(workdir, gz, how):
    records = [_warc_response(i) for i in range(11)]
    records[5] = _lie_about_length(records[5], how)
    offsets, data = [], bytearray()
    for rec in records:  # one gzip member per record, as WARC 1.1 annex D and Common Crawl do
        offsets.append(len(data))
        data += gzip.compress(rec, mtime=0) if gz else rec
    path = workdir / ("crawl.warc.gz" if gz else "crawl.warc")
    path.write_bytes(bytes(data))
    good, bad = _split(_read(path))
    assert [r.url for r in good] == [f"https://news.example/{i}" for i in range(11) if i != 5]
    assert len(bad) == 1 and bad[0].locator == f"{path.name}@{offsets[5]}"
    expected_rule = "decompression_ratio" if gz and how == "absurd" else "bad_length"
    assert bad[0].problem.rule == expected_rule and bad[0].problem.value == str(offsets[5])
    assert f"skipped to the next record at byte {offsets[6]}" in bad[0].problem.reason


def test_warc_garbage_then_records_lists_the_skipped_bytes(workdir):
    recs = [_warc_response(i) for i in range(4)]
    path = workdir / "spliced.warc"
    junk = b"\x00\x17 half of a record from another file\r\n\r\n"
    path.write_bytes(recs[0] + recs[1] + junk + recs[2] + recs[3])
    good, bad = _split(_read(path))
    assert len(good) == 4
    assert [(r.problem.rule, r.problem.value) for r in bad] == [("corrupt", str(len(recs[0])))]
    assert f"up to byte {len(recs[0]) + len(recs[1]) + len(junk)}" in bad[0].problem.reason


# --------------------------------------------------------------------------- Parquet binary text
def test_parquet_binary_text_column_is_decoded(workdir):
    texts = ["Grüße aus Köln, wo der Rhein breit ist.", "Un café crème, s'il vous plaît.", "Простой текст."]
    column = [texts[0].encode("utf-8"), b"\xef\xbb\xbf" + texts[1].encode("utf-8"),
              (texts[1] + " Voilà, très bien, à bientôt.").encode("cp1252"), texts[2].encode("utf-8")]
    path = workdir / "rows.parquet"
    pq.write_table(pa.table({"text": pa.array(column, pa.binary()), "id": ["a", "b", "c", "d"]}), path)
    records = _read(path)
    assert all(r.problem is None for r in records)
    assert [r.text for r in records] == [texts[0], texts[1], texts[1] + " Voilà, très bien, à bientôt.", texts[2]]
    assert [r.encoding.method for r in records] == ["utf-8", "bom", "detected", "utf-8"]
    assert records[2].encoding.name == "cp1252"


# --------------------------------------------------------------------------- through the CLI
def _parquet_rows(folder: Path) -> list[dict]:
    return [row for f in sorted(folder.glob("*.parquet")) for row in pq.read_table(f).to_pylist()]


def test_cli_keeps_the_good_lines_around_a_nul_line(workdir):
    path = workdir / "mixed.jsonl"
    _jsonl_with_nul_line(path)
    out = workdir / "out"
    result = run_cli("curate", path, "-o", out, "--steps", "exact_dedup", cwd=workdir)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    kept = _parquet_rows(out / "web")
    rejected = _parquet_rows(out / "_rejected")
    assert len(kept) == 50
    assert [(r["step"], r["rule"], r["value"]) for r in rejected] == [("read", "binary", "3")]
    assert f"{path}:3" in rejected[0]["reason"]


def test_cli_symlink_loop_in_a_source_folder_is_skipped_and_reported(workdir):
    src = workdir / "corpus"
    (src / "sub").mkdir(parents=True)
    (src / "a.jsonl").write_bytes(b"".join(_good_line(i) for i in range(6)))
    (src / "sub" / "b.jsonl").write_bytes(b"".join(_good_line(i) for i in range(6, 10)))
    os.symlink("loop", src / "loop")  # a link to itself
    os.symlink("..", src / "sub" / "up")  # a folder link back to its parent
    out = workdir / "out"
    result = run_cli("curate", src, "-o", out, "--steps", "exact_dedup", cwd=workdir, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert len(_parquet_rows(out / "web")) == 10
    rejected = sorted((r["rule"], r["url"]) for r in _parquet_rows(out / "_rejected"))
    assert rejected == [("symlink_loop", str(src / "loop")), ("symlink_loop", str(src / "sub" / "up"))]
    # a source path that is itself a loop: one clear line naming it
    assert_clean_error(run_cli("curate", src / "loop", "-o", workdir / "out2", cwd=workdir),
                       str(src / "loop"), "loop of symbolic links")
