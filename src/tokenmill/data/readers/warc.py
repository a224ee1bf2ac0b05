"""Web archives: WARC and WET (.warc .warc.gz .wet .wet.gz, Common Crawl's, read with fastwarc)
and the legacy ARC (.arc .arc.gz, which warcio converts). `response` / `resource` records with an
HTML payload become format html, text/plain ones and WET `conversion` records format text, each
with its WARC-Target-URI as url. request, metadata, warcinfo, revisit and continuation records
hold no document and are skipped, counted nowhere.

A truncated file keeps every record before the cut, and one record stands for the cut (value:
its byte offset). One bad record loses only itself: a record whose Content-Length cannot be right
(more than the file holds, or more than max_decompression_ratio times the compressed bytes left;
or a length a few bytes off, so the block runs into the next record or stops short) is
quarantined as `bad_length` / `decompression_ratio`, bytes in the middle that are no record as
`corrupt`, each with its byte offset, and reading resumes at the next record the bytes show
(readers/warc_sync.py; a .warc.gz in one gzip member: fastwarc's lenient mode). A record can also be quarantined for a non-2xx HTTP status (http_status), a
malformed HTTP head (bad_http), a payload that is not a text document (unsupported_content_type)
or a Content-Encoding that fails (bad_encoding).
"""

from __future__ import annotations

import io
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generator, Iterable, Iterator

from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, json_meta, register
from tokenmill.data.readers.decode import binary_problem, content_type_charset, decode
from tokenmill.data.readers.streams import GZIP_MAGIC, StreamBreak, file_chunks, gunzip
from tokenmill.data.readers.warc_sync import framing_problem, is_member_start, next_record, record_end

WARC_SUFFIXES = (".warc", ".warc.gz", ".wet", ".wet.gz")
ARC_SUFFIXES = (".arc", ".arc.gz")

_WARC_DOC_TYPES = frozenset({"response", "resource", "conversion"})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_SNIFF_TYPES = frozenset({"", "application/octet-stream", "unk", "unknown"})
_WARC_HEADER_MAX = 1 << 16
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*\r*$", re.I | re.M)


@dataclass(slots=True)
class _WebPayload:
    """One content-bearing archive record, whichever library read it."""

    offset: int  # where the record starts in the file (compressed offset for .gz)
    rtype: str
    url: str | None
    record_id: str | None
    date: str | None
    status: int | None
    mime: str  # payload type, lower case, without parameters ("" when unknown)
    charset: str | None
    content_encoding: str | None  # HTTP Content-Encoding still applied to the body
    transfer_encoding: str | None
    body: bytes


def _mime(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _inflate(body: bytes, encoding: str, limit: int) -> bytes | None:
    """Undo an HTTP Content-Encoding, at most limit + 1 bytes out; None when it is not that."""
    enc = encoding.strip().lower()
    if enc in ("", "identity", "none"):
        return body
    if enc in ("gzip", "x-gzip", "deflate"):
        for wbits in (16 + zlib.MAX_WBITS,) if enc != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS):
            try:
                return zlib.decompressobj(wbits).decompress(body, limit + 1)
            except zlib.error:
                continue
        return None
    if enc == "br":
        from fastwarc.stream_io import BrotliReader

        try:
            return BrotliReader(io.BytesIO(body)).read(limit + 1)
        except OSError:
            return None
    return None


def _dechunk(body: bytes) -> bytes:
    """HTTP chunked transfer coding, when the archive kept it (wget does; many crawlers store the
    de-chunked body but keep the header, so a body that does not parse as chunks stays as is)."""
    from fastwarc.stream_io import ChunkedReader

    try:
        return ChunkedReader(io.BytesIO(body)).read()
    except OSError:
        return body


def _payload_format(p: _WebPayload, body: bytes) -> str | None:
    """html, text, or None for a payload that is not a document (images, scripts, PDFs)."""
    if p.rtype == "conversion" or p.mime == "text/plain":
        return "text"
    if p.mime in _HTML_TYPES:
        return "html"
    if p.mime in _SNIFF_TYPES:
        head = body[:512].lstrip().lower()
        if head.startswith((b"<!doctype html", b"<html")):
            return "html"
    return None


