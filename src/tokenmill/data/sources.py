"""Readers: a SourceConfig in, RawRecords out, in a deterministic (sorted) order.

kind=files reads a file, a directory (recursively) or a glob; the format comes from the
extension unless the config names one. kind=python_stdlib is the embedded demo corpus: real
text written by others that every Python installation carries, read with no network.

A record that cannot be read (bad JSON line, undecodable bytes, no text field, too large) is
not fatal: it is yielded with `problem` set and ends in `_rejected` at step "read", naming the
file and line. Only a source that cannot be read at all (a missing path) raises.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from tokenmill.config import SourceConfig
from tokenmill.data.document import RawRecord, Rejection, format_value

VERSION = "1"

HTML_EXTS = frozenset({".html", ".htm", ".xhtml"})
JSONL_EXTS = frozenset({".jsonl", ".json", ".ndjson"})
PARQUET_EXTS = frozenset({".parquet"})
CODE_EXTS = frozenset({
    ".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cu", ".rs", ".go", ".java",
    ".kt", ".scala", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".rb", ".php", ".pl", ".lua", ".sh",
    ".bash", ".zsh", ".sql", ".swift", ".cs", ".m", ".jl", ".hs", ".ml", ".r", ".zig", ".nim",
})

# Directories of the standard library that are not library code: third-party installs, the
# test suites (huge, repetitive, full of deliberately odd code), the IDLE application.
STDLIB_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib",
                                  "__pycache__"})
# Modules whose import has visible side effects (opens a browser, prints, opens windows).
PYDOC_SKIP = frozenset({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo",
                        "__main__"})
PYDOC_TIMEOUT_S = 300
SYSTEM_HTML_GLOB = "/usr/share/doc/python3*/html/**/*.html"
# pydoc prints values like "<object object at 0x7f32aa14c170>" or "<PyDLL 'None', handle
# 7fb90abe02e0>": the address changes every run, and would change the text, its dedup hash and
# every token after it. Docstring blocks write spaces as &nbsp;. 8+ hex digits: a pointer.
_ADDRESS = re.compile(r"\b(at|handle)(\s|&nbsp;)(0x)?[0-9a-fA-F]{8,}\b")


class SourceError(ValueError):
    """A source that cannot be read at all; the message names the config path."""


# --------------------------------------------------------------------------- helpers
def detect_format(path: Path) -> str:
    ext = path.suffix.lower()
    if ext in HTML_EXTS:
        return "html"
    if ext in JSONL_EXTS:
        return "jsonl"
    if ext in PARQUET_EXTS:
        return "parquet"
    if ext in CODE_EXTS:
        return "code"
    return "text"


def _walk_sorted(root: Path, excluded: frozenset[str] = frozenset()) -> Iterator[Path]:
    """Files under root in sorted order; hidden entries (.git, .DS_Store) are not content."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in excluded)
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def list_source_files(path: str) -> tuple[Path, list[Path]]:
    """(root the locators are relative to, files in sorted order) for a file, dir or glob."""
    if glob.has_magic(path):
        files = sorted(Path(p) for p in glob.glob(path, recursive=True) if Path(p).is_file())
        if not files:
            raise SourceError(f"source path {path!r}: the glob matches no file")
        prefix = path[: min(m.start() for m in re.finditer(r"[*?\[]", path))]
        root = Path(prefix) if prefix.endswith(os.sep) else Path(prefix).parent
        return root, files
    p = Path(path)
    if p.is_file():
        return p.parent, [p]
    if p.is_dir():
        return p, list(_walk_sorted(p))
    raise SourceError(f"source path {path!r} does not exist")


def _relative(path: Path, root: Path) -> str:
    return Path(os.path.relpath(path, root)).as_posix()


def _decode(data: bytes) -> tuple[str | None, str | None]:
    """(text, None) or (None, problem); a leading UTF-8 BOM is not part of the text."""
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 at byte {exc.start}: {exc.reason}"


