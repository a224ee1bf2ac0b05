"""kind=python_stdlib: the embedded demo corpus, real text written by others that every Python
installation carries, read with no network. Parts: `code` (the standard library's .py files),
`pydoc_html` (the pages pydoc renders for its modules), `reference` (the language reference
topics of `help()`), `system_html` (Python's HTML documentation, when the distribution has it).
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
from pathlib import Path
from typing import Iterator

from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import RecordMaker, SourceError, SourceFields, relative, walk_sorted
from tokenmill.data.readers.code import read_code
from tokenmill.data.readers.text import read_whole

# Directories of the standard library that are not library code: third-party installs, the
# test suites (huge, repetitive, full of deliberately odd code), the IDLE application.
STDLIB_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"})
# Modules whose import has visible side effects (opens a browser, prints, opens windows).
PYDOC_SKIP = frozenset({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "__main__"})
PYDOC_TIMEOUT_S = 300
SYSTEM_HTML_GLOB = "/usr/share/doc/python3*/html/**/*.html"
# pydoc prints values like "<object object at 0x7f32aa14c170>" or "<PyDLL 'None', handle
# 7fb90abe02e0>": the address changes every run, and would change the text, its dedup hash and
# every token after it. Docstring blocks write spaces as &nbsp;. 8+ hex digits: a pointer.
_ADDRESS = re.compile(r"\b(at|handle)(\s|&nbsp;)(0x)?[0-9a-fA-F]{8,}\b")


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_stdlib_code(src: SourceFields, max_doc_bytes: int) -> Iterator[RawRecord]:
    """The standard library's own .py sources, without tests, IDLE and installed packages."""
    root = stdlib_dir()
    make = RecordMaker("python_stdlib:code", src)
    for path in walk_sorted(root, STDLIB_EXCLUDED_DIRS):
        if path.suffix == ".py":
            yield read_code(make, path, relative(path, root), max_doc_bytes)


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
    with tempfile.TemporaryDirectory(prefix="tokenmill-pydoc-") as tmp:
        # A fixed, minimal environment, not the caller's: pages print default arguments, and
        # some defaults are os.environ itself (cgi.test(environ=os.environ)), which would put the
        # user's variables (tokens, paths) into training text and make pages differ run to run.
        # tokenmill's own location goes in the code, not in PYTHONPATH, so it is not printed either.
        env = {
            "PYTHONHASHSEED": "0",
            "PYTHONSAFEPATH": "1",
            "PYTHONIOENCODING": "utf-8",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": "/nonexistent",
            "PATH": os.defpath,
        }
        out_path = os.path.join(tmp, "pages.jsonl")
        code = (
            f"import sys; sys.path.insert(0, {package_parent!r}); "
            "from tokenmill.data.readers.stdlib import _pydoc_child_main; _pydoc_child_main()"
        )
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code],
                env=env,
                cwd=stdlib_dir(),
                input=json.dumps({"out": out_path, "names": names}).encode(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=PYDOC_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise SourceError(f"python_stdlib:pydoc_html: rendering took over {PYDOC_TIMEOUT_S} s") from exc
        if proc.returncode != 0:
            tail = proc.stderr.decode("utf-8", "replace")[-2000:]
            raise SourceError(f"python_stdlib:pydoc_html: renderer exited {proc.returncode}:\n{tail}")
        with open(out_path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]


def read_pydoc_html(src: SourceFields, max_doc_bytes: int) -> Iterator[RawRecord]:
    """HTML pages pydoc renders for the stdlib modules (what `python -m pydoc -w` writes)."""
    names = pydoc_module_names()
    if src.max_docs is not None:
        names = names[: src.max_docs]  # an upper bound; `limit` still applies max_docs/max_bytes
    make = RecordMaker("python_stdlib:pydoc_html", src)
    for page in render_pydoc_pages(names):
        name = page["name"]
        url = f"pydoc:{name}.html"
        if "error" in page:
            yield make.bad(name, url, "html", 0, "render_failed", name, page["error"])
            continue
        html = page["html"]
        n = len(html.encode("utf-8"))
        if n > max_doc_bytes:
            yield make.too_large(name, url, "html", n, max_doc_bytes, "page")
        else:
            yield make.ok(name, url, "html", html, n)


def read_reference(src: SourceFields, max_doc_bytes: int) -> Iterator[RawRecord]:
    """The language reference topics `help('TOPIC')` shows (pydoc_data.topics), one per doc."""
    from pydoc_data.topics import topics

    make = RecordMaker("python_stdlib:reference", src)
    for key in sorted(topics):
        text = topics[key]
        n = len(text.encode("utf-8"))
        url = f"pydoc_data.topics:{key}"
        if n > max_doc_bytes:
            yield make.too_large(key, url, "text", n, max_doc_bytes, "topic")
        else:
            yield make.ok(key, url, "text", text, n)


def system_html_files() -> list[Path]:
    return sorted(Path(p) for p in glob.glob(SYSTEM_HTML_GLOB, recursive=True) if Path(p).is_file())


def read_system_html(src: SourceFields, max_doc_bytes: int) -> Iterator[RawRecord]:
    """Python's HTML documentation when the distribution installed it (python3-doc); else none."""
    make = RecordMaker("python_stdlib:system_html", src)
    for path in system_html_files():
        yield read_whole(make, path, relative(path, Path("/usr/share/doc")), "html", max_doc_bytes)


STDLIB_READERS = {
    "code": read_stdlib_code,
    "pydoc_html": read_pydoc_html,
    "reference": read_reference,
    "system_html": read_system_html,
}