def _web_record(make: RecordMaker, path: Path, locator: str, p: _WebPayload, max_doc_bytes: int) -> RawRecord:
    """One WARC/WET/ARC document record as a RawRecord, or its quarantine."""
    url = p.url or f"{path}@{p.offset}"
    where = f"record at byte {p.offset} of {path}"
    meta = json_meta({"warc_record_id": p.record_id, "warc_date": p.date, "content_type": p.mime or None})
    n = len(p.body)
    if p.status is not None and not 200 <= p.status < 300:
        return make.bad(locator, url, "html", n, "http_status", p.status, f"{where}: HTTP status {p.status}", meta)
    body = _dechunk(p.body) if p.transfer_encoding and "chunked" in p.transfer_encoding.lower() else p.body
    if p.content_encoding and not body.startswith(b"<"):  # "<": stored already decoded
        inflated = _inflate(body, p.content_encoding, max_doc_bytes)
        if inflated is None:
            return make.bad(
                locator,
                url,
                "html",
                n,
                "bad_encoding",
                p.content_encoding,
                f"{where}: payload is not valid {p.content_encoding!r} data",
                meta,
            )
        if len(inflated) > max_doc_bytes:
            return make.too_large(locator, url, "html", len(inflated), max_doc_bytes, f"{where}: decoded payload")
        body = inflated
    fmt = _payload_format(p, body)
    if fmt is None:
        return make.bad(
            locator,
            url,
            "html",
            n,
            "unsupported_content_type",
            p.mime or "unknown",
            f"{where}: payload type {p.mime or 'unknown'!r} is not a text document",
            meta,
        )
    binary = binary_problem(body, p.charset)
    if binary is not None:
        return make.bad(locator, url, fmt, n, "binary", n, f"{where}: {binary}", meta)
    decoded = decode(body, p.charset, markup=fmt == "html")  # each record by its own charset
    if decoded.text is None:
        return make.bad(locator, url, fmt, n, "undecodable", p.offset, f"{where}: {decoded.problem}", meta)
    return make.text(locator, url, fmt, decoded.text, n, where, meta, decoded.encoding)


_HTTP_HEAD_END = re.compile(rb"\n\r*\n")  # the blank line; some archives write \r\r\n line ends


def _split_http(block: bytes) -> tuple[int | None, dict[str, str], bytes] | None:
    """(status, headers with lower-case names, body) of an HTTP response block; None when the
    head has no end or no status line. Parsed here, not by fastwarc, so the block's length can be
    checked first: fastwarc's own parse reports a malformed head as an empty body."""
    m = _HTTP_HEAD_END.search(block)
    if m is None:
        return None
    lines = [ln for ln in block[: m.start()].decode("latin-1").splitlines() if ln.strip()]
    parts = lines[0].split(None, 2) if lines else []
    if len(parts) < 2 or not parts[0].upper().startswith("HTTP/") or not parts[1].isdigit():
        return None
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers, block[m.end() :]


def _fastwarc_payload(rec: Any, rtype: str, block: bytes) -> _WebPayload | None:
    """The payload of a fastwarc record whose whole block was read; None: malformed HTTP head."""
    h = rec.headers
    status, ce, te = None, None, None
    if rec.is_http:
        split = _split_http(block)
        if split is None:
            return None
        status, http, block = split
        ctype, ce, te = http.get("content-type"), http.get("content-encoding"), http.get("transfer-encoding")
    else:
        ctype = h.get("Content-Type")
    if not _mime(ctype) and h.get("WARC-Identified-Payload-Type"):
        ctype = h.get("WARC-Identified-Payload-Type")  # Common Crawl's detected type
    return _WebPayload(
        rec.stream_pos,
        rtype,
        h.get("WARC-Target-URI"),
        h.get("WARC-Record-ID"),
        h.get("WARC-Date"),
        status,
        _mime(ctype),
        content_type_charset(ctype),
        ce,
        te,
        block,
    )


