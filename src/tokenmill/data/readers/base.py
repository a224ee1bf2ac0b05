"""The reader interface: a format name, the files it claims, and how it reads one file.

A reader turns one file of a `kind: files` source into RawRecords, in file order. Bad input is
never fatal and never vanishes (docs/curation.md): a record that cannot be read is yielded with
`problem` set (RecordMaker.bad) and ends in `_rejected` at step "read" with a rule, the measured
value and a reason naming the file and the line / byte offset / row.

Adding a format is adding a module to this package that defines a `Reader` subclass decorated
with `@register`: the package imports every module in it, `detect_format` asks every registered
reader which files it claims, and `SourceConfig.format` accepts every registered name.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, Protocol

from tokenmill.data.document import Encoding, RawRecord, Rejection, format_value


class SourceFields(Protocol):
    """What a reader reads of its source's config (`data.config.SourceConfig` has these fields).
    A protocol, not the config class: data/config.py validates formats against this package, so
    the readers must not import it back."""

    @property
    def bucket(self) -> str: ...
    @property
    def license(self) -> str: ...
    @property
    def text_field(self) -> str: ...
    @property
    def max_docs(self) -> int | None: ...


BINARY_SNIFF_BYTES = 1024
BINARY_CONTROL_SHARE = 0.10
# C0 controls that text does not use: all but \t \n \v \f \r (ESC counts: raw terminal output).
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])


DEFAULT_MAX_DECOMPRESSION_RATIO = 500.0  # gzip's own ceiling is ~1030x; text compresses 3-10x
DEFAULT_MAX_LINES_PER_FILE = 50_000_000


class SourceError(ValueError):
    """A source that cannot be read at all; the message names the config path."""


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """Per-file limits past which a reader stops and quarantines the rest instead of grinding
    (curate.max_decompression_ratio / curate.max_lines_per_file)."""

    max_decompression_ratio: float = DEFAULT_MAX_DECOMPRESSION_RATIO
    max_lines_per_file: int = DEFAULT_MAX_LINES_PER_FILE


class RecordMaker:
    """Builds the records of one source, good or quarantined, with its shared fields."""

    def __init__(self, source: str, src: SourceFields, limits: ReadLimits | None = None):
        self.source = source
        self.src = src
        self.limits = limits or ReadLimits()

    def ok(
        self,
        locator: str,
        url: str,
        fmt: str,
        text: str,
        n_bytes: int,
        metadata: str | None = None,
        encoding: Encoding | None = None,
    ) -> RawRecord:
        return RawRecord(
            self.source, locator, url, self.src.bucket, self.src.license, fmt, text, n_bytes, None, metadata, encoding
        )

    def bad(
        self, locator: str, url: str, fmt: str, n_bytes: int, rule: str, value: Any, reason: str, metadata: str | None = None
    ) -> RawRecord:
        problem = Rejection("read", rule, format_value(value), f"{url}: {reason}")
        return RawRecord(self.source, locator, url, self.src.bucket, self.src.license, fmt, None, n_bytes, problem, metadata)

    def text(
        self,
        locator: str,
        url: str,
        fmt: str,
        text: str,
        n_bytes: int,
        what: str,
        metadata: str | None = None,
        encoding: Encoding | None = None,
    ) -> RawRecord:
        """A decoded document, or its quarantine when it holds nothing but whitespace."""
        if is_blank(text):
            record = self.bad(locator, url, fmt, n_bytes, "empty", len(text), f"{what} is empty", metadata)
            record.encoding = encoding
            return record
        return self.ok(locator, url, fmt, text, n_bytes, metadata, encoding)

    def too_large(self, locator: str, url: str, fmt: str, n: int, limit: int, what: str) -> RawRecord:
        return self.bad(locator, url, fmt, n, "too_large", n, f"{what} of {n} bytes exceeds max_doc_bytes {limit}; not parsed")


class Reader:
    """One input format. Subclasses set `name` (the `SourceConfig.format` value), the files they
    claim under `format: auto`, and implement `read`."""

    name: ClassVar[str]
    # File extensions claimed, lower case, after a compression suffix (.gz, .zst) is taken off.
    extensions: ClassVar[frozenset[str]] = frozenset()
    # Whole-name endings claimed before any other rule (compound ones such as ".warc.gz").
    suffixes: ClassVar[tuple[str, ...]] = ()
    # Whether its records can carry their own ids (RawRecord.record_id; data/doc_ids.py).
    carries_ids: ClassVar[bool] = False

    def read(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
        """Every record of one file, in file order; `rel` is its path relative to the source root."""
        raise NotImplementedError


READERS: dict[str, Reader] = {}


def register(cls: type[Reader]) -> type[Reader]:
    """Class decorator: make a reader known by its name."""
    if cls.name in READERS and type(READERS[cls.name]) is not cls:
        raise ValueError(f"two readers are named {cls.name!r}: {type(READERS[cls.name]).__name__} and {cls.__name__}")
    READERS[cls.name] = cls()
    return cls


# --------------------------------------------------------------------------- shared helpers
def binary_reason(head: bytes) -> str | None:
    """Why the first KB looks binary, or None: a NUL byte, or a high share of C0 controls."""
    head = head[:BINARY_SNIFF_BYTES]
    nul = head.find(b"\0")
    if nul >= 0:
        return f"binary: NUL byte at offset {nul}"
    n_control = len(head) - len(head.translate(None, _CONTROL_BYTES))
    if head and n_control > BINARY_CONTROL_SHARE * len(head):
        return f"binary: {n_control} of the first {len(head)} bytes are control characters"
    return None


def line_binary_reason(line: bytes) -> str | None:
    """binary_reason for one line of a line format: a NUL byte anywhere in it (memchr, cheap),
    or a high share of C0 controls in its first KB."""
    nul = line.find(b"\0")
    if nul >= 0:
        return f"binary: NUL byte at offset {nul} of the line"
    return binary_reason(line)


def is_blank(text: str) -> bool:
    return not text or text.isspace()  # isspace: no copy, unlike strip()


def is_encodable(text: str) -> bool:
    """JSON can carry lone surrogates ("\\ud800") that no UTF-8 file can hold."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def json_meta(fields: dict[str, Any]) -> str | None:
    present = {k: v for k, v in fields.items() if v is not None}
    return json.dumps(present, ensure_ascii=False, default=str) if present else None


