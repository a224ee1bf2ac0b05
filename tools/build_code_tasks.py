"""Build src/tokenmill/configs/tasks/python_code.jsonl: code items from real CPython 3.11 functions.

Each item's prompt is the function's imports/helpers, its `def` line and its docstring taken from
the CPython 3.11 standard library (PSF License 2.0); its `solution` is the function's real body;
its `tests` are asserts written for tokenmill (known values, cross-checks against the stdlib).
Functions without a docstring get one written here (marked in `source`).

    python tools/build_code_tasks.py [STDLIB_DIR] > src/tokenmill/configs/tasks/python_code.jsonl

STDLIB_DIR defaults to the real corpus copy (shared/corpora/fetch_real_corpora.sh:
code/python/cpython3.11-stdlib, Debian libpython3.11-stdlib 3.11.2).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

DEFAULT = "/work/real_corpora/code/python/cpython3.11-stdlib"

# (file, function, prelude placed before the def, docstring added when the source has none, tests)
SPECS: list[tuple[str, str, str, str | None, str]] = [
    ("calendar.py", "isleap", "", None,
     "assert isleap(2000) and isleap(2024) and isleap(1996)\nassert not isleap(1900) and not isleap(2023) and not isleap(2100)"),
    ("calendar.py", "leapdays", "", None,
     "assert leapdays(2000, 2001) == 1\nassert leapdays(1900, 2000) == 24\nassert leapdays(2001, 2004) == 0\n"
     "assert leapdays(1, 2024) == sum(1 for y in range(1, 2024) if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0))"),
    ("datetime.py", "_is_leap", "", None, "assert _is_leap(2000) and _is_leap(2012)\nassert not _is_leap(1900) and not _is_leap(2019)"),
    ("datetime.py", "_days_before_year", "", None,
     "assert _days_before_year(1) == 0\nassert _days_before_year(2) == 365\nassert _days_before_year(5) == 4 * 365 + 1\n"
     "assert _days_before_year(6) == 5 * 365 + 1\nimport datetime\nassert _days_before_year(2024) == datetime.date(2024, 1, 1).toordinal() - 1"),
    ("datetime.py", "_days_in_month",
     "def _is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n\n"
     "_DAYS_IN_MONTH = [-1, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]\n\n", None,
     "assert _days_in_month(2024, 2) == 29 and _days_in_month(2023, 2) == 28 and _days_in_month(1900, 2) == 28\n"
     "assert _days_in_month(2023, 1) == 31 and _days_in_month(2023, 4) == 30 and _days_in_month(2023, 12) == 31"),
    ("datetime.py", "_ymd2ord",
     "import datetime\n\ndef _is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n\n"
     "def _days_before_year(year):\n    y = year - 1\n    return y*365 + y//4 - y//100 + y//400\n\n"
     "def _days_in_month(year, month):\n    return [-1, 31, 29 if _is_leap(year) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month]\n\n"
     "def _days_before_month(year, month):\n    return sum(_days_in_month(year, m) for m in range(1, month))\n\n", None,
     "for y, m, d in [(1, 1, 1), (2000, 2, 29), (2023, 12, 31), (1999, 3, 1), (1582, 10, 15)]:\n"
     "    assert _ymd2ord(y, m, d) == datetime.date(y, m, d).toordinal(), (y, m, d)"),
    ("colorsys.py", "rgb_to_yiq", "", "Convert a color from RGB coordinates (each in [0, 1]) to YIQ coordinates.",
     "y, i, q = rgb_to_yiq(1.0, 0.0, 0.0)\nassert abs(y - 0.30) < 1e-9 and abs(i - 0.599) < 1e-9 and abs(q - 0.213) < 1e-9\n"
     "assert rgb_to_yiq(0.0, 0.0, 0.0) == (0.0, 0.0, 0.0)\nassert abs(rgb_to_yiq(1.0, 1.0, 1.0)[0] - 1.0) < 1e-9"),
    ("colorsys.py", "rgb_to_hsv", "", "Convert a color from RGB coordinates (each in [0, 1]) to HSV coordinates.",
     "assert rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)\nassert rgb_to_hsv(0.5, 0.5, 0.5) == (0.0, 0.0, 0.5)\n"
     "h, s, v = rgb_to_hsv(0.0, 1.0, 0.0)\nassert abs(h - 1/3) < 1e-9 and s == 1.0 and v == 1.0\n"
     "h, s, v = rgb_to_hsv(0.2, 0.4, 0.8)\nassert abs(h - 0.6111111111) < 1e-6 and abs(s - 0.75) < 1e-9 and v == 0.8"),
    ("colorsys.py", "hsv_to_rgb", "", "Convert a color from HSV coordinates (each in [0, 1]) to RGB coordinates.",
     "assert hsv_to_rgb(0.0, 0.0, 0.5) == (0.5, 0.5, 0.5)\nassert hsv_to_rgb(0.0, 1.0, 1.0) == (1.0, 0.0, 0.0)\n"
     "r, g, b = hsv_to_rgb(2/3, 1.0, 1.0)\nassert abs(r) < 1e-9 and abs(g) < 1e-9 and abs(b - 1.0) < 1e-9\n"
     "import colorsys\nfor h in (0.05, 0.3, 0.55, 0.7, 0.95):\n    assert hsv_to_rgb(h, 0.6, 0.8) == colorsys.hsv_to_rgb(h, 0.6, 0.8)"),
    ("colorsys.py", "hls_to_rgb",
     "ONE_THIRD = 1.0/3.0\nONE_SIXTH = 1.0/6.0\nTWO_THIRD = 2.0/3.0\n\ndef _v(m1, m2, hue):\n    hue = hue % 1.0\n    if hue < ONE_SIXTH:\n"
     "        return m1 + (m2-m1)*hue*6.0\n    if hue < 0.5:\n        return m2\n    if hue < TWO_THIRD:\n"
     "        return m1 + (m2-m1)*(TWO_THIRD-hue)*6.0\n    return m1\n\n",
     "Convert a color from HLS coordinates (each in [0, 1]) to RGB coordinates.",
     "assert hls_to_rgb(0.0, 0.5, 0.0) == (0.5, 0.5, 0.5)\nr, g, b = hls_to_rgb(0.0, 0.5, 1.0)\n"
     "assert abs(r - 1) < 1e-9 and abs(g) < 1e-9 and abs(b) < 1e-9\nimport colorsys\n"
     "for h, l, s in [(0.1, 0.3, 0.9), (0.6, 0.7, 0.4), (0.9, 0.2, 0.5)]:\n"
     "    assert all(abs(a - b) < 1e-12 for a, b in zip(hls_to_rgb(h, l, s), colorsys.hls_to_rgb(h, l, s)))"),
    ("bisect.py", "bisect_right", "", None,
     "a = [1, 2, 2, 2, 5, 8]\nassert bisect_right(a, 2) == 4 and bisect_right(a, 0) == 0 and bisect_right(a, 9) == 6\n"
     "assert bisect_right(a, 2, 0, 2) == 2\nassert bisect_right([(1, 'a'), (3, 'b')], 2, key=lambda t: t[0]) == 1\n"
     "try:\n    bisect_right(a, 1, -1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('lo < 0 must raise')"),
    ("bisect.py", "bisect_left", "", None,
     "a = [1, 2, 2, 2, 5, 8]\nassert bisect_left(a, 2) == 1 and bisect_left(a, 0) == 0 and bisect_left(a, 9) == 6\n"
     "assert bisect_left(a, 5, 5) == 5\nassert bisect_left([(1, 'a'), (3, 'b')], 3, key=lambda t: t[0]) == 1\n"
     "try:\n    bisect_left(a, 1, -1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('lo < 0 must raise')"),
    ("string.py", "capwords", "", None,
     "assert capwords('hello   world') == 'Hello World'\nassert capwords(' aBC  dEF ') == 'Abc Def'\n"
     "assert capwords('a-b-c', '-') == 'A-B-C'\nassert capwords('') == ''"),
    ("genericpath.py", "commonprefix", "import os\n\n", None,
     "assert commonprefix(['/usr/lib', '/usr/local']) == '/usr/l'\nassert commonprefix([]) == ''\n"
     "assert commonprefix(['abc']) == 'abc'\nassert commonprefix([['a', 'b'], ['a', 'c']]) == ['a']\nassert commonprefix(['x', 'y']) == ''"),
    ("genericpath.py", "_splitext", "", None,
     "assert _splitext('a/b.txt', '/', None, '.') == ('a/b', '.txt')\nassert _splitext('.bashrc', '/', None, '.') == ('.bashrc', '')\n"
     "assert _splitext('a.b/c', '/', None, '.') == ('a.b/c', '')\nassert _splitext('x.tar.gz', '/', None, '.') == ('x.tar', '.gz')\n"
     "assert _splitext('..a', '/', None, '.') == ('..a', '')\nassert _splitext('c:\\\\x.y', '\\\\', '/', '.') == ('c:\\\\x', '.y')"),
    ("posixpath.py", "basename", "import os\n\ndef _get_sep(path):\n    if isinstance(path, bytes):\n        return b'/'\n    else:\n        return '/'\n\n", None,
     "assert basename('/usr/lib/x.py') == 'x.py'\nassert basename('/usr/lib/') == ''\nassert basename('x') == 'x'\nassert basename(b'/a/b') == b'b'"),
    ("posixpath.py", "dirname", "import os\n\ndef _get_sep(path):\n    if isinstance(path, bytes):\n        return b'/'\n    else:\n        return '/'\n\n", None,
     "assert dirname('/usr/lib/x.py') == '/usr/lib'\nassert dirname('x') == ''\nassert dirname('/x') == '/'\n"
     "assert dirname('//a//b') == '//a'\nassert dirname(b'/a/b') == b'/a'"),
    ("posixpath.py", "split", "import os\n\ndef _get_sep(path):\n    if isinstance(path, bytes):\n        return b'/'\n    else:\n        return '/'\n\n", None,
     "assert split('/usr/lib/x.py') == ('/usr/lib', 'x.py')\nassert split('x') == ('', 'x')\nassert split('/') == ('/', '')\n"
     "assert split('a//b') == ('a', 'b')\nassert split(b'/a/b') == (b'/a', b'b')"),
    ("html/__init__.py", "escape", "", None,
     "assert escape('<a href=\"x\">&</a>') == '&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;'\n"
     "assert escape(\"it's\") == 'it&#x27;s'\nassert escape('\"q\"', quote=False) == '\"q\"'\nassert escape('&amp;') == '&amp;amp;'"),
    ("shlex.py", "quote", "import re\n\n_find_unsafe = re.compile(r'[^\\w@%+=:,./-]', re.ASCII).search\n\n", None,
     "assert quote('') == \"''\"\nassert quote('abc') == 'abc'\nassert quote('a b') == \"'a b'\"\n"
     "assert quote(\"it's\") == \"'it'\\\"'\\\"'s'\"\nassert quote('x;rm') == \"'x;rm'\""),
    ("textwrap.py", "indent", "", None,
     "assert indent('a\\nb\\n', '  ') == '  a\\n  b\\n'\nassert indent('a\\n\\nb', '> ') == '> a\\n\\n> b'\n"
     "assert indent('a\\n\\nb', '+', lambda line: True) == '+a\\n+\\n+b'\nassert indent('', 'x') == ''"),
    ("textwrap.py", "dedent",
     "import re\n\n_whitespace_only_re = re.compile('^[ \\t]+$', re.MULTILINE)\n"
     "_leading_whitespace_re = re.compile('(^[ \\t]*)(?:[^ \\t\\n])', re.MULTILINE)\n\n", None,
     "assert dedent('  a\\n    b\\n') == 'a\\n  b\\n'\nassert dedent('  a\\n\\tb') == '  a\\n\\tb'\n"
     "assert dedent('   \\n  x\\n') == '\\nx\\n'\nassert dedent('\\ta\\n\\tb') == 'a\\nb'"),
    ("operator.py", "countOf", "", None,
     "assert countOf([1, 2, 1, 1], 1) == 3\nassert countOf('banana', 'a') == 3\nassert countOf([], 0) == 0\n"
     "nan = float('nan')\nassert countOf([nan, nan], nan) == 2"),
    ("operator.py", "indexOf", "", None,
     "assert indexOf([5, 6, 7], 7) == 2\nassert indexOf('abc', 'a') == 0\n"
     "try:\n    indexOf([1], 2)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('missing value must raise ValueError')"),
    ("email/utils.py", "unquote", "", None,
     "assert unquote('\"abc\"') == 'abc'\nassert unquote('<a@b>') == 'a@b'\nassert unquote('\"a\\\\\\\\b\\\\\"c\"') == 'a\\\\b\"c'\n"
     "assert unquote('plain') == 'plain'\nassert unquote('\"') == '\"'"),
    ("ipaddress.py", "_count_righthand_zero_bits", "", None,
     "assert _count_righthand_zero_bits(0, 32) == 32\nassert _count_righthand_zero_bits(8, 32) == 3\n"
     "assert _count_righthand_zero_bits(1, 32) == 0\nassert _count_righthand_zero_bits(0b101000, 8) == 3\nassert _count_righthand_zero_bits(256, 4) == 4"),
    ("quopri.py", "needsquoting", "ESCAPE = b'='\n\n", None,
     "assert needsquoting(b'=', False, False)\nassert not needsquoting(b'a', False, False)\nassert needsquoting(b'\\t', True, False)\n"
     "assert not needsquoting(b'\\t', False, False)\nassert needsquoting(b'_', False, True) and not needsquoting(b'_', False, False)\n"
     "assert needsquoting(b'\\x80', False, False) and needsquoting(b'\\x1f', False, False) and not needsquoting(b'~', False, False)"),
    ("json/encoder.py", "py_encode_basestring",
     "import re\n\nESCAPE = re.compile(r'[\\x00-\\x1f\\\\\"\\b\\f\\n\\r\\t]')\nESCAPE_DCT = {\n    '\\\\': '\\\\\\\\',\n    '\"': '\\\\\"',\n"
     "    '\\b': '\\\\b',\n    '\\f': '\\\\f',\n    '\\n': '\\\\n',\n    '\\r': '\\\\r',\n    '\\t': '\\\\t',\n}\n"
     "for i in range(0x20):\n    ESCAPE_DCT.setdefault(chr(i), '\\\\u{0:04x}'.format(i))\n\n", None,
     "import json\nfor s in ['abc', 'a\"b', 'tab\\there', 'line\\n', 'back\\\\slash', '\\x01', 'é']:\n"
     "    assert py_encode_basestring(s) == json.dumps(s, ensure_ascii=False), s"),
    ("statistics.py", "median_low", "class StatisticsError(ValueError):\n    pass\n\n", None,
     "assert median_low([1, 3, 5]) == 3\nassert median_low([1, 3, 5, 7]) == 3\nassert median_low([5, 1, 3, 7]) == 3\n"
     "try:\n    median_low([])\nexcept StatisticsError:\n    pass\nelse:\n    raise AssertionError('empty data must raise')"),
    ("heapq.py", "_siftdown", "", "Follow the path from pos up to startpos in the heap, moving newitem (heap[pos]) up into its place.",
     "import heapq, random\nrng = random.Random(0)\nfor _ in range(50):\n    h = []\n    for x in [rng.randrange(100) for _ in range(20)]:\n"
     "        h.append(x)\n        _siftdown(h, 0, len(h) - 1)\n"
     "    assert all(h[(i - 1) // 2] <= h[i] for i in range(1, len(h)))\n    expected = sorted(h)\n"
     "    assert [heapq.heappop(h) for _ in range(len(h))] == expected"),
]  # fmt: skip


def item(stdlib: Path, file: str, name: str, prelude: str, doc: str | None, tests: str) -> dict:
    """One JSONL record: the prompt ends after the docstring (line break included); the solution is the rest."""
    src = (stdlib / file).read_text(encoding="utf-8")
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = src.splitlines(keepends=True)
    body = lines[fn.body[0].lineno - 1 : fn.end_lineno]
    if doc is None:
        head = lines[fn.lineno - 1 : fn.body[0].end_lineno]
        body = lines[fn.body[0].end_lineno : fn.end_lineno]
    else:
        head = lines[fn.lineno - 1 : fn.body[0].lineno - 1] + [f'    """{doc}"""\n']
    note = "" if doc is None else "; docstring written for tokenmill"
    return {
        "prompt": prelude + "".join(head),
        "tests": tests + "\n",
        "solution": "".join(body),
        "source": f"CPython 3.11 Lib/{file}:{name} (PSF License 2.0){note}",
    }


def main() -> None:
    stdlib = Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
    for spec in SPECS:
        print(json.dumps(item(stdlib, *spec), ensure_ascii=False))


if __name__ == "__main__":
    main()