def _warc_item(make: RecordMaker, path: Path, locator: str, rec: Any, max_doc_bytes: int) -> tuple[RawRecord | None, bool]:
    """(record, or None for a type that holds no document; whether the file is cut inside it)."""
    rtype, pos, expected = str(rec.record_type), rec.stream_pos, rec.content_length
    short = f"its block is shorter than its {expected} bytes"
    if rtype not in _WARC_DOC_TYPES or expected > max_doc_bytes:
        if rec.consume() < expected:
            return _warc_cut(make, path, locator, pos, short), True
        if rtype not in _WARC_DOC_TYPES:
            return None, False
        url = rec.headers.get("WARC-Target-URI") or f"{path}@{pos}"
        return make.too_large(locator, url, "html", expected, max_doc_bytes, f"record at byte {pos}"), False
    block = rec.reader.read()
    if len(block) < expected:
        return _warc_cut(make, path, locator, pos, short), True
    payload = _fastwarc_payload(rec, rtype, block)
    if payload is None:
        url = rec.headers.get("WARC-Target-URI") or f"{path}@{pos}"
        return make.bad(
            locator, url, "html", expected, "bad_http", pos, f"record at byte {pos} of {path}: malformed HTTP head"
        ), False
    return _web_record(make, path, locator, payload, max_doc_bytes), False


def _warc_cut(make: RecordMaker, path: Path, locator: str, pos: int, detail: str, rule: str = "truncated") -> RawRecord:
    what = "the file ends inside the WARC record" if rule == "truncated" else "WARC data unreadable"
    return make.bad(
        locator, f"{path}@{pos}", "html", 0, rule, pos, f"{what} at byte {pos}: {detail}; every record before it was kept"
    )


@dataclass(frozen=True, slots=True)
class _TailProblem:
    offset: int  # where the unreadable part starts (a gzip member's start for .gz)
    rule: str  # "truncated": the file ends early; "corrupt": bytes that are not a record
    detail: str


def _warc_tail_problem(path: Path, last_pos: int) -> _TailProblem | None:
    """Whether the file ends cleanly after the record starting at last_pos.

    fastwarc stops silently at a cut file, and even yields a record whose head was cut. So the
    last record is checked from the bytes: its head must end, its Content-Length bytes must all
    be there, nothing but line ends may follow, and every gzip member must be complete. Only the
    last record is read again (the whole file when it is one gzip member, which is rare)."""
    with open(path, "rb") as fh:
        head = fh.read(2)
        gz = bool(head) and GZIP_MAGIC.startswith(head)  # one byte of magic: a cut gzip file
        fh.seek(last_pos)
        lead = fh.read(2)
        aligned = gz and bool(lead) and GZIP_MAGIC.startswith(lead)  # a member per record (WARC annex D)
        fh.seek(last_pos if aligned or not gz else 0)
        chunks = file_chunks(fh)
        try:
            if gz and not aligned:  # one member for the whole file: only its end can be checked
                for _ in gunzip(chunks):
                    pass
                return None
            return _tail_after(gunzip(chunks, base=last_pos) if aligned else chunks, last_pos, aligned)
        except StreamBreak as brk:
            return _TailProblem(brk.offset if aligned else last_pos, brk.rule, brk.detail)


