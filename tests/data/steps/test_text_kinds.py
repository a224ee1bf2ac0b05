"""Kinds of text: declared, from the format, or detected from the text (issue 41), and the rule
families each gets. The snippets are cut from the real corpora (Austen's Emma, the Python 3.11
tutorial, CPython's stdlib, the Debian Reference, a documentation site's navigation)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tokenmill.data.config import CurateConfig, QualityConfig
from tokenmill.data.document import Doc
from tokenmill.data.steps.kind_detect import detect_kind
from tokenmill.data.steps.normalize import Normalize
from tokenmill.data.steps.quality import Quality
from tokenmill.data.steps.text_kinds import FAMILIES, assign_kind, families, kind_of
from tests.adversarial.conftest import run_cli

EMMA_WRAPPED = """Emma Woodhouse, handsome, clever, and rich, with a comfortable home
and happy disposition, seemed to unite some of the best blessings of
existence; and had lived nearly twenty-one years in the world with very
little to distress or vex her.

She was the youngest of the two daughters of a most affectionate,
indulgent father; and had, in consequence of her sister's marriage, been
mistress of his house from a very early period. Her mother had died
too long ago for her to have more than an indistinct remembrance of
her caresses; and her place had been supplied by an excellent woman as
governess, who had fallen little short of a mother in affection.

Sixteen years had Miss Taylor been in Mr. Woodhouse's family, less as a
governess than a friend, very fond of both daughters, but particularly
of Emma. Between _them_ it was more the intimacy of sisters. Even before
Miss Taylor had ceased to hold the nominal office of governess, the
mildness of her temper had hardly allowed her to impose any restraint;
and the shadow of authority being now long passed away, they had been
living together as friend and friend very mutually attached, and Emma
doing just what she liked; highly esteeming Miss Taylor's judgment, but
directed chiefly by her own."""
# the same paragraphs as a scraper's JSONL carries them: one line each
EMMA_PROSE = "\n\n".join(" ".join(p.split()) for p in EMMA_WRAPPED.split("\n\n"))

PY_TUTORIAL = """4.7. Defining Functions

We can create a function that writes the Fibonacci series to an arbitrary boundary:

>>> def fib(n):    # write Fibonacci series up to n
...     a, b = 0, 1
...     while a < n:
...         print(a, end=' ')
...         a, b = b, a+b
>>> fib(2000)
0 1 1 2 3 5 8 13 21 34 55 89 144 233 377 610 987 1597

The keyword def introduces a function definition. It must be followed by the function name and the parenthesized list of formal parameters. The statements that form the body of the function start at the next line, and must be indented.

The first statement of the function body can optionally be a string literal; this string literal is the function's documentation string, or docstring. There are tools which use docstrings to automatically produce online or printed documentation, or to let the user interactively browse through code; it's good practice to include docstrings in code that you write.

Run the script with `python3 fib.py --limit 100` to print the series up to 100."""

DEBIAN_REFERENCE = """1.1.1. Root password

You can install a package with the command below.

$ sudo apt-get install aptitude
$ aptitude search '~i!~M'

The option --purge removes the configuration files too. Use `apt-cache policy` to see which version would be installed and from where.

1.1.2. Package activity logs

