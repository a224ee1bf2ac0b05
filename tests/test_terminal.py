"""At 80 columns (a pipe, a file, a small terminal) no id, path or sentence is broken over lines:
messages stay one line, and a table too wide for the width is printed row by row, values whole."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tokenmill.terminal import message_console, print_table

REPO = Path(__file__).resolve().parents[1]
LONG_ID = "warc/CC-MAIN-20240612140424-20240612170424-00012.warc.gz#urn:uuid:3f2a9c4e-1b7d-4e8f-9a61-0c2d5e7f8a9b"


def _console(width: int = 80) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, markup=False, highlight=False, color_system=None), buf


def _table() -> Table:
    table = Table(title="output 1: 12 token 8-grams")
    for col in ("rank", "doc_id", "bucket", "steps"):
        table.add_column(col)
    table.add_row("1", LONG_ID, "web", "3, 7, 11")
    table.add_row("2", "code-4", "code", "never sampled")
    return table


def test_a_table_that_fits_is_a_table():
    console, buf = _console(200)
    print_table(_table(), console)
    text = buf.getvalue()
    assert "┃ rank" in text or "rank ┃" in text or "│" in text
    assert any(LONG_ID in line for line in text.splitlines())


def test_a_table_too_wide_prints_each_row_with_its_values_whole():
    console, buf = _console(80)
    print_table(_table(), console)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "output 1: 12 token 8-grams"
    assert lines[1:] == ["rank 1", f"    doc_id: {LONG_ID}", "    bucket: web", "    steps: 3, 7, 11",
                         "rank 2", "    doc_id: code-4", "    bucket: code", "    steps: never sampled"]


def test_a_message_longer_than_the_width_stays_one_line():
    buf = io.StringIO()
    console = message_console()
    console.file = buf
    console.width = 80
    message = f"error: {LONG_ID}: [not] a sentence that runs on well past eighty columns"
    console.print(message)
    assert buf.getvalue() == message + "\n"  # no newline inserted, and the brackets are not read as markup


def test_a_cli_error_naming_a_long_path_is_one_line_at_80_columns(tmp_path):
    deep = tmp_path / ("a-folder-with-a-long-name-" * 3) / "and-a-config-file-whose-name-is-long-too.yaml"
    out = subprocess.run([sys.executable, "-m", "tokenmill", "tokenize", str(deep)], capture_output=True, text=True,
                         env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")}, timeout=120)
    assert out.returncode == 2 and len(str(deep)) > 80
    (line,) = out.stderr.splitlines()
    assert str(deep) in line