def _tail_after(stream: Iterable[bytes], base: int, gz: bool) -> _TailProblem | None:
    """Check the bytes from the last record's start to the end of the file (see above)."""
    buf, need, total, extra = bytearray(), -1, 0, bytearray()
    for chunk in stream:
        start, total = total, total + len(chunk)
        if need < 0:
            buf += chunk
            lead = bytes(buf[:64]).lstrip(b"\r\n")[:5]
            if not (b"WARC/".startswith(lead) or lead.startswith(b"WARC/")):
                return _TailProblem(base, "corrupt", f"no WARC record starts at byte {base}")
            m = _HTTP_HEAD_END.search(buf)
            if m is None:
                if len(buf) > _WARC_HEADER_MAX:
                    return _TailProblem(base, "corrupt", f"no end of a WARC head in {_WARC_HEADER_MAX} bytes")
                continue
            cl = _CONTENT_LENGTH.search(buf, 0, m.start() + 1)
            if cl is None:
                return _TailProblem(base, "corrupt", "its WARC head has no Content-Length")
            need = m.end() + int(cl.group(1))
            chunk, start, buf = bytes(buf), 0, bytearray()
        if len(extra) < 4096 and start + len(chunk) > need:
            extra += chunk[max(0, need - start) : max(0, need - start) + 4096]
    if need < 0:
        return _TailProblem(base, "truncated", "the file ends inside its WARC head")
    if total < need:
        return _TailProblem(base, "truncated", f"its head and block need {need} bytes, {total} are left")
    rest = bytes(extra).lstrip(b"\r\n")
    if rest:
        at = base if gz else base + need + len(extra) - len(rest)
        # a cut head has no blank line yet; a complete one fastwarc would have read as a record
        rule = "corrupt" if _HTTP_HEAD_END.search(rest) else "truncated"
        return _TailProblem(at, rule, f"{total - need} bytes after the record at byte {base} are not a whole record")
    return None