def _is_encodable(text: str) -> bool:
    """JSON can carry lone surrogates ("\\ud800") that no UTF-8 file can hold."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


class _Maker:
    """Builds the records of one source, good or quarantined, with its shared fields."""

    def __init__(self, source: str, src: SourceConfig):
        self.source = source
        self.src = src

    def ok(self, locator: str, url: str, fmt: str, text: str, n_bytes: int) -> RawRecord:
        return RawRecord(self.source, locator, url, self.src.bucket, self.src.license, fmt, text, n_bytes)

    def bad(self, locator: str, url: str, fmt: str, n_bytes: int, rule: str, value: Any,
            reason: str) -> RawRecord:
        problem = Rejection("read", rule, format_value(value), f"{url}: {reason}")
        return RawRecord(self.source, locator, url, self.src.bucket, self.src.license, fmt, None,
                         n_bytes, problem)


def _too_large(make: _Maker, locator: str, url: str, fmt: str, n: int, limit: int, what: str) -> RawRecord:
    return make.bad(locator, url, fmt, n, "too_large", n,
                    f"{what} of {n} bytes exceeds max_doc_bytes {limit}; not parsed")


# --------------------------------------------------------------------------- file formats
def _read_whole(make: _Maker, path: Path, locator: str, fmt: str, max_doc_bytes: int) -> RawRecord:
    size = path.stat().st_size
    if size > max_doc_bytes:  # checked before reading: a stray 10 GB file must not be loaded
        return _too_large(make, locator, str(path), fmt, size, max_doc_bytes, "file")
    text, problem = _decode(path.read_bytes())
    if text is None:
        return make.bad(locator, str(path), fmt, size, "undecodable", size, problem or "")
    return make.ok(locator, str(path), fmt, text, size)


def _record_text(obj: Any, field: str) -> tuple[str | None, str | None, str | None]:
    """(text, url, None) from a JSON/Parquet record, or (None, None, problem)."""
    if not isinstance(obj, dict):
        return None, None, f"record is a JSON {type(obj).__name__}, not an object"
    text = obj.get(field)
    if not isinstance(text, str):
        got = "missing" if text is None else f"a {type(text).__name__}"
        return None, None, f"text field {field!r} is {got}"
    url = obj.get("url")
    return text, url if isinstance(url, str) and url else None, None


def _read_jsonl(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    field = make.src.text_field
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue  # blank lines separate nothing in JSONL; they are not records
            locator, where = f"{rel}:{lineno}", f"{path}:{lineno}"
            n = len(line)
            if n > max_doc_bytes:
                yield _too_large(make, locator, where, "text", n, max_doc_bytes, f"line {lineno}")
                continue
            raw, problem = _decode(line)
            if raw is None:
                yield make.bad(locator, where, "text", n, "undecodable", lineno, f"line {lineno}: {problem}")
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                yield make.bad(locator, where, "text", n, "bad_json", lineno,
                               f"line {lineno}: invalid JSON: {exc.msg} (column {exc.colno})")
                continue
            text, url, problem = _record_text(obj, field)
            if text is None:
                yield make.bad(locator, where, "text", n, "missing_field", lineno, f"line {lineno}: {problem}")
            elif not _is_encodable(text):
                yield make.bad(locator, where, "text", n, "undecodable", lineno,
                               f"line {lineno}: text holds lone surrogates")
            else:
                yield make.ok(locator, url or where, "text", text, n)


def _read_json_array(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    """A .json file holding one array of records; record i is located as path#i."""
    size = path.stat().st_size
    if size > max_doc_bytes:
        yield _too_large(make, rel, str(path), "text", size, max_doc_bytes, "JSON file")
        return
    try:
        items = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        yield make.bad(rel, str(path), "text", size, "bad_json", 0, f"invalid JSON array: {exc}")
        return
    for i, obj in enumerate(items):
        locator, where = f"{rel}#{i}", f"{path}#{i}"
        text, url, problem = _record_text(obj, make.src.text_field)
        n = len(json.dumps(obj, ensure_ascii=False).encode("utf-8", "replace"))
        if text is None:
            yield make.bad(locator, where, "text", n, "missing_field", i, f"record {i}: {problem}")
        elif not _is_encodable(text):
            yield make.bad(locator, where, "text", n, "undecodable", i, f"record {i}: text holds lone surrogates")
        else:
            yield make.ok(locator, url or where, "text", text, n)


def _starts_with_bracket(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4096).lstrip().startswith(b"[")


