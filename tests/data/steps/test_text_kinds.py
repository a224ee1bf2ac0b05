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
from tokenmill.data.steps.quality import REFERENCE_MAX_DUP_CHAR_FRAC, Quality
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
    assert families("web", cfg) == {"gopher", "gopher_repetition", "c4", "fineweb", "garble"}
    assert families("books", cfg) == {"gopher", "gopher_repetition", "garble"}
    assert families("code", cfg) == {"code"}
    assert families("web", QualityConfig(c4=False, fineweb=False, garble=False)) == {"gopher", "gopher_repetition"}
    assert set(FAMILIES) == {"web", "reference", "prose", "books", "code"}


def test_assign_kind_keeps_a_kind_already_decided():
    doc = Doc(id="d", text=LINK_LIST, source="s", url="u", bucket="web", license="l", format="jsonl", kind="prose")
    assert assign_kind(doc, QualityConfig()) == "prose" and doc.lineage == []


def test_an_unknown_kind_is_a_config_error():
    with pytest.raises(ValueError, match="kinds"):
        QualityConfig(kinds={"books": "novels"})


# The Debian Administrator's Handbook (zh-cn), section 5.5: sentences end in 。, with no space after.
ZH_HANDBOOK = (
    "5.5. 与其它软件包共存\n\n"
    "Debian 包格式并非唯一用于自由软件领域的软件包格式。主要竞争者是红帽 Linux 发行版的 RPM 格式以及其衍生格式。"
    "红帽是一个非常流行的商业化发行版。对于来自第三方的软件，常以 RPM 格式软件包提供，而非 Debian 格式。\n"
    "这个情况下，你应该知道rpm程序是如何处理RPM软件包的，这种格式在Debian软件包中也可用。"
    "需要谨慎的使用，尽管如何，这些操作会限制从一个软件包中解压并且提取出信息以验证其完整性。\n"
    "实际上，不应该在Debian系统中使用rpm来安装一个RPM软件包；RPM使用了它自己的数据库以便和Debian的软件中分离。"
)
# The handbook's hotplug section (en, abridged): udevadm's attribute listing among the sentences
# that explain it (its indented lines read as code).
UDEV_SECTION = (
    "9.11.3. How udev Works\n\n"
    "When udev is notified by the kernel of the appearance of a new device, it collects various information on "
    "the given device by consulting the corresponding entries in /sys/, especially those that uniquely identify "
    "it. Armed with all of this information, udev then consults all of the rules contained in /etc/udev/rules.d/ "
    "and /lib/udev/rules.d/.\nIn this process it decides how to name the device, what symbolic links to create "
    "(to give it alternative names), and what commands to execute.\n"
    "Let us look at what the kernel reports for a USB key. The udevadm command lists its attributes, and "
    "those of every device above it in the tree, as the rules can match them:\n"
    + "".join(f"    {line}\n" for line in [
        'ATTR{removable}=="1", ATTR{ro}=="0", ATTR{hidden}=="0"', 'ATTR{size}=="15100224", ATTR{range}=="16"',
        'ATTRS{max_sectors}=="240", ATTRS{busnum}=="2"', 'ATTRS{product}=="TF10", ATTRS{speed}=="480"',
        'ATTRS{serial}=="07032998B60AB777", ATTRS{quirks}=="0x0"', 'KERNELS=="2-1", DRIVERS=="usb"'])
    + "Once these rules are set in a file, named for example /etc/udev/rules.d/010_local.rules, you can simply "
    "remove and reconnect the USB key.\nYou can then see that /dev/usb_key/disk represents the disk associated "
    "with the USB key, and /dev/usb_key/part1 is its first partition.\nThe same mechanism names network "
    "interfaces. It also starts the programs that a rule names. Each rule is read in the order of its file."
)


def test_cjk_sentences_end_their_lines():
    kind, evidence = detect_kind(ZH_HANDBOOK, "html")
    assert kind != "web", evidence  # before: ended_char_frac 0.00, judged as a web page


def test_code_among_sentences_on_a_page_is_a_manual_and_code_alone_is_web():
    assert detect_kind(UDEV_SECTION, "text")[0] == "code"  # what the signals alone say
    assert detect_kind(UDEV_SECTION, "html") == (
        "reference", "code_line_frac=0.46, symbol_rate=3.59, sentence_rate=4.22, format=html")
    assert detect_kind(PY_CODE, "html")[0] == "web"  # a page of code and nothing else
    assert detect_kind(PY_CODE, "text")[0] == "code"