class _WarcWalk:
    """One WARC file read in segments: fastwarc strictly from a start offset until a record cannot
    be trusted, then on from the next record the bytes show (readers/warc_sync.py). A record is
    held back until the next one is read, so a record that proves untrusted (its framing broken
    after it) or cut (the file's end) is replaced by its quarantine.

    Locators are `rel@offset` (the record's start, a gzip member's start in a .warc.gz); where
    offsets do not grow (a whole file in one gzip member) the record's ordinal is added."""

    def __init__(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int):
        self.make, self.path, self.rel, self.max_doc_bytes = make, path, rel, max_doc_bytes
        self.size = path.stat().st_size
        with open(path, "rb") as fh:
            self.gz = is_member_start(fh, 0)
        self.held: tuple[int, str, RawRecord] | None = None  # (offset, locator, record)
        self.pending: RawRecord | None = None  # a break, out once a later record proves it no cut
        self.last_pos, self.seq, self.strict_seen = -1, 0, -1
        self.finished = False  # the file ended inside a record: no tail check

    def read(self) -> Iterator[RawRecord]:
        start: tuple[int, bool, int] | None = (0, False, 0)
        with open(self.path, "rb") as self.probe:  # a second handle: fastwarc's must not move
            while start is not None and not self.finished:
                start = yield from self._segment(*start)
        if not self.finished:
            yield from self._end()

    def _segment(self, start: int, lenient: bool, skip: int) -> Generator[RawRecord, None, tuple[int, bool, int] | None]:
        """Records from byte `start` (the first `skip` of them already read); returns where to go on."""
        from fastwarc.warc import ArchiveIterator

        with open(self.path, "rb") as fh:
            fh.seek(start)
            it = iter(ArchiveIterator(fh, parse_http=False, auto_decode="none", quirks_mode=lenient))
            k = 0
            while True:
                try:
                    rec = next(it)
                except StopIteration:
                    return None
                except OSError as exc:
                    return (yield from self._broken(start, lenient, k, exc))
                k += 1
                if k <= skip:  # read before the break (both modes agree there)
                    continue
                if self.pending is not None:
                    yield self.pending
                    self.pending = None
                resume = yield from self._record(rec)
                if resume is not None or self.finished:
                    return resume

    def _record(self, rec: Any) -> Generator[RawRecord, None, tuple[int, bool, int] | None]:
        pos, expected = rec.stream_pos, rec.content_length
        locator = f"{self.rel}@{pos}" if pos > self.last_pos else f"{self.rel}@{pos}+{self.seq}"
        self.last_pos, self.seq = max(pos, self.last_pos), self.seq + 1
        left = self.size - pos
        ratio = self.make.limits.max_decompression_ratio
        if self._seekable(pos) and expected > (left * ratio if self.gz else left):  # not read: it cannot be what it says
            rule = "decompression_ratio" if self.gz else "bad_length"
            why = (
                f"Content-Length {expected} would inflate from the {left} compressed bytes left past "
                f"max_decompression_ratio {ratio:g}"
                if self.gz
                else f"Content-Length {expected} is more than the {left} bytes left in the file"
            )
            return (yield from self._untrusted(pos, locator, rule, why, None))
        item, cut = _warc_item(self.make, self.path, locator, rec, self.max_doc_bytes)
        if cut:
            why = f"its block is shorter than its Content-Length {expected}"
            return (yield from self._untrusted(pos, locator, "bad_length", why, item))
        if item is not None:
            yield from self._flush()
            self.held = (pos, locator, item)
        return None

    def _untrusted(
        self, pos: int, locator: str, rule: str, why: str, cut: RawRecord | None
    ) -> Generator[RawRecord, None, tuple[int, bool, int] | None]:
        """A record whose length cannot be right: skipped to the next record when one follows;
        else the file ends inside it (a cut, as before)."""
        yield from self._flush()
        nxt = next_record(self.path, pos, self.gz) if self._seekable(pos) else None
        if nxt is None:
            yield cut or _warc_cut(self.make, self.path, locator, pos, why)
            self.finished = True
            return None
        yield self.make.bad(
            locator,
            f"{self.path}@{pos}",
            "html",
            0,
            rule,
            pos,
            f"record at byte {pos} of {self.path}: {why}; skipped to the next record at byte {nxt}",
        )
        return nxt, False, 0

    def _broken(
        self, start: int, lenient: bool, k: int, exc: OSError
    ) -> Generator[RawRecord, None, tuple[int, bool, int] | None]:
        """fastwarc found no record where the last one said the next would be: either that record's
        length is wrong, or bytes that are no record follow it. Both are quarantined by offset."""
        read_one = self.last_pos >= start  # a record was read in this segment before the break
        at = self.last_pos if read_one else start
        # strictly after `at`: fastwarc failed at `start` itself when no record was read from it
        nxt = next_record(self.path, at, self.gz) if not lenient and self._seekable(at) else None
        target = (yield from self._skip_break(at, read_one, nxt, exc)) if nxt is not None else None
        if target is not None:
            return target, False, 0
        yield from self._flush()
        at = max(self.last_pos, 0)
        if lenient:  # the lenient pass broke too: nothing more can be read
            if self.seq > self.strict_seen:
                yield _warc_cut(
                    self.make,
                    self.path,
                    f"{self.rel}@{at}:corrupt-{self.seq}",
                    at,
                    f"WARC framing broken after it ({exc})",
                    "corrupt",
                )
            self.finished = True
            return None
        self.pending = self.make.bad(
            f"{self.rel}@{at}:corrupt",
            f"{self.path}@{at}",
            "html",
            0,
            "corrupt",
            at,
            f"WARC framing broken after the record at byte {at} ({exc}); the records after it were read leniently",
        )
        self.strict_seen = self.seq
        return start, True, k  # no record start to seek to: fastwarc's quirks mode resynchronises

    def _skip_break(self, at: int, read_one: bool, nxt: int, exc: OSError) -> Generator[RawRecord, None, int | None]:
        """Quarantine what fastwarc broke on, return where to read on (None: nowhere, the file's end).
        The record at `at` may have a wrong length; else the record at `nxt` right after it is
        unreadable; else bytes between the two are no record."""
        why = framing_problem(self.path, at, self.gz) if read_one else None
        if why is not None:  # the last record read is itself untrusted: it goes, not kept
            locator = self.held[1] if self.held is not None and self.held[0] == at else f"{self.rel}@{at}"
            if self.held is not None and self.held[0] == at:
                self.held = None
            yield from self._flush()
            yield self.make.bad(
                locator,
                f"{self.path}@{at}",
                "html",
                0,
                "bad_length",
                at,
                f"record at byte {at} of {self.path}: {why}; skipped to the next record at byte {nxt}",
            )
            return nxt
        yield from self._flush()
        end = record_end(self.path, at, self.gz) if read_one else None
        if end is not None and nxt <= end:  # nothing between: the record at nxt is what failed
            after = next_record(self.path, nxt, self.gz)
            if after is not None:
                yield self.make.bad(
                    f"{self.rel}@{nxt}",
                    f"{self.path}@{nxt}",
                    "html",
                    0,
                    "corrupt",
                    nxt,
                    f"no readable WARC record at byte {nxt} of {self.path} ({exc}); skipped to the next record at byte {after}",
                )
            return after
        what = f"after the record at byte {at}" if read_one else f"from byte {at}"
        yield self.make.bad(
            f"{self.rel}@{at}:corrupt",
            f"{self.path}@{at}",
            "html",
            0,
            "corrupt",
            at,
            f"bytes {what} up to byte {nxt} of {self.path} are not a WARC record ({exc}); skipped to the next record",
        )
        return nxt

    def _seekable(self, pos: int) -> bool:
        """Whether `pos` is where a record starts, so reading can restart at a boundary after it:
        always in a plain file; in a .warc.gz only with a gzip member per record (in one member for
        the whole file, fastwarc's positions are where its compressed reads stand)."""
        return not self.gz or is_member_start(self.probe, pos)

    def _flush(self) -> Iterator[RawRecord]:
        if self.held is not None:
            yield self.held[2]
            self.held = None

    def _end(self) -> Iterator[RawRecord]:
        """The tail check: a last record cut short, or bytes after it that are no record."""
        problem = _warc_tail_problem(self.path, max(self.last_pos, 0)) if self.size else None
        if self.pending is not None and problem is None:
            yield self.pending
        held = self.held
        replaced = held is not None and problem is not None and problem.offset == held[0]
        if held is not None and not replaced:
            yield held[2]
        if problem is not None:
            locator = held[1] if replaced and held else f"{self.rel}@{problem.offset}"
            yield _warc_cut(self.make, self.path, locator, problem.offset, problem.detail, problem.rule)