You can check package activity history in the log files: /var/log/dpkg.log records the dpkg level activity, /var/log/apt/term.log the generic APT activity."""

PY_CODE = '''"""Shared support for scanning document type declarations in HTML and XHTML."""

import re

_declname_match = re.compile(r'[a-zA-Z][-_.a-zA-Z0-9]*\\s*').match


class ParserBase:
    """Parser base class which provides some common support methods used
    by the SGML/HTML and XHTML parsers."""

    def __init__(self):
        if self.__class__ is ParserBase:
            raise RuntimeError(
                "_markupbase.ParserBase must be subclassed")

    def reset(self):
        self.lineno = 1
        self.offset = 0

    def getpos(self):
        """Return current line number and offset."""
        return self.lineno, self.offset
'''

# A documentation site's navigation, as a scraper's JSONL carries it: link texts, one per line.
ANCHORS = ["Installing Debian on your computer", "Read the release notes for this version",
           "Frequently asked questions about the project", "Download the installation images",
           "Report a bug in the distribution", "Browse the mailing list archives",
           "Join the developers of the project", "Find a mirror near you",
           "Security advisories for the stable release", "Support and help for users",
           "The social contract of the project", "News from the community and the team",
           "Package search by name or by file", "Documentation for new and old users"]
LINK_LIST = "\n".join(ANCHORS)


@pytest.mark.parametrize("text,kind", [
    (EMMA_PROSE, "prose"), (EMMA_WRAPPED, "books"), (PY_TUTORIAL, "reference"),
    (DEBIAN_REFERENCE, "reference"), (PY_CODE, "code"), (LINK_LIST, "web"),
    ("debian (12) · apt · kernel (3) · installer · mirrors · wiki (40) · bugs · news · security " * 8, "web"),
])
def test_the_detector_on_clear_examples_of_each_kind(text, kind):
    got, evidence = detect_kind(text, "jsonl")
    assert got == kind, evidence
    assert "=" in evidence  # the deciding signals, named with their values


def test_long_text_is_books_and_code_input_stays_code():
    assert detect_kind("\n\n".join([EMMA_PROSE] * 90), "text")[0] == "books"  # >= 100,000 characters
    assert detect_kind(EMMA_PROSE, "code") == ("code", "format=code")


def test_a_declared_kind_wins_then_code_input_then_the_text():
    cfg = QualityConfig(kinds={"books": "books", "docs": "reference"})
    assert kind_of("books", "jsonl", cfg, LINK_LIST) == ("books", "declared")
    assert kind_of("docs", "html", cfg, EMMA_PROSE) == ("reference", "declared")
    assert kind_of("code", "jsonl", QualityConfig(), EMMA_PROSE) == ("code", "declared")  # the default declares it
    assert kind_of("any", "code", QualityConfig(), EMMA_PROSE) == ("code", "format")
    kind, how = kind_of("any", "jsonl", QualityConfig(), LINK_LIST)
    assert kind == "web" and how.startswith("detected: ")


@pytest.mark.parametrize("fmt,kind", [("html", "web"), ("warc", "web"), ("code", "code"),
                                      ("text", "prose"), ("jsonl", "prose"), ("parquet", "prose")])
def test_with_detection_off_the_format_decides_as_before(fmt, kind):
    assert kind_of("any", fmt, QualityConfig(detect_kinds=False), LINK_LIST) == (kind, "format")


def test_the_kind_is_decided_once_before_books_are_unwrapped():
    cfg = CurateConfig()
    doc = Doc(id="d", text=EMMA_WRAPPED, source="s", url="u", bucket="web", license="l", format="jsonl")
    Normalize(cfg).process(doc)
    assert doc.kind == "books" and doc.text == EMMA_PROSE  # detected on the wrapped text, then unwrapped
    assert [v for s, v in doc.lineage if s == "kind"][0].startswith("books (detected: ")
    Quality(cfg).process(doc)  # the quality step judges the kind normalize decided, not the unwrapped text's
    assert doc.kind == "books" and sum(s == "kind" for s, _ in doc.lineage) == 1


def test_a_link_list_is_judged_by_the_web_rules():
    cfg = CurateConfig()
    doc = Doc(id="d", text=LINK_LIST, source="s", url="u", bucket="web", license="l", format="jsonl", language="en")
    rejection = Quality(cfg).process(doc)
    assert doc.kind == "web" and rejection is not None and rejection.rule in {"c4_min_sentences", "min_line_punct_frac"}
    before = Doc(id="d", text=LINK_LIST, source="s", url="u", bucket="web", license="l", format="jsonl", language="en")
    as_before = CurateConfig(quality=QualityConfig(detect_kinds=False))  # JSONL was prose: Gopher's rules only
    assert Quality(as_before).process(before) is None and before.kind == "prose"


def test_a_10mb_one_line_document_is_classified_in_bounded_time():
    text = "word " * 2_000_000  # 10 MB, one line
    t0 = time.perf_counter()
    kind, _ = detect_kind(text, "jsonl")
    assert time.perf_counter() - t0 < 0.5
    assert kind == "web"  # no sentence ends anywhere


def test_curate_writes_the_kind_into_row_lineage_and_funnel(tmp_path: Path):
    src = tmp_path / "pages.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                           for i, t in (("emma", EMMA_PROSE), ("links", LINK_LIST))), encoding="utf-8")
    result = run_cli("curate", src, "-o", tmp_path / "out", "--steps", "normalize,quality")
    assert result.returncode == 0, result.stderr[-2000:]
    kept = pq.read_table(next(p for p in (tmp_path / "out").glob("*/part-*.parquet")
                              if p.parent.name != "_rejected")).to_pylist()
    assert [(r["id"], r["kind"]) for r in kept] == [("emma", "prose")]
    assert [v for v in (e["version"] for e in kept[0]["lineage"] if e["step"] == "kind")][0].startswith("prose (detected: ")
    rejected = pq.read_table(next((tmp_path / "out/_rejected").glob("*.parquet"))).to_pylist()
    assert [(r["id"], r["kind"], r["rule"]) for r in rejected if r["id"] == "links"] == \
        [("links", "web", "c4_min_sentences")]
    funnel = json.loads((tmp_path / "out/_funnel.json").read_text())
    assert funnel["kinds"]["prose"]["docs"] == 1 and funnel["kinds"]["prose"]["kept"] == 1
    assert funnel["kinds"]["web"] == {"docs": 1, "kept": 0, "keep_rate": 0.0,
                                      "rejected": {"quality/c4_min_sentences": 1}}


def test_families_per_kind_and_global_switches():
    cfg = QualityConfig()
    assert families("web", cfg) == {"gopher", "gopher_repetition", "c4", "fineweb"}
    assert families("books", cfg) == {"gopher", "gopher_repetition"}
    assert families("code", cfg) == {"code"}
    assert families("web", QualityConfig(c4=False, fineweb=False)) == {"gopher", "gopher_repetition"}
    assert set(FAMILIES) == {"web", "reference", "prose", "books", "code"}


def test_assign_kind_keeps_a_kind_already_decided():
    doc = Doc(id="d", text=LINK_LIST, source="s", url="u", bucket="web", license="l", format="jsonl", kind="prose")
    assert assign_kind(doc, QualityConfig()) == "prose" and doc.lineage == []


def test_an_unknown_kind_is_a_config_error():
    with pytest.raises(ValueError, match="kinds"):
        QualityConfig(kinds={"books": "novels"})
