"""URL filter: domain extraction edge cases, list parsing, subdomain (not substring) matching,
block and allow rules with their values, documents without a URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.config import CurateConfig
from tokenmill.data.document import Doc
from tokenmill.data.steps.urlfilter import UrlFilter, domain_of, match, parent_domains, read_domain_list


@pytest.mark.parametrize("url, domain", [
    ("https://www.Example.COM/path?q=1#x", "example.com"),
    ("http://user:pw@sub.example.org:8080/", "sub.example.org"),
    ("HTTPS://WWW.EXAMPLE.ORG.", "example.org"),           # trailing dot of the root zone
    ("https://www.www.example.org/", "www.example.org"),    # only one leading www. goes
    ("https://wwwexample.org/", "wwwexample.org"),
    ("//cdn.example.net/lib.js", "cdn.example.net"),
    ("www.example.com/page", "example.com"),                 # scheme-less, but clearly a host
    ("ftp://ftp.debian.org/debian/", "ftp.debian.org"),
    ("http://[2001:db8::1]:8080/x", "2001:db8::1"),
    ("http://192.0.2.7/index.html", "192.0.2.7"),
    ("https://bücher.example/", "bücher.example"),
])
def test_domain_of(url, domain):
    assert domain_of(url) == domain


@pytest.mark.parametrize("url", [
    None, "", "docs/index.html", "/srv/corpus/file.txt", "src/a.py:12", r"C:\corpus\a.txt",
    "file:///srv/corpus/a.html", "http://[::1/", "mailto:someone@example.org",
])
def test_no_domain_for_paths_and_broken_urls(url):
    assert domain_of(url) is None


def test_parent_domains_split_at_labels_but_not_ip_addresses():
    assert parent_domains("a.b.example.com") == ["a.b.example.com", "b.example.com", "example.com", "com"]
    assert parent_domains("192.0.2.7") == ["192.0.2.7"]


def test_list_file_parsing(tmp_path):
    f = tmp_path / "block.txt"
    f.write_text("# a comment\n\nExample.COM\n  spam.net   # trailing comment\n0.0.0.0 ads.tracker.io\n"
                 "*.wild.org\n.dot.org\nhttps://www.url-entry.com/some/path\n127.0.0.1 localhost\n",
                 encoding="utf-8")
    assert read_domain_list(f) == {"example.com", "spam.net", "ads.tracker.io", "wild.org", "dot.org",
                                   "url-entry.com", "localhost"}


def test_match_is_by_label_not_by_substring():
    entries = frozenset({"example.com", "ads.tracker.io"})
    assert match("example.com", entries) == "example.com"
    assert match("a.b.example.com", entries) == "example.com"
    assert match("notexample.com", entries) is None
    assert match("example.com.evil.net", entries) is None
    assert match("tracker.io", entries) is None           # the parent of an entry is not blocked
    assert match("x.ads.tracker.io", entries) == "ads.tracker.io"


def _doc(url: str) -> Doc:
    return Doc(id=url, text="t", source="s", url=url, bucket="web", license="l", format="html")


def _step(tmp_path: Path, block: str | None = None, allow: str | None = None) -> UrlFilter:
    cfg = {}
    if block is not None:
        (tmp_path / "block.txt").write_text(block, encoding="utf-8")
        cfg["block_lists"] = ["block.txt"]
    if allow is not None:
        (tmp_path / "allow.txt").write_text(allow, encoding="utf-8")
        cfg["allow_lists"] = ["allow.txt"]
    step = UrlFilter(CurateConfig(url=cfg), base_dir=tmp_path)  # list paths resolve against base_dir
    step.prepare(tmp_path)
    step.setup(tmp_path)
    return step


def test_block_list_rule_value_and_domain_filled(tmp_path):
    step = _step(tmp_path, block="spam.example\n")
    assert step.name == "url" and step.enabled()
    doc = _doc("https://www.news.spam.example/a")
    rej = step.process(doc)
    assert doc.domain == "news.spam.example"
    assert (rej.step, rej.rule, rej.value) == ("url", "blocked_domain", "spam.example")
    ok = _doc("https://spam.example.org/")
    assert step.process(ok) is None and ok.domain == "spam.example.org"


def test_allow_list_only_allowed_pass_and_block_wins(tmp_path):
    step = _step(tmp_path, block="bad.docs.python.org\n", allow="python.org\ndebian.org\n")
    assert step.process(_doc("https://docs.python.org/3/")) is None
    assert step.process(_doc("https://www.debian.org/")) is None
    rej = step.process(_doc("https://example.com/"))
    assert (rej.rule, rej.value) == ("not_allowed", "example.com")
    assert step.process(_doc("https://bad.docs.python.org/")).rule == "blocked_domain"


def test_without_lists_the_step_still_fills_domains(tmp_path):
    step = _step(tmp_path)
    assert step.enabled()  # bucket rules read doc.domain
    doc = _doc("http://WWW.Example.org:80/")
    assert step.process(doc) is None and doc.domain == "example.org"


def test_documents_without_a_domain_pass_even_with_an_allow_list(tmp_path):
    step = _step(tmp_path, allow="python.org\n")
    doc = _doc("Lib/json/decoder.py")
    assert step.process(doc) is None and doc.domain is None


def test_missing_list_is_an_error_naming_it(tmp_path):
    step = UrlFilter(CurateConfig(url={"block_lists": ["nope.txt"]}), base_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        step.prepare(tmp_path)