def _read_warc(make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """WARC/WET with fastwarc, resynchronising after a record it cannot trust (_WarcWalk); ARC with warcio."""
    if path.name.lower().endswith(ARC_SUFFIXES):
        yield from _read_arc(make, path, rel, max_doc_bytes)
        return
    yield from _WarcWalk(make, path, rel, max_doc_bytes).read()


def _read_arc(make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """Legacy ARC files (Internet Archive, before WARC): warcio reads them as WARC records."""
    from warcio.archiveiterator import ArchiveIterator

    last = 0
    with open(path, "rb") as fh:
        it = ArchiveIterator(fh, arc2warc=True)
        try:
            for rec in it:
                if rec.rec_type not in _WARC_DOC_TYPES:
                    continue
                h, http = rec.rec_headers, rec.http_headers
                url = h.get_header("WARC-Target-URI")
                if rec.length > max_doc_bytes:  # not read: warcio skips it on the next step
                    last = it.get_record_offset()
                    yield make.too_large(
                        f"{rel}@{last}", url or f"{path}@{last}", "html", rec.length, max_doc_bytes, f"record at byte {last}"
                    )
                    continue
                body = rec.content_stream().read()  # de-chunked and content-decoded by warcio
                last = it.get_record_offset()  # only after the read: asked before, it eats the body
                code = http.get_statuscode() if http else None
                ctype = http.get_header("Content-Type") if http else h.get_header("Content-Type")
                yield _web_record(
                    make,
                    path,
                    f"{rel}@{last}",
                    _WebPayload(
                        last,
                        rec.rec_type,
                        url,
                        h.get_header("WARC-Record-ID"),
                        h.get_header("WARC-Date"),
                        int(code) if code and code.isdigit() else None,
                        _mime(ctype),
                        content_type_charset(ctype),
                        None,
                        None,
                        body,
                    ),
                    max_doc_bytes,
                )
        except Exception as exc:  # warcio raises ArchiveLoadFailed, ValueError, zlib errors …
            yield make.bad(
                f"{rel}@{last}:corrupt",
                f"{path}@{last}",
                "html",
                0,
                "corrupt",
                last,
                f"ARC record after byte {last} unreadable ({type(exc).__name__}: {exc}); the rest was not read",
            )


@register
class WarcReader(Reader):
    name = "warc"
    suffixes = WARC_SUFFIXES + ARC_SUFFIXES

    def read(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
        return _read_warc(make, path, rel, max_doc_bytes)