def test_a_menu_word_inside_a_sentence_is_not_page_chrome():
    cookies = "\n".join([
        "http.cookies — HTTP state management",
        "The http.cookies module defines classes for abstracting the concept of cookies, an HTTP state mechanism.",
        "Cookie handling for HTTP clients",
        "Cookie objects",
        "Morsel objects",
        "The module formerly strictly applied the parsing rules described in the RFC 2109 and RFC 2068 specifications.",
        "Cookie.load(rawdata) reads a cookie from a string.",
    ] * 3)
    kind, evidence = detect_kind(cookies, "html")
    assert "web_line_frac" not in evidence, evidence
    assert detect_kind("Home\nLog in | Register\nPrivacy\nNext\nPrevious\nShare\n© 2024 Example Ltd.", "html")[0] == "web"


# The handbook's appendix A.12 (en): a complete section of three sentences and 41 words.
SHORT_SECTION = (
    "A.12. PureOS\n\nPureOS is a Debian-based distribution focused on privacy, convenience and security. It "
    "follows the GNU Free System Distribution Guidelines, used by the Free Software Foundation to qualify a "
    "distribution as free. The social purpose company Purism guides its development."
)


@pytest.mark.parametrize("kind,rule", [("web", "min_words"), ("prose", None), ("reference", None), ("books", None)])
def test_the_stub_floors_judge_web_pages_only(kind, rule):
    doc = Doc(id="d", text=SHORT_SECTION, source="s", url="u", bucket="b", license="l", format="html", kind=kind)
    rejection = Quality(CurateConfig()).process(doc)
    assert (rejection.rule if rejection else None) == rule
    assert doc.quality["n_words"] < 50 and doc.quality["c4_sentences"] < 5  # under both floors


API_ENTRIES = [
    ("floor(x)", "Return the floor of x, the largest integer less than or equal to x. If x is not a float, "
     "delegates to x.__floor__, which should return an Integral value."),
    ("ceil(x)", "Return the ceiling of x, the smallest integer greater than or equal to x. If x is not a float, "
     "delegates to x.__ceil__, which should return an Integral value."),
    ("copysign(x, y)", "Return a float with the magnitude (absolute value) of x but the sign of y. On platforms "
     "that support signed zeros, copysign(1.0, -0.0) returns -1.0."),
    ("fabs(x)", "Return the absolute value of x as a float, whatever the type of its argument. It never "
     "returns an integer, unlike the built-in function of the same purpose."),
    ("isqrt(n)", "Return the integer square root of the nonnegative integer n. This is the floor of the exact "
     "square root of n, or equivalently the greatest integer a such that a squared does not exceed n."),
    ("gcd(*integers)", "Return the greatest common divisor of the specified integer arguments. If any of the "
     "arguments is nonzero, then the returned value is the largest positive integer that divides all of them."),
    ("perm(n, k=None)", "Return the number of ways to choose k items from n items without repetition and with "
     "order. Evaluates to n! / (n - k)! when k <= n and evaluates to zero when k > n."),
]


def test_a_manual_may_repeat_labels_but_not_its_text():
    # math's reference (abridged): each entry's signature, sentence and the same short labels.
    lines = [x for sig, text in API_ENTRIES for x in (sig, text, "New in version 3.8.", "Changed in version 3.11.")]
    doc = Doc(id="d", text="\n".join(lines), source="s", url="u", bucket="b", license="l", format="html", kind="reference")
    assert Quality(CurateConfig()).process(doc) is None and doc.quality["dup_line_frac"] > 0.3
    pasted = "\n".join([API_ENTRIES[-1][1]] * 8 + lines[:8])  # one sentence pasted eight times
    doc = Doc(id="d", text=pasted, source="s", url="u", bucket="b", license="l", format="html", kind="reference")
    rejection = Quality(CurateConfig()).process(doc)
    assert rejection is not None and rejection.rule == "max_dup_text_line_char_frac"  # its text lines, the manual's count


# Maxima's QUADPACK entries (abridged): each function restates the optional arguments it shares.
QUADPACK_SHARED = [
    "The keyword arguments are optional and may be specified in any order. They all take the form key=val.",
    "epsrel", "Desired relative error of approximation. Default is 1d-8.",
    "epsabs", "Desired absolute error of approximation. Default is 0.",
]


def _quadpack_page() -> str:
    entries = [
        [f"Function: quad_q{name} (f(x), x, a, b, [epsrel, epsabs, limit])",
         f"Integration of a general function over a finite interval, the {name} strategy of QUADPACK: "
         f"{name} chooses its own subdivision of the interval and returns the integral with an error estimate.",
         *QUADPACK_SHARED]
        for name in ("ag", "ags", "agi", "awc", "awf", "awo", "aws")
    ]
    return "\n\n".join(x for entry in entries for x in entry)


