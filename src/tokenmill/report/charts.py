"""Charts as inline SVG strings (matplotlib, Agg backend): the report needs no server or network."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType


def _svg(fig: "plt.Figure") -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog so it can sit inside HTML


def line_chart(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logy: bool = False,
    markers: bool = False,
) -> str:
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
    # Many long labels (the curation steps) overlap at a shallow angle: steeper the more there are.
    rotation = 20 if len(labels) <= 8 else 50
    ax.set_xticks(range(len(labels)), labels, rotation=rotation, ha="right", rotation_mode="anchor", fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    if len(groups) > 1:
        ax.legend(fontsize=8)
    return _svg(fig)


# -- stacked panels on one shared x axis (the run timeline) -------------------------------------

MAX_POINTS = 2000  # per plotted series: keeps a long run's SVG small


def downsample(xs: Sequence[float], ys: Sequence[float | None], max_points: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """At most ~max_points points: the x range is cut into max_points // 4 equal buckets and each
    run of points in one bucket keeps its first, lowest, highest and last point, so a one-step
    spike survives where plain striding would drop it. None becomes NaN, which matplotlib draws as
    a gap; a point with NaN x (a deliberate line break) is always kept."""
    pts = [(float(x), math.nan if y is None else float(y)) for x, y in zip(xs, ys)]
    if len(pts) <= max_points:
        return [p[0] for p in pts], [p[1] for p in pts]
    finite_x = [p[0] for p in pts if not math.isnan(p[0])]
    n_buckets = max(max_points // 4, 1)
    lo = min(finite_x)
    width = (max(finite_x) - lo) / n_buckets or 1.0
    runs: list[list[tuple[float, float]]] = []
    last_bucket: int | None = None
    for p in pts:
        bucket = None if math.isnan(p[0]) else min(int((p[0] - lo) / width), n_buckets - 1)
        if bucket is None or bucket != last_bucket or not runs:
            runs.append([])
        runs[-1].append(p)
        last_bucket = bucket
    out: list[tuple[float, float]] = []
    for run in runs:
        finite = [i for i, p in enumerate(run) if not math.isnan(p[1])]
        keep = {0, len(run) - 1}
        if finite:
            keep |= {min(finite, key=lambda i: run[i][1]), max(finite, key=lambda i: run[i][1])}
        out += [run[i] for i in sorted(keep)]
    return [p[0] for p in out], [p[1] for p in out]


@dataclass
class Heatmap:
    """Rows (labels top to bottom) over columns whose left/right x edges are `x_edges`
    (len = columns + 1); NaN cells are left blank. Drawn as one raster image, so its size in the
    SVG does not grow with the number of cells."""

    rows: list[str]
    x_edges: list[float]
    values: list[list[float]]  # values[row][column]
    label: str = ""


@dataclass
class Panel:
    """One panel of a stacked figure: named (x, y) lines, or a heat map."""

    ylabel: str
    lines: Mapping[str, tuple[Sequence[float], Sequence[float | None]]] = field(default_factory=dict)
    heatmap: Heatmap | None = None
    logy: bool = False
    steps: bool = False  # draw as a staircase (a value that holds until the next record)
    point_markers: set[str] = field(default_factory=set)  # line names drawn with dots (sparse series)
    height: float = 1.0  # relative to the other panels (a heat map of many layers gets more)


@dataclass
class Marker:
    """A vertical line drawn across every panel at x; gid (unique per marker) names it in the SVG."""

    x: float
    kind: str
    gid: str
    label: str = ""  # written at the top of the first panel when not empty


@dataclass
class Span:
    """An x range shaded on every panel (SVG id `{gid}-p{panel index}`), its label written in the first."""

    x0: float
    x1: float
    gid: str
    label: str = ""


@dataclass
class MarkerStyle:
    color: str
    linestyle: LineStyleType = "-"
    linewidth: float = 1.0
    legend: str = ""


def stacked_panels(
    panels: Sequence[Panel],
    markers: Sequence[Marker],
    styles: dict[str, MarkerStyle],
    *,
    xlabel: str,
    title: str = "",
    spans: Sequence[Span] = (),
    width: float = 9.0,
    panel_height: float = 1.55,
) -> str:
    """Panels stacked top to bottom on one shared x axis, every marker drawn on every panel (SVG
    element id `{marker.gid}-p{panel index}`), marker labels as ticks above the first panel, spans
    shaded on every panel, and one legend of the marker kinds present. Text stays SVG text
    (searchable, smaller)."""
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tokenmill", "font.size": 8}):
        ratios = [p.height for p in panels]
        fig, grid = plt.subplots(
            len(panels),
            1,
            sharex=True,
            squeeze=False,
            gridspec_kw={"height_ratios": ratios},
            figsize=(width, panel_height * sum(ratios) + 0.6),
        )
        axes = [a[0] for a in grid]
        for i, (ax, panel) in enumerate(zip(axes, panels)):
            _draw_panel(ax, panel, i)
            for sp in spans:
                ax.axvspan(sp.x0, sp.x1, color="#999999", alpha=0.15, linewidth=0, gid=f"{sp.gid}-p{i}")
            for m in markers:
                st = styles[m.kind]
                ax.axvline(
                    m.x, color=st.color, linestyle=st.linestyle, linewidth=st.linewidth, alpha=0.85, gid=f"{m.gid}-p{i}", zorder=3
                )
        for sp in spans:
            if sp.label:
                axes[0].annotate(
                    sp.label,
                    ((sp.x0 + sp.x1) / 2, 0.5),
                    xycoords=("data", "axes fraction"),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="#555555",
                )
        labelled = [m for m in markers if m.label][:30]  # more than 30 labels would be unreadable
        if labelled:
            # Above the first panel, as ticks of a top axis: they never cover a curve or its legend.
            top = axes[0].secondary_xaxis("top")
            top.set_xticks([m.x for m in labelled], [m.label for m in labelled], rotation=90, fontsize=7)
            for tick, m in zip(top.get_xticklabels(), labelled):
                tick.set_color(styles[m.kind].color)
        axes[-1].set_xlabel(xlabel)
        present = [k for k in styles if any(m.kind == k for m in markers)]
        if present:
            handles = [
                Line2D(
                    [],
                    [],
                    color=styles[k].color,
                    linestyle=styles[k].linestyle,
                    linewidth=max(styles[k].linewidth, 1.2),
                    label=styles[k].legend or k,
                )
                for k in present
            ]
            fig.legend(
                handles=handles,
                loc="lower center",
                bbox_to_anchor=(0.5, 1.0),
                ncol=min(len(handles), 6),
                fontsize=7,
                frameon=False,
            )
        if title:
            fig.suptitle(title, y=1.04 if present else 1.0)
        fig.align_ylabels(axes)
        fig.tight_layout(h_pad=0.3)
        return _svg_deterministic(fig)


def _draw_panel(ax: "plt.Axes", panel: Panel, index: int) -> None:
    ax.set_ylabel(panel.ylabel)
    ax.grid(alpha=0.3)
    if panel.heatmap is not None:
        _draw_heatmap(ax, panel.heatmap)
        return
    for name, (xs, ys) in panel.lines.items():
        dx, dy = downsample(xs, ys)
        dotted = name in panel.point_markers
        ax.plot(
            dx,
            dy,
            label=name,
            linewidth=1.0,
            marker="o" if dotted else None,
            markersize=2.5,
            drawstyle="steps-post" if panel.steps else "default",
            gid=f"series-{_slug(name)}-p{index}",
        )
    if panel.logy:
        ax.set_yscale("log")
    if len(panel.lines) > 1:
        ax.legend(fontsize=7, loc="upper right", ncol=min(len(panel.lines), 4))


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _draw_heatmap(ax: "plt.Axes", hm: Heatmap) -> None:
    finite = [v for row in hm.values for v in row if v is not None and math.isfinite(v) and v > 0]
    if not finite:
        return
    norm = LogNorm(vmin=min(finite), vmax=max(finite) if max(finite) > min(finite) else min(finite) * 1.0001)
    data = [[v if v is not None and math.isfinite(v) and v > 0 else math.nan for v in row] for row in hm.values]
    # A raster on a regular grid: the caller bins the columns evenly between x_edges[0] and x_edges[-1].
    img = ax.imshow(
        data,
        aspect="auto",
        interpolation="nearest",
        norm=norm,
        cmap="viridis",
        extent=(hm.x_edges[0], hm.x_edges[-1], len(hm.rows) - 0.5, -0.5),
        gid=f"heatmap-rows-{len(hm.rows)}",
    )
    ax.set_yticks(range(len(hm.rows)), hm.rows, fontsize=6 if len(hm.rows) > 12 else 7)
    ax.grid(False)
    cax = ax.inset_axes((1.01, 0.0, 0.012, 1.0))  # outside the panel: the shared x extent stays aligned
    fig = ax.get_figure()
    assert fig is not None  # the panel's axes belong to the figure being drawn
    bar = fig.colorbar(img, cax=cax)
    bar.set_label(hm.label, fontsize=7)
    bar.ax.tick_params(labelsize=6)


def _svg_deterministic(fig: "plt.Figure") -> str:
    """Like _svg, without the metadata block, so the same run renders the same bytes."""
    buf = io.StringIO()
    # No metadata block: no date (same bytes for the same run), no creator URL (nothing external).
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]
