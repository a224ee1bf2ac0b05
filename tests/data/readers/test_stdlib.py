"""kind=python_stdlib: the embedded demo corpus."""

from __future__ import annotations

import sys
from pathlib import Path

from tokenmill.config import SourceConfig
from tokenmill.data.readers.stdlib import pydoc_module_names, stdlib_dir
from tokenmill.data.sources import inputs_fingerprint, read_source


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


def test_pydoc_pages_do_not_carry_the_callers_environment(monkeypatch):
    """cgi.test's default argument is os.environ: pydoc prints it, so the child renders under a
    fixed environment, never the caller's (secrets would become training text)."""
    from tokenmill.data.readers.stdlib import render_pydoc_pages

    if "cgi" not in pydoc_module_names():
        import pytest

        pytest.skip("no cgi module in this Python")
    monkeypatch.setenv("TOKENMILL_TEST_SECRET", "hunter2-s3cr3t")
    first = render_pydoc_pages(["cgi"])
    assert "environ" in first[0]["html"] and "hunter2-s3cr3t" not in first[0]["html"]
    monkeypatch.setenv("TOKENMILL_TEST_OTHER", "changes-between-runs")
    assert render_pydoc_pages(["cgi"]) == first  # the same page whatever the caller's variables
