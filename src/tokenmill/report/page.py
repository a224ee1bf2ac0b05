"""The report's HTML building blocks: its stylesheet and tables in its style."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable

from tokenmill import json_limits
from tokenmill.summaries import plain

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1000px;color:#222}
h1{margin-bottom:.2rem} h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem} td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:right}
th{background:#f5f5f5} td:first-child,th:first-child{text-align:left}
.muted{color:#777;font-size:.85rem} .good{color:#13692b;font-weight:600} .bad{color:#a11;font-weight:600}
pre{background:#f7f7f7;padding:.6rem;white-space:pre-wrap;font-size:.82rem;border-radius:4px}
svg{max-width:100%;height:auto}
"""


def fmt_cell(v: Any) -> str:
    if isinstance(v, (Mapping, list, tuple)):  # a person reads words, not a Python repr
        return html.escape(plain(v))
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return html.escape(str(v))


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{fmt_cell(c) if not str(c).startswith('<span') else c}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def read_json(path: Path) -> Any:
    return json_limits.load_file(path) if path.exists() else None
