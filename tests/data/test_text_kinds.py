"""Kinds of text and the rule families each gets."""

from __future__ import annotations

import pytest

from tokenmill.data.config import QualityConfig
from tokenmill.data.text_kinds import FAMILIES, families, kind_of


@pytest.mark.parametrize("fmt,kind", [("html", "web"), ("warc", "web"), ("code", "code"),
                                      ("text", "prose"), ("jsonl", "prose"), ("parquet", "prose")])
def test_web_rules_are_the_default_only_for_html_and_warc(fmt, kind):
    assert kind_of("any", fmt, QualityConfig()) == kind


def test_a_declared_bucket_wins_over_the_format():
    cfg = QualityConfig(kinds={"books": "books", "docs": "reference"})
    assert kind_of("books", "text", cfg) == "books"
    assert kind_of("docs", "html", cfg) == "reference"
    assert kind_of("code", "jsonl", QualityConfig()) == "code"  # the default declares the code bucket


def test_families_per_kind_and_global_switches():
    cfg = QualityConfig()
    assert families("web", cfg) == {"gopher", "gopher_repetition", "c4", "fineweb"}
    assert families("books", cfg) == {"gopher", "gopher_repetition"}
    assert families("code", cfg) == {"code"}
    assert families("web", QualityConfig(c4=False, fineweb=False)) == {"gopher", "gopher_repetition"}
    assert set(FAMILIES) == {"web", "reference", "prose", "books", "code"}


def test_an_unknown_kind_is_a_config_error():
    with pytest.raises(ValueError, match="kinds"):
        QualityConfig(kinds={"books": "novels"})