def relative(path: Path, root: Path) -> str:
    return Path(os.path.relpath(path, root)).as_posix()


def walk_sorted(root: Path, excluded: frozenset[str] = frozenset(), follow_links: bool = False) -> Iterator[Path]:
    """Files under root in sorted order; hidden entries (.git, .DS_Store) are not content.

    With follow_links, a link to a folder is walked once: a folder link that leads back to a
    folder already on the walk (a loop) is listed as an entry itself, and so is a folder that
    cannot be listed, so reading it quarantines it by name (unreadable_reason) instead of the
    walk never ending or the folder vanishing. Links to files, broken ones included, are listed."""
    seen: set[tuple[int, int]] = set()
    errors: list[OSError] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=errors.append, followlinks=follow_links):
        st = os.stat(dirpath)
        seen.add((st.st_dev, st.st_ino))
        listed = [n for n in filenames if not n.startswith(".")]
        walked = []
        for d in sorted(d for d in dirnames if not d.startswith(".") and d not in excluded):
            if follow_links and _folder_key(os.path.join(dirpath, d)) in seen:
                listed.append(d)  # a loop: reported, not walked
            else:
                walked.append(d)
        dirnames[:] = walked
        for name in sorted(listed):
            yield Path(dirpath) / name
        for err in errors:  # folders os.walk could not list, as it met them
            if err.filename:
                yield Path(err.filename)
        errors.clear()


def _folder_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def unreadable_reason(path: Path) -> tuple[str, str] | None:
    """(rule, reason) when a listed path is no file a reader can open: a loop of links, a broken
    link, a folder (a link back into the walk), a FIFO or device (reading one would block), no
    permission; None for a readable regular file."""
    try:
        st = path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink_loop", "a loop of symbolic links; not read"
        if path.is_symlink():
            return "unreadable", f"a broken symbolic link to {os.readlink(path)!r}; not read"
        return "unreadable", f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISDIR(st.st_mode):
        if not os.access(path, os.R_OK | os.X_OK):
            return "unreadable", "a folder that cannot be listed (permission denied); not read"
        return "symlink_loop", "a link to a folder already read (a loop of links); not read again"
    if not stat.S_ISREG(st.st_mode):
        return "unreadable", "not a regular file (a FIFO, socket or device); not read"
    if not os.access(path, os.R_OK):
        return "unreadable", "cannot be read: permission denied"
    return None


def file_size(path: Path) -> int:
    """The size of a listed file, 0 when it cannot be stat'ed (its reader quarantines it)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