def _read_parquet(make: _Maker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq  # lazy: the pydoc child process imports this module too

    field = make.src.text_field
    size = path.stat().st_size
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        yield make.bad(rel, str(path), "text", size, "unreadable", size, f"not a Parquet file: {exc}")
        return
    names = set(pf.schema_arrow.names)
    if field not in names:
        yield make.bad(rel, str(path), "text", size, "missing_field", field,
                       f"no column {field!r} (columns: {sorted(names)})")
        return
    columns = [field] + (["url"] if "url" in names else [])
    row = 0
    for batch in pf.iter_batches(columns=columns, batch_size=1024):
        for obj in batch.to_pylist():
            locator, where = f"{rel}#{row}", f"{path}#{row}"
            text, url, problem = _record_text(obj, field)
            n = len(text.encode("utf-8")) if text is not None else 0
            if text is None:
                yield make.bad(locator, where, "text", n, "missing_field", row, f"row {row}: {problem}")
            elif n > max_doc_bytes:
                yield _too_large(make, locator, where, "text", n, max_doc_bytes, f"row {row}")
            else:
                yield make.ok(locator, url or where, "text", text, n)
            row += 1


def read_files(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """kind=files: every file of a file, directory or glob, in sorted order."""
    if not src.path:
        raise SourceError(f"source for bucket {src.bucket!r}: kind 'files' needs a path")
    root, files = list_source_files(src.path)
    make = _Maker(src.path, src)
    for path in files:
        fmt = detect_format(path) if src.format == "auto" else src.format
        rel = _relative(path, root)
        if fmt == "jsonl":
            if path.suffix.lower() == ".json" and _starts_with_bracket(path):
                yield from _read_json_array(make, path, rel, max_doc_bytes)
            else:
                yield from _read_jsonl(make, path, rel, max_doc_bytes)
        elif fmt == "parquet":
            yield from _read_parquet(make, path, rel, max_doc_bytes)
        else:
            yield _read_whole(make, path, rel, fmt, max_doc_bytes)


# --------------------------------------------------------------------------- python_stdlib
def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_stdlib_code(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """The standard library's own .py sources, without tests, IDLE and installed packages."""
    root = stdlib_dir()
    make = _Maker("python_stdlib:code", src)
    for path in _walk_sorted(root, STDLIB_EXCLUDED_DIRS):
        if path.suffix == ".py":
            yield _read_whole(make, path, _relative(path, root), "code", max_doc_bytes)


def pydoc_module_names() -> list[str]:
    """Public stdlib modules that are safe to import, sorted."""
    return sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in PYDOC_SKIP)


def _pydoc_child_main() -> None:
    """Runs in a fresh interpreter: import each module quietly, render its pydoc page, JSONL out.

    The job comes on stdin, not argv: the page of `sys` shows sys.argv, and a temporary path
    there would make that page differ on every run.
    """
    import contextlib
    import importlib
    import io
    import pydoc
    import warnings

    job = json.loads(sys.stdin.read())
    out_path, names = job["out"], job["names"]
    warnings.simplefilter("ignore")  # deprecation warnings at import are not content
    with open(out_path, "w", encoding="utf-8") as out:
        for name in names:
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    module = importlib.import_module(name)
                    page = pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, name))
                out.write(json.dumps({"name": name, "html": _ADDRESS.sub(r"\g<1>\g<2>0x0", page)}) + "\n")
            except ImportError:
                continue  # not built on this platform (winreg, msvcrt, ...): not a document
            except BaseException as exc:  # SystemExit or anything a module does at import
                out.write(json.dumps({"name": name, "error": f"{type(exc).__name__}: {exc}"}) + "\n")


