"""Hostile documents: a page nested 100,000 levels deep, a document too slow for the per-document
steps, a parse stuck in native code. Each is quarantined with its rule and measured value, every
good page of the corpus is kept, and the curation (the CLI, a real process) ends in bounded time.

The generators are small top-level functions so a benchmark of hostile inputs can reuse them.
"""

from __future__ import annotations

import importlib
import pydoc
import random
import time
from pathlib import Path

import pyarrow.parquet as pq

from tests.adversarial.conftest import run_cli
from tokenmill.data.limits import html_depth

# Real pages: pydoc's HTML documentation of standard-library modules (rendered by this Python).
GOOD_MODULES = ("json", "base64", "bisect", "heapq", "textwrap", "shlex", "fnmatch", "glob", "colorsys", "difflib")
WORDS = ("the river delta supports many species of birds and fish while its wetlands filter water "
         "after seasonal floods renew the soil").split()


def good_pages(folder: Path, modules: tuple[str, ...] = GOOD_MODULES) -> list[Path]:
    """pydoc's HTML page of each module, written to `folder/<module>.html`: real generated
    documentation pages (tables, nested definition lists, code), the corpus that must survive."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in modules:
        page = pydoc.HTMLDoc().page(name, pydoc.html.document(importlib.import_module(name)))
        paths.append(folder / f"{name}.html")
        paths[-1].write_text(page, encoding="utf-8")
    return paths


def deep_html(levels: int, tag: str = "div") -> str:
    """A page whose body nests `levels` elements: resiliparse's main-content walk is worse than
    quadratic in depth (10,000 levels about 1 s, 40,000 levels 43 s, 100,000 levels minutes)."""
    return f"<html><body>{f'<{tag}>' * levels}<p>deep</p>{f'</{tag}>' * levels}</body></html>"


def slow_text(n_bytes: int, seed: int = 0) -> str:
    """About `n_bytes` of plain prose in short paragraphs: linear work for every per-document
    step, but seconds of it (8 MB: normalize 0.5 s, language ID 2 s) once size limits are raised."""
    rng = random.Random(seed)
    paragraphs, size = [], 0
    while size < n_bytes:
        paragraphs.append(" ".join(rng.choice(WORDS) for _ in range(12)) + ".")
        size += len(paragraphs[-1]) + 2
    return "\n\n".join(paragraphs)


def _curate(inputs: Path, out: Path, *args: str) -> tuple[float, list[dict], int]:
    """Run `tokenmill curate` (a real process); (seconds, rejected rows, kept documents)."""
    started = time.perf_counter()
    result = run_cli("curate", inputs, "-o", out, "--steps", "extract,normalize,langid,pii", *args,
                     cwd=inputs.parent, timeout=120)
    seconds = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-2000:]
    rejected = pq.read_table(out / "_rejected").select(["url", "step", "rule", "value", "reason"]).to_pylist()
    kept = sum(pq.ParquetFile(p).metadata.num_rows for p in (out / "web").glob("*.parquet"))
    return seconds, rejected, kept


def test_real_pages_nest_far_below_the_limit_and_the_scan_is_fast(tmp_path):
    depths = [html_depth(p.read_text(encoding="utf-8")) for p in good_pages(tmp_path)]
    assert 3 <= max(depths) <= 50, depths  # the default limit, 2,000, is 40x the deepest page
    page = deep_html(100_000)
    started = time.perf_counter()
    assert html_depth(page, limit=2000) == 100_000
    assert time.perf_counter() - started < 1.0  # measured 0.08 s: linear, no parse
    # Self-closed '<div/>' nests in an HTML parser (the slash is ignored); an SVG '<path/>' does not.
    assert html_depth("<div/>" * 5000) == 5000
    assert html_depth("<svg>" + "<path d='M0'/>" * 5000 + "</svg>") == 1
    # Tags inside scripts and comments are not elements; unclosed <p>/<li> do not nest.
    assert html_depth("<script>" + "'<div>'" * 5000 + "</script><!--" + "<div>" * 5000 + "-->") == 0
    assert html_depth("<ul>" + "<li>item" * 5000 + "</ul>") == 1


def test_a_page_nested_100k_deep_is_quarantined_by_depth_and_the_run_goes_on(workdir):
    inputs = workdir / "pages"
    good = good_pages(inputs)
    (inputs / "deep.html").write_text(deep_html(100_000))
    seconds, rejected, kept = _curate(inputs, workdir / "out", "-w", "1")
    assert kept == len(good)
    assert [(r["url"].rsplit("/", 1)[-1], r["step"], r["rule"], r["value"]) for r in rejected] == [
        ("deep.html", "extract", "nesting_depth", "100000")]
    assert seconds < 60, seconds  # measured 2.4 s for the whole CLI run; the extractor alone: minutes


def test_a_document_over_the_time_limit_is_quarantined_and_the_run_goes_on(workdir):
    inputs = workdir / "docs"
    good = good_pages(inputs)
    (inputs / "slow.txt").write_text(slow_text(8_000_000))
    seconds, rejected, kept = _curate(inputs, workdir / "out", "-w", "1", "--set", "curate.limits.doc_seconds=0.2",
                                      "--set", "curate.max_doc_bytes=20000000")
    assert kept == len(good)
    assert len(rejected) == 1 and rejected[0]["url"].endswith("slow.txt"), rejected
    row = rejected[0]
    assert row["rule"] == "timeout" and row["step"] in ("normalize", "langid", "pii"), row
    assert 0.2 <= float(row["value"]) < 5.0, row  # seconds spent when the soft timer fired (0.2 s here)
    assert seconds < 60, seconds


def test_a_parse_stuck_in_native_code_kills_its_worker_and_the_retry_quarantines_it(workdir):
    inputs = workdir / "pages"
    good = good_pages(inputs)
    # With the depth check off, resiliparse spends seconds inside one C++ call, where no
    # Python signal handler runs: only the hard timer (a killed worker, a retried task) ends it.
    (inputs / "deep.html").write_text(deep_html(30_000))
    seconds, rejected, kept = _curate(inputs, workdir / "out", "-w", "2", "--set", "curate.limits.doc_seconds=0.3",
                                      "--set", "curate.limits.kill_factor=2",
                                      "--set", "curate.limits.max_html_depth=1000000")
    assert kept == len(good)
    assert [(r["url"].rsplit("/", 1)[-1], r["step"], r["rule"], r["value"]) for r in rejected] == [
        ("deep.html", "extract", "timeout", "0.6")], rejected
    assert "worker killed" in rejected[0]["reason"]
    assert seconds < 60, seconds
