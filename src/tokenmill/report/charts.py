"""Charts as inline SVG strings (matplotlib, Agg backend): the report needs no server or network."""

from __future__ import annotations

import io
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _svg(fig: "plt.Figure") -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog so it can sit inside HTML


def line_chart(series: dict[str, tuple[Sequence[float], Sequence[float]]], *, title: str,
               xlabel: str, ylabel: str, logy: bool = False, markers: bool = False) -> str:
    """One line per named (x, y) series."""
    fig, ax = plt.subplots(figsize=(7.0, 3.2))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, label=name, marker="o" if markers else None, markersize=3, linewidth=1.2)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _svg(fig)


def bar_chart(labels: Sequence[str], groups: dict[str, Sequence[float]], *, title: str, ylabel: str) -> str:
    """Grouped bars: one group per label, one bar per named value list."""
    fig, ax = plt.subplots(figsize=(7.0, 3.2))
    n = max(len(groups), 1)
    width = 0.8 / n
    for k, (name, values) in enumerate(groups.items()):
        ax.bar([i + k * width - 0.4 + width / 2 for i in range(len(labels))], values, width, label=name)
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    if len(groups) > 1:
        ax.legend(fontsize=8)
    return _svg(fig)