def render_pydoc_pages(names: list[str]) -> list[dict[str, str]]:
    """Render pages in a child process, so the imports never touch the caller's interpreter.

    Pages must be the same on every run (the text feeds dedup hashes and tokens): the hash
    seed is fixed so set-valued defaults print in one order, the working directory is fixed and
    kept off sys.path (PYTHONSAFEPATH), and memory addresses are blanked.
    """
    import tokenmill

    package_parent = str(Path(tokenmill.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONSAFEPATH": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="tokenmill-pydoc-") as tmp:
        out_path = os.path.join(tmp, "pages.jsonl")
        code = "from tokenmill.data.sources import _pydoc_child_main; _pydoc_child_main()"
        try:
            proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=stdlib_dir(),
                                  input=json.dumps({"out": out_path, "names": names}).encode(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  timeout=PYDOC_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise SourceError(f"python_stdlib:pydoc_html: rendering took over {PYDOC_TIMEOUT_S} s") from exc
        if proc.returncode != 0:
            tail = proc.stderr.decode("utf-8", "replace")[-2000:]
            raise SourceError(f"python_stdlib:pydoc_html: renderer exited {proc.returncode}:\n{tail}")
        with open(out_path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]


def read_pydoc_html(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """HTML pages pydoc renders for the stdlib modules (what `python -m pydoc -w` writes)."""
    names = pydoc_module_names()
    if src.max_docs is not None:
        names = names[: src.max_docs]  # an upper bound; `limit` still applies max_docs/max_bytes
    make = _Maker("python_stdlib:pydoc_html", src)
    for page in render_pydoc_pages(names):
        name = page["name"]
        url = f"pydoc:{name}.html"
        if "error" in page:
            yield make.bad(name, url, "html", 0, "render_failed", name, page["error"])
            continue
        html = page["html"]
        n = len(html.encode("utf-8"))
        if n > max_doc_bytes:
            yield _too_large(make, name, url, "html", n, max_doc_bytes, "page")
        else:
            yield make.ok(name, url, "html", html, n)


def read_reference(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """The language reference topics `help('TOPIC')` shows (pydoc_data.topics), one per doc."""
    from pydoc_data.topics import topics

    make = _Maker("python_stdlib:reference", src)
    for key in sorted(topics):
        text = topics[key]
        n = len(text.encode("utf-8"))
        url = f"pydoc_data.topics:{key}"
        if n > max_doc_bytes:
            yield _too_large(make, key, url, "text", n, max_doc_bytes, "topic")
        else:
            yield make.ok(key, url, "text", text, n)


def system_html_files() -> list[Path]:
    return sorted(Path(p) for p in glob.glob(SYSTEM_HTML_GLOB, recursive=True) if Path(p).is_file())


def read_system_html(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """Python's HTML documentation when the distribution installed it (python3-doc); else none."""
    make = _Maker("python_stdlib:system_html", src)
    for path in system_html_files():
        yield _read_whole(make, path, _relative(path, Path("/usr/share/doc")), "html", max_doc_bytes)


_STDLIB_READERS = {"code": read_stdlib_code, "pydoc_html": read_pydoc_html,
                   "reference": read_reference, "system_html": read_system_html}


# --------------------------------------------------------------------------- entry point
def limit(records: Iterable[RawRecord], max_docs: int | None, max_bytes: int | None) -> Iterator[RawRecord]:
    """The longest prefix with at most max_docs records and max_bytes raw bytes."""
    if max_docs is not None:
        records = islice(records, max_docs)
    total = 0
    for record in records:
        total += record.n_bytes
        if max_bytes is not None and total > max_bytes:
            return
        yield record


def read_source(src: SourceConfig, max_doc_bytes: int) -> Iterator[RawRecord]:
    """All records of one source, in sorted order, cut to its max_docs / max_bytes."""
    if src.kind == "files":
        records = read_files(src, max_doc_bytes)
    else:
        if src.part is None:
            raise SourceError(f"source for bucket {src.bucket!r}: kind 'python_stdlib' needs a part")
        records = _STDLIB_READERS[src.part](src, max_doc_bytes)
    return limit(records, src.max_docs, src.max_bytes)


def source_name(src: SourceConfig) -> str:
    return (src.path or "") if src.kind == "files" else f"python_stdlib:{src.part}"


def check_source(src: SourceConfig) -> None:
    """Fail fast, before any work, on a source that cannot be read at all."""
    if src.kind == "files":
        if not src.path:
            raise SourceError(f"source for bucket {src.bucket!r}: kind 'files' needs a path")
        list_source_files(src.path)
    elif src.part is None:
        raise SourceError(f"source for bucket {src.bucket!r}: kind 'python_stdlib' needs a part")


def inputs_fingerprint(src: SourceConfig) -> dict[str, Any]:
    """What identifies a source's raw inputs cheaply: file paths, sizes and mtimes, or versions."""
    if src.kind == "files":
        try:
            _root, files = list_source_files(src.path or "")
        except SourceError as exc:
            return {"kind": "files", "path": src.path, "error": str(exc)}
        return {"kind": "files", "path": src.path,
                "files": [[str(p), st.st_size, st.st_mtime_ns] for p in files for st in [p.stat()]]}
    fp: dict[str, Any] = {"kind": "python_stdlib", "part": src.part, "python": sys.version,
                          "stdlib": str(stdlib_dir())}
    if src.part == "system_html":
        fp["files"] = [[str(p), st.st_size, st.st_mtime_ns] for p in system_html_files() for st in [p.stat()]]
    return fp
