"""The first-hour acceptance session (benchmarks/bench_first_hour.py) on a small three-format corpus.

The benchmark runs it on the real corpora with the CPU template as written and also judges the plan's
time; here the same session — typos, plan, curate, run, Ctrl-C, run again, eval, export, everything
printed judged — runs on text from this Python's standard library (pydoc pages in a WARC archive and
as HTML files, module documentation as plain-text books) with a tiny model, every command a real
`python -m tokenmill` process and the Ctrl-C a real SIGINT.
"""

from __future__ import annotations

import gzip
import importlib
import inspect
import io
import pydoc
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_first_hour  # noqa: E402

MODULES = (
    "argparse",
    "collections",
    "csv",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "fractions",
    "functools",
    "heapq",
    "inspect",
    "itertools",
    "json",
    "logging",
    "pathlib",
    "pickle",
    "random",
    "re",
    "shutil",
    "socket",
    "sqlite3",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "urllib.parse",
    "zipfile",
    "os",
)


def _page(name: str) -> str:
    module = importlib.import_module(name)
    return pydoc.HTMLDoc().page(name, pydoc.HTMLDoc().docmodule(module))


def _warc(path: Path, names: tuple[str, ...]) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with gzip.open(path, "wb") as raw:
        writer = WARCWriter(raw, gzip=False)
        for name in names:
            body = _page(name).encode("utf-8")
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            record = writer.create_warc_record(
                f"https://docs.example.org/{name}.html", "response", payload=io.BytesIO(body), http_headers=headers
            )
            writer.write_record(record)


def stdlib_sources(root: Path) -> list[dict[str, str]]:
    """A WARC archive and HTML files of pydoc pages, and module documentation as plain-text books."""
    (root / "web").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "books").mkdir()
    _warc(root / "web" / "crawl.warc.gz", MODULES[:12])
    for name in MODULES[12:22]:
        (root / "docs" / f"{name}.html").write_text(_page(name), encoding="utf-8")
    for name in MODULES[22:] + MODULES[:6]:
        module = importlib.import_module(name)
        text = "\n\n".join(
            filter(
                None, [inspect.getdoc(module)] + [inspect.getdoc(obj) for _, obj in inspect.getmembers(module) if callable(obj)]
            )
        )
        (root / "books" / f"{name}.txt").write_text(text, encoding="utf-8")
    return [
        {"path": str(root / "web"), "format": "warc", "bucket": "web", "license": "PSF-2.0"},
        {"path": str(root / "docs"), "format": "html", "bucket": "docs", "license": "PSF-2.0"},
        {"path": str(root / "books"), "format": "text", "bucket": "books", "license": "PSF-2.0"},
    ]


SMOKE = {
    "curate": {"workers": 1},
    "tokenizer": {"vocab_size": 512},
    "tokenize": {"val_fraction": 0.1, "min_val_docs": 2},
    "model": {"d_model": 64, "n_layers": 2, "n_heads": 2, "max_seq_len": 64},
    "train": {"seq_len": 64, "micro_batch": 4, "grad_accum": 1, "max_steps": 150, "warmup_steps": 4,
              "ckpt_every": 10, "eval_every": 75, "eval_docs": 4},
}


def test_the_first_hour_on_a_three_format_corpus(tmp_path: Path) -> None:
    sources = stdlib_sources(tmp_path / "data")
    result = bench_first_hour.session(tmp_path / "work", sources, SMOKE)
    assert result["predicted_train_s"] > 0 and result["real_train_s"] > 0
    names = [s["name"] for s in result["steps"]]
    assert names[:2] == ["typo in the file", "typo on the command line"] and "export" in names