def test_a_manual_may_restate_its_entries_but_not_mostly_repeat_itself():
    page = _quadpack_page()
    rule, doc = _judged(page, "reference", QualityConfig())
    assert rule is None and 0.2 < doc.quality["dup_para_char_frac"] <= REFERENCE_MAX_DUP_CHAR_FRAC
    web_rule = _judged(page, "web", QualityConfig())[0]
    assert web_rule is not None and web_rule.startswith("max_dup")  # a web page's repetition limits are far lower
    padded = "\n\n".join([page] + [QUADPACK_SHARED[0]] * 40)  # one paragraph pasted forty more times
    rule, doc = _judged(padded, "reference", QualityConfig())
    assert rule == "max_dup_para_char_frac" and doc.quality["dup_para_char_frac"] > REFERENCE_MAX_DUP_CHAR_FRAC


# The installation guide's chapter 2 contents (zh-cn, abridged): a section number beside a title
# of two or three words, so under Gopher's 80% of words with a letter.
CONTENTS_ZH = "\n".join(
    ["第 2 章 系统需求", "", "目录", "", "2.1. 支持的硬件", "2.1.1. 支持的体系", "2.1.2. CPU 支持", "2.1.3. 便携机",
     "2.1.4. 多处理器", "2.1.5. 图形卡支持", "2.1.6. 网络连接硬件", "2.2. 需要固件的设备", "2.3. 特别为 GNU/Linux 采购硬件",
     "2.3.1. 避免专有或封闭的硬件", "2.4. 安装介质", "2.4.1. 光盘", "2.4.2. U 盘", "2.4.3. 网络", "2.5. 内存与磁盘空间的需求"]
)


def _judged(text: str, kind: str, qcfg: QualityConfig, language: str | None = None) -> tuple[str | None, Doc]:
    """The rule that removes `text` judged as `kind` under `qcfg` (None: kept), and the judged document."""
    doc = Doc(id="d", text=text, source="s", url="u", bucket="b", license="l", format="html", kind=kind, language=language)
    rejection = Quality(CurateConfig(quality=qcfg)).process(doc)
    return (rejection.rule if rejection else None), doc


@pytest.mark.parametrize("kind,rule", [("web", "min_alpha_word_frac"), ("reference", None)])
def test_numbered_contents_fail_the_letter_rule_only_outside_manuals(kind, rule):
    only_gopher = QualityConfig(fineweb=False, c4=False, min_stop_words=0)  # the letter rule, not the others
    got, doc = _judged(CONTENTS_ZH, kind, only_gopher, language="zh")
    assert got == rule and doc.quality["alpha_word_frac"] < 0.8


# An information-schema view's page (PostgreSQL 15, abridged): each column described in one phrasing.
COLUMNS_PAGE = "\n\n".join(
    ["37.65. view_table_usage", "The view view_table_usage identifies all tables that are used in the query "
     "expression of a view (the SELECT statement that defines the view). A table is only included if that table "
     "is owned by a currently enabled role.", "Table 37.63. view_table_usage Columns", "Column Type", "Description"]
    + [f"{col} sql_identifier\\n\\nName of the {what} that contains the {thing}"
       for col, what, thing in [("view_catalog", "database", "view"), ("view_schema", "schema", "view"),
                                ("view_name", "view", "table"), ("table_catalog", "database", "table that is used by the view"),
                                ("table_schema", "schema", "table that is used by the view"),
                                ("table_name", "table", "columns that are used by the view")]]
).replace("\\n", "\n")


@pytest.mark.parametrize("kind,rule", [("web", "max_top_4gram_char_frac"), ("reference", None)])
def test_a_manual_may_describe_its_columns_in_one_phrasing(kind, rule):
    got, doc = _judged(COLUMNS_PAGE, kind, QualityConfig(fineweb=False, c4=False, gopher=False))
    assert got == rule and doc.quality["top_4gram_char_frac"] > 0.16


# An API page's examples (Node.js style, abridged): every example repeats its import and its brackets.
EXAMPLES_PAGE = "\n".join(
    line
    for name, what in [("once", "Creates a Promise that is fulfilled when the emitter emits the given event."),
                       ("on", "Returns an async iterator that iterates over the events of the given name."),
                       ("getEventListeners", "Returns a copy of the array of listeners for the event named name."),
                       ("setMaxListeners", "Sets the number of listeners that may be added for a particular event.")]
    for line in (f"events.{name}(emitter, name)", "Added in: v11.13.0", what,
                 "import { EventEmitter } from 'node:events';", "const ee = new EventEmitter();",
                 "process.nextTick(() => {", "  ee.emit('myevent', 42);", "});", "}", "});")
)


@pytest.mark.parametrize("kind,rule", [("web", "max_dup_line_char_frac"), ("reference", None)])
def test_a_manual_s_examples_may_repeat_their_code(kind, rule):
    # The line-count rule off for both kinds, so that the character share is what is compared.
    chars_only = QualityConfig(fineweb=False, c4=False, gopher=False, max_dup_line_frac=1.0)
    got, doc = _judged(EXAMPLES_PAGE, kind, chars_only)
    assert got == rule
    assert doc.quality["dup_line_char_frac"] > 0.2 and doc.quality["dup_text_line_char_frac"] == 0.0
