"""Bucket rules: first match wins, every set condition must hold, globs on source and domain,
language and quality tier, no match keeps the source's bucket, off without rules."""

from __future__ import annotations

from tokenmill.config import CurateConfig
from tokenmill.data.steps.bucketing import Bucket
from tokenmill.data.document import Doc


def _doc(source="crawl/part-1.warc.gz", url="https://docs.python.org/3/", domain=None, language="en",
         tier=None, bucket="web") -> Doc:
    doc = Doc(id="d", text="t", source=source, url=url, bucket=bucket, license="l", format="html")
    doc.domain, doc.language = domain, language
    doc.model_quality = None if tier is None else {"perplexity": 100.0, "classifier_score": 0.9, "tier": tier}
    return doc


RULES = [
    {"bucket": "python_docs_de", "domain": "*python.org", "language": "de"},
    {"bucket": "python_docs", "domain": "*python.org"},
    {"bucket": "code", "source": "repos/*"},
    {"bucket": "web_head", "source": "crawl/*", "tier": "head"},
    {"bucket": "german", "language": "DE"},
    {"bucket": "web_rest", "source": "crawl/*"},
]


def _bucket(doc: Doc, rules=RULES) -> str:
    step = Bucket(CurateConfig(bucket_rules=rules))
    assert step.process(doc) is None  # bucketing never removes
    return doc.bucket


def test_first_matching_rule_wins():
    assert _bucket(_doc(domain="docs.python.org", language="de")) == "python_docs_de"
    assert _bucket(_doc(domain="docs.python.org", language="en")) == "python_docs"
    assert _bucket(_doc(domain="example.com", tier="head")) == "web_head"
    assert _bucket(_doc(domain="example.com", tier="tail")) == "web_rest"
    assert _bucket(_doc(domain="example.com", language="de", tier="tail")) == "german"  # before web_rest
    # Reordered, the general rule shadows the specific one.
    assert _bucket(_doc(domain="docs.python.org", language="de"), [RULES[1], RULES[0]]) == "python_docs"


def test_all_conditions_must_hold_and_missing_values_do_not_match():
    assert _bucket(_doc(source="repos/cpython/Lib/json/decoder.py", url="Lib/json/decoder.py")) == "code"
    # No tier computed: the tier rule cannot match, the next one does.
    assert _bucket(_doc(domain="example.com")) == "web_rest"
    # No language identified: a language rule does not match a None language.
    assert _bucket(_doc(source="books/x.txt", url="x.txt", language=None)) == "web"


def test_domain_taken_from_the_url_when_the_url_step_did_not_run():
    assert _bucket(_doc(domain=None, url="https://WWW.Python.org/about/")) == "python_docs"
    assert _bucket(_doc(domain=None, url="https://notpython.org.evil.net/")) == "web_rest"


def test_no_match_keeps_the_source_bucket_and_no_rules_means_off():
    assert _bucket(_doc(source="books/austen.txt", url="books/austen.txt", bucket="books")) == "books"
    assert not Bucket(CurateConfig()).enabled()
    assert Bucket(CurateConfig(bucket_rules=RULES)).enabled() and Bucket.name == "bucket"
