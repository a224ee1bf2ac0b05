"""The report's Data section: what curation kept and why, and what training drew from it.

Parts, each one function returning HTML: the curation funnel (documents and bytes through every
step, per bucket and source), the top removal reasons with examples from `curated/_rejected/`,
duplicate-cluster sizes, language and quality-signal distributions of the kept documents, the
effective-token figures (docs/curation.md), the tokenizer audit, and planned versus delivered tokens
per bucket. Parquet files are streamed column by column: document text is read only for the few
examples shown, cut to an excerpt before it becomes a Python string.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.report.charts import _svg, bar_chart
from tokenmill.report.license_section import license_table, license_tokens_table
from tokenmill.report.page import read_json
from tokenmill.runs import RunDir

import matplotlib.pyplot as plt  # noqa: E402  (after charts, which selects the Agg backend)

REJECTED_DIR = "_rejected"
EXCERPT_CHARS = 200
TOP_RULES = 10
EXAMPLES_PER_RULE = 3
LARGEST_CLUSTERS = 5
BATCH_ROWS = 1024
# Kept-document signals whose distribution is shown: (column path, label). Absent ones are skipped.
SIGNALS: tuple[tuple[str, str], ...] = (
    ("language_score", "language score"),
    ("quality.mean_word_len", "mean word length (chars)"),
    ("quality.alpha_word_frac", "share of words with a letter"),
    ("model_quality.perplexity", "reference-LM perplexity"),
    ("model_quality.classifier_score", "quality-classifier score"),
)
NO_LANGUAGE = "(not identified)"


# --------------------------------------------------------------------------- formatting
def _num(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.{digits}g}" if abs(v) < 1e3 else f"{float(v):,.0f}"
    return html.escape(str(v))


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "—"


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]], cls: str = "") -> str:
    """Cells that are already HTML are passed as `Raw`; everything else is formatted and escaped."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{c.html if isinstance(c, Raw) else _num(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table{f' class={cls}' if cls else ''}><tr>{head}</tr>{body}</table>"


@dataclass(frozen=True)
class Raw:
    """A table cell that is HTML already."""

    html: str


def _placeholder(what: str) -> str:
    return f"<p class=muted>{html.escape(what)}</p>"


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """The first `limit` characters (line breaks kept: code stays readable), HTML-escaped."""
    flat = (text or "").strip()
    return html.escape(flat[:limit] + ("…" if len(flat) > limit else ""))


# --------------------------------------------------------------------------- parquet access
def curated_parts(run: RunDir) -> dict[str, list[Path]]:
    """Kept-document parquet files by bucket (`curated/<bucket>/*.parquet`, not `_rejected`)."""
    root = run.sub("curated")
    if not root.is_dir():
        return {}
    return {
        d.name: sorted(d.glob("*.parquet"))
        for d in sorted(root.iterdir())
        if d.is_dir() and not d.name.startswith(("_", ".")) and any(d.glob("*.parquet"))
    }


def rejected_parts(run: RunDir) -> list[Path]:
    d = run.sub("curated", REJECTED_DIR)
    return sorted(d.glob("*.parquet")) if d.is_dir() else []


def _has_column(schema: pa.Schema, path: str) -> bool:
    """Whether a (possibly nested, dotted) column exists in the schema."""
    head, _, rest = path.partition(".")
    if head not in schema.names:
        return False
    typ = schema.field(head).type
    for name in rest.split(".") if rest else []:
        if not pa.types.is_struct(typ) or typ.get_field_index(name) < 0:
            return False
        typ = typ.field(name).type
    return True


def _leaf(batch: pa.RecordBatch, path: str) -> pa.Array:
    """The values of a dotted column path of a batch read with that path selected."""
    head, *rest = path.split(".")
    arr = batch.column(batch.schema.get_field_index(head))
    for name in rest:
        arr = pc.struct_field(arr, name)
    return arr


def stream(paths: Iterable[Path], columns: list[str]) -> Iterator[tuple[Path, pa.RecordBatch, set[str]]]:
    """Batches of the wanted columns that each file has, with the set of those present."""
    for path in paths:
        f = pq.ParquetFile(path)
        schema = f.schema_arrow
        present = [c for c in columns if _has_column(schema, c)]
        if not present:
            continue
        for batch in f.iter_batches(columns=present, batch_size=BATCH_ROWS):
            yield path, batch, set(present)


# --------------------------------------------------------------------------- 1. funnel
def _step_row(name: str, c: dict, first: dict) -> list[Any]:
    rules = ", ".join(f"{r} {v['docs']:,}" for r, v in sorted(c["rejected"].items(), key=lambda kv: -kv[1]["docs"]))
    return [
        name,
        c["docs_in"],
        c["docs_out"],
        c["docs_in"] - c["docs_out"],
        c.get("docs_skipped", 0),
        c["bytes_in"],
        c["bytes_out"],
        c["bytes_in"] - c["bytes_out"],
        _pct(c["docs_out"], first["docs_in"]),
        _pct(c["bytes_out"], first["bytes_in"]),
        rules or "—",
    ]


FUNNEL_HEADER = [
    "step",
    "docs in",
    "docs out",
    "docs removed",
    "passed untouched",
    "bytes in",
    "bytes out",
    "bytes removed",
    "docs left (of read)",
    "bytes left (of read)",
    "removed by rule",
]


def funnel_table(steps: list[str], counts: dict[str, dict]) -> str:
    ran = [s for s in steps if s in counts]
    if not ran:
        return ""
    first = counts[ran[0]]
    return _table(FUNNEL_HEADER, [_step_row(s, counts[s], first) for s in ran])


def language_table(languages: dict[str, dict]) -> str:
    """Keep rate per detected language with the rules that removed the most of it: a filter that
    keeps one language far less than another is a bias to look at (FineWeb-2, Penedo et al. 2025)."""
    if not languages:
        return ""
    rows = [
        [
            lang,
            c["docs"],
            c["kept"],
            _pct(c["kept"], c["docs"]),
            ", ".join(f"{r} {n:,}" for r, n in list(c["rejected"].items())[:3]) or "—",
        ]
        for lang, c in languages.items()
    ]
    return (
        "<p>Per language (detected by <code>langid</code>; <code>und</code>: removed before it ran, or "
        "no langid step):</p>" + _table(["language", "docs", "kept", "kept %", "removed most by"], rows)
    )


# Placeholder kinds in the order of the pii step's table (data/steps/pii.py).
PII_KINDS = ("name", "address", "email", "phone", "ip", "card", "iban", "national_id")


def pii_table(pii: dict[str, dict] | None) -> str:
    """Per bucket, what the pii step replaced in the kept documents, with a few placeholders in
    context: the text was rewritten, and this is where it shows."""
    if pii is None:
        return ""
    if not pii:
        return "<p>PII: nothing was replaced in the kept documents.</p>"
    kinds = [k for k in PII_KINDS if any(c["kinds"].get(k) for c in pii.values())]
    kinds += sorted({k for c in pii.values() for k in c["kinds"]} - set(kinds))
    rows = [[b, c["docs"], *(c["kinds"].get(k, 0) for k in kinds)] for b, c in sorted(pii.items())]
    examples = [
        f"<li><code>{html.escape(b)}</code> {html.escape(k)}: {html.escape(e)}</li>"
        for b, c in sorted(pii.items())
        for k in kinds
        for e in c["examples"].get(k, [])
    ]
    return (
        "<p>PII replaced by typed placeholders in the kept documents (<code>curate.pii</code>; names at "
        "<code>names: private</code> only where contact details mark a private person, docs/curation.md):</p>"
        + _table(["bucket", "docs rewritten", *kinds], rows)
        + (f"<details><summary>placeholders in context</summary><ul>{''.join(examples)}</ul></details>" if examples else "")
    )


def section_funnel(funnel: dict | None) -> str:
    """Documents and bytes through every curation step: total, per bucket, per source."""
    out = ["<h3>Curation funnel</h3>"]
    if not funnel:
        return "".join(out) + _placeholder("No curated/_funnel.json yet.")
    steps, total = funnel["steps"], funnel["total"]
    first = total[steps[0]]
    out.append(
        "<p>Every document passes every step; a step that does not apply to it passes it untouched. "
        "Bytes also shrink without documents being removed (extraction drops markup, line "
        "deduplication drops boilerplate lines). Every removed document is kept in "
        "<code>curated/_rejected/</code> with its step, rule and measured value.</p>"
    )
    out.append(funnel_table(steps, total))
    out.append(
        bar_chart(
            steps,
            {
                "documents left %": [100.0 * total[s]["docs_out"] / max(first["docs_in"], 1) for s in steps],
                "bytes left %": [100.0 * total[s]["bytes_out"] / max(first["bytes_in"], 1) for s in steps],
            },
            title="What is left after each curation step (share of what was read)",
            ylabel="%",
        )
    )
    buckets = funnel.get("buckets") or {}
    if buckets:
        last = steps[-1]
        out.append(
            "<p>Per bucket:</p>"
            + _table(
                ["bucket", "docs read", "docs kept", "docs kept %", "bytes read", "bytes kept", "bytes kept %"],
                [
                    [
                        b,
                        d[steps[0]]["docs_in"],
                        d[last]["docs_out"],
                        _pct(d[last]["docs_out"], d[steps[0]]["docs_in"]),
                        d[steps[0]]["bytes_in"],
                        d[last]["bytes_out"],
                        _pct(d[last]["bytes_out"], d[steps[0]]["bytes_in"]),
                    ]
                    for b, d in sorted(buckets.items())
                ],
            )
        )
        for b, d in sorted(buckets.items()):
            out.append(f"<details><summary>funnel of bucket {html.escape(b)}</summary>{funnel_table(steps, d)}</details>")
    out.append(pii_table(funnel.get("pii")))
    out.append(language_table(funnel.get("languages") or {}))
    out.append(license_table(funnel.get("licenses")))
    sources = funnel.get("sources") or {}
    if sources:
        out.append(
            "<details><summary>per source</summary>"
            + _table(
                ["source", "bucket", "docs read", "docs kept", "bytes read", "bytes kept", "bytes kept %"],
                [
                    [
                        s,
                        v["bucket"],
                        v["docs_in"],
                        v["docs_out"],
                        v["bytes_in"],
                        v["bytes_out"],
                        _pct(v["bytes_out"], v["bytes_in"]),
                    ]
                    for s, v in sorted(sources.items())
                ],
            )
            + "</details>"
        )
    return "".join(out)


# --------------------------------------------------------------------------- 2. removal reasons
@dataclass
class Example:
    doc_id: str
    bucket: str
    value: str | None
    reason: str | None
    excerpt: str  # HTML-escaped


@dataclass
class RuleRemoval:
    step: str
    rule: str
    docs: int = 0
    bytes: int = 0
    examples: list[Example] = field(default_factory=list)


def count_removals(paths: list[Path]) -> dict[tuple[str, str], RuleRemoval]:
    """Documents and UTF-8 bytes removed per (step, rule), from the step/rule/length columns only."""
    out: dict[tuple[str, str], RuleRemoval] = {}
    for _, batch, present in stream(paths, ["step", "rule", "text"]):
        if not {"step", "rule"} <= present:
            continue
        steps, rules = batch.column("step").to_pylist(), batch.column("rule").to_pylist()
        sizes = (
            pc.fill_null(pc.binary_length(pc.cast(batch.column("text"), pa.binary())), 0).to_pylist()
            if "text" in present
            else [0] * batch.num_rows
        )
        for s, r, n in zip(steps, rules, sizes):
            slot = out.setdefault((s, r), RuleRemoval(s, r))
            slot.docs += 1
            slot.bytes += n
    return out


def attach_examples(paths: list[Path], wanted: dict[tuple[str, str], RuleRemoval], per_rule: int) -> None:
    """The first `per_rule` rejected documents of each wanted (step, rule); stops reading once all have them."""
    cols = ["step", "rule", "value", "reason", "id", "bucket", "text"]
    for _, batch, present in stream(paths, cols):
        if all(len(r.examples) >= per_rule for r in wanted.values()):
            return
        if not {"step", "rule"} <= present:
            continue
        keys = list(zip(batch.column("step").to_pylist(), batch.column("rule").to_pylist()))
        rows = [i for i, k in enumerate(keys) if k in wanted and len(wanted[k].examples) < per_rule]
        if not rows:
            continue
        take = batch.take(pa.array(rows, pa.int64()))
        get = {c: (take.column(c) if c in present else pa.nulls(len(rows), pa.string())) for c in cols}
        texts = pc.utf8_slice_codeunits(get["text"], 0, 4 * EXCERPT_CHARS).to_pylist()  # cut before Python sees it
        for i, row in enumerate(rows):
            slot = wanted[keys[row]]
            if len(slot.examples) < per_rule:
                slot.examples.append(
                    Example(
                        get["id"][i].as_py() or "",
                        get["bucket"][i].as_py() or "",
                        get["value"][i].as_py(),
                        get["reason"][i].as_py(),
                        excerpt(texts[i]),
                    )
                )


def top_removals(run: RunDir, top: int = TOP_RULES, per_rule: int = EXAMPLES_PER_RULE) -> tuple[list[RuleRemoval], int]:
    """(step, rule) pairs ranked by documents then bytes removed, each with a few examples; and
    the number of removed documents in all."""
    paths = rejected_parts(run)
    counts = count_removals(paths)
    ranked = sorted(counts.values(), key=lambda r: (-r.docs, -r.bytes, r.step, r.rule))[:top]
    attach_examples(paths, {(r.step, r.rule): r for r in ranked}, per_rule)
    return ranked, sum(r.docs for r in counts.values())


def section_removals(run: RunDir) -> str:
    out = ["<h3>Top removal reasons</h3>"]
    ranked, total_docs = top_removals(run)
    if not ranked:
        return "".join(out) + _placeholder("No rejected documents recorded (curated/_rejected/ is empty or missing).")
    out.append(
        f"<p>{total_docs:,} documents removed in all; the {len(ranked)} largest (step, rule) "
        "pairs by documents removed, each with its first rejected documents (bytes: the text as the step "
        "saw it).</p>"
    )
    out.append(
        _table(
            ["step", "rule", "docs removed", "bytes removed", "share of removed docs"],
            [[r.step, r.rule, r.docs, r.bytes, _pct(r.docs, total_docs)] for r in ranked],
        )
    )
    for r in ranked:
        items = "".join(
            f"<li><span class=muted>{html.escape(e.bucket)} · {html.escape(e.doc_id)} · value "
            f"{html.escape(str(e.value))}{' · ' + html.escape(e.reason) if e.reason else ''}</span>"
            f"<pre>{e.excerpt}</pre></li>"
            for e in r.examples
        )
        out.append(
            f"<details><summary>{html.escape(r.step)} / {html.escape(r.rule)}: {r.docs:,} documents</summary>"
            f"<ul>{items}</ul></details>"
        )
    return "".join(out)


# --------------------------------------------------------------------------- 3. duplicate clusters
def size_bin(size: int) -> int:
    """Log2 bin of a cluster size >= 2: 0 -> 2, 1 -> 3–4, 2 -> 5–8, 3 -> 9–16, ..."""
    return max(0, math.ceil(math.log2(size)) - 1)


def bin_label(k: int) -> str:
    lo, hi = 2**k + 1, 2 ** (k + 1)
    return str(hi) if k == 0 else f"{lo}–{hi}"


@dataclass
class Cluster:
    doc_id: str
    bucket: str
    size: int
    path: Path
    text: str = ""  # HTML-escaped excerpt, filled for the largest only


def kept_clusters(parts: dict[str, list[Path]]) -> list[Cluster]:
    """Kept documents that head a duplicate cluster (dup_cluster_size >= 2), from id/size columns."""
    out = []
    for bucket, paths in parts.items():
        for path, batch, present in stream(paths, ["id", "dup_cluster_size"]):
            if present != {"id", "dup_cluster_size"}:
                continue
            for i, n in zip(batch.column("id").to_pylist(), batch.column("dup_cluster_size").to_pylist()):
                if n is not None and n >= 2:
                    out.append(Cluster(i, bucket, int(n), path))
    return out


def removed_copies(run: RunDir) -> dict[str, dict[str, int]]:
    """Per cluster head id: how many copies each dedup rule removed."""
    out: dict[str, dict[str, int]] = {}
    for _, batch, present in stream(rejected_parts(run), ["rule", "dup_cluster"]):
        if present != {"rule", "dup_cluster"}:
            continue
        for rule, head in zip(batch.column("rule").to_pylist(), batch.column("dup_cluster").to_pylist()):
            if head is not None:
                slot = out.setdefault(head, {})
                slot[rule] = slot.get(rule, 0) + 1
    return out


def _fill_texts(clusters: list[Cluster]) -> None:
    for c in clusters:
        table = pq.read_table(c.path, columns=["id", "text"], filters=[("id", "==", c.doc_id)])
        if table.num_rows:
            c.text = excerpt(pc.utf8_slice_codeunits(table.column("text"), 0, 4 * EXCERPT_CHARS)[0].as_py())


def _log_bar_svg(labels: list[str], counts: list[int], title: str, xlabel: str) -> str:
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    ax.bar(range(len(labels)), counts, color="#4c72b0")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("clusters (log scale)")
    ax.grid(alpha=0.3, axis="y")
    return _svg(fig)


def section_clusters(run: RunDir, parts: dict[str, list[Path]]) -> str:
    out = ["<h3>Duplicate clusters</h3>"]
    clusters = kept_clusters(parts)
    if not clusters:
        return "".join(out) + _placeholder(
            "No duplicate clusters: no kept document had copies removed (or exact/near-duplicate removal did not run)."
        )
    bins: dict[int, int] = {}
    for c in clusters:
        bins[size_bin(c.size)] = bins.get(size_bin(c.size), 0) + 1
    ks = list(range(max(bins) + 1))
    labels, counts = [bin_label(k) for k in ks], [bins.get(k, 0) for k in ks]
    copies = sum(c.size - 1 for c in clusters)
    out.append(
        f"<p>{len(clusters):,} kept documents had copies removed ({copies:,} removed in all); a cluster is "
        "the kept document and its exact (same normalized text) and near (MinHash) duplicates, sizes "
        "binned by powers of two.</p>"
    )
    out.append(_table(["cluster size", *labels], [["clusters", *counts]]))
    out.append(_log_bar_svg(labels, counts, "Duplicate-cluster sizes", "documents in the cluster"))
    largest = sorted(clusters, key=lambda c: (-c.size, c.doc_id))[:LARGEST_CLUSTERS]
    _fill_texts(largest)
    removed = removed_copies(run)
    rows = [
        [
            c.size,
            c.bucket,
            c.doc_id,
            ", ".join(f"{r} {n:,}" for r, n in sorted(removed.get(c.doc_id, {}).items())) or "—",
            Raw(f"<span class=muted>{c.text}</span>"),
        ]
        for c in largest
    ]
    out.append(
        "<p>Largest clusters:</p>"
        + _table(["size", "bucket", "kept document", "copies removed by rule", "kept text (start)"], rows)
    )
    return "".join(out)


# --------------------------------------------------------------------------- 4. distributions
def read_signals(parts: dict[str, list[Path]]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, np.ndarray]]]:
    """Language counts per bucket, and per signal the non-null values per bucket."""
    languages: dict[str, dict[str, int]] = {}
    values: dict[str, dict[str, list[np.ndarray]]] = {}
    for bucket, paths in parts.items():
        for _, batch, present in stream(paths, ["language", *(s for s, _ in SIGNALS)]):
            if "language" in present:
                counts = languages.setdefault(bucket, {})
                for lang in batch.column("language").to_pylist():
                    key = lang or NO_LANGUAGE
                    counts[key] = counts.get(key, 0) + 1
            for sig, _ in SIGNALS:
                if sig in present:
                    arr = _leaf(batch, sig).drop_null().to_numpy(zero_copy_only=False).astype(float)
                    values.setdefault(sig, {}).setdefault(bucket, []).append(arr[np.isfinite(arr)])
    merged = {sig: {b: np.concatenate(v) for b, v in per.items()} for sig, per in values.items()}
    return languages, {sig: per for sig, per in merged.items() if any(a.size for a in per.values())}


def _histogram_svg(per_bucket: dict[str, np.ndarray], *, title: str, xlabel: str) -> str:
    """Stacked histogram over buckets (shared bins); log-spaced bins for values spanning decades."""
    data = {b: a for b, a in per_bucket.items() if a.size}
    allv = np.concatenate(list(data.values()))
    lo, hi = float(allv.min()), float(allv.max())
    logx = lo > 0 and hi / lo > 100
    bins = np.geomspace(lo, hi, 31) if logx else np.linspace(lo, hi if hi > lo else lo + 1, 31)
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    ax.hist(list(data.values()), bins=bins.tolist(), stacked=True, label=list(data), histtype="barstacked")
    if logx:
        ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("kept documents")
    ax.grid(alpha=0.3, axis="y")
    if len(data) > 1:
        ax.legend(fontsize=8)
    return _svg(fig)


def section_distributions(parts: dict[str, list[Path]]) -> str:
    out = ["<h3>Language and quality signals of the kept documents</h3>"]
    if not parts:
        return "".join(out) + _placeholder("No curated documents yet.")
    languages, values = read_signals(parts)
    if languages:
        langs = sorted(
            {l for c in languages.values() for l in c}, key=lambda l: (-sum(c.get(l, 0) for c in languages.values()), l)
        )
        buckets = sorted(languages)
        out.append(
            _table(
                ["language", *buckets, "all"],
                [[l, *(languages[b].get(l, 0) for b in buckets), sum(languages[b].get(l, 0) for b in buckets)] for l in langs]
                + [["all", *(sum(languages[b].values()) for b in buckets), sum(sum(c.values()) for c in languages.values())]],
            )
        )
        shown = langs[:12]
        out.append(
            bar_chart(
                shown,
                {b: [languages[b].get(l, 0) for l in shown] for b in buckets},
                title="Kept documents by language",
                ylabel="documents",
            )
        )
    if not values:
        return "".join(out) + _placeholder("The curated documents carry no language score or quality signals.")
    rows = []
    for sig, label in SIGNALS:
        for b, a in sorted(values.get(sig, {}).items()):
            q = np.percentile(a, [10, 50, 90]) if a.size else [float("nan")] * 3
            rows.append(
                [label, b, int(a.size), float(q[0]), float(q[1]), float(q[2]), float(a.mean()) if a.size else float("nan")]
            )
    out.append(_table(["signal", "bucket", "docs with a value", "p10", "median", "p90", "mean"], rows))
    for sig, label in SIGNALS:
        if sig in values:
            out.append(_histogram_svg(values[sig], title=f"{label} ({sig})", xlabel=label))
    return "".join(out)


# --------------------------------------------------------------------------- 5. effective tokens
def last_plan(events: list[dict]) -> dict | None:
    starts = [e for e in events if e.get("kind") == "train_start" and e.get("plan")]
    return starts[-1]["plan"] if starts else None


def _factor(v: float | None) -> float:
    return 1.0 if v is None else float(v)


def effective_rows(funnel: dict | None, plan: dict | None, meta: dict | None) -> tuple[str, list[list[Any]]]:
    """Per bucket: D_nominal, the four D_eff factors, their product and D_eff.

    D_nominal is the plan's tokens per bucket when training has planned, else one pass over the
    token store's train split; factors not measured count as 1 and show as "—".
    """
    d_eff = (funnel or {}).get("d_eff") or {}
    per = d_eff.get("buckets") or {}
    if plan:
        nominal = {b: float(u["tokens"]) for b, u in plan["buckets"].items()}
        r_pad, source = plan.get("r_pad"), "the mixture plan's tokens per bucket"
    elif meta:
        nominal = {b: float(d["train"]["tokens"]) for b, d in meta["buckets"].items()}
        r_pad, source = None, "one pass over the token store's train split (no training plan yet)"
    else:
        return "", []
    rows = []
    for b in sorted(nominal):
        f = per.get(b, {})
        rp, rq, rd = f.get("rho_parse"), f.get("rho_quality"), f.get("r_dup")
        coef = (1 - (rd or 0.0)) * (1 - (r_pad or 0.0)) * _factor(rp) * _factor(rq)
        rows.append(
            [b, nominal[b], rp, rq, rd, r_pad, coef, nominal[b] * coef, plan["buckets"][b]["effective_tokens"] if plan else None]
        )
    return source, rows


def section_effective(funnel: dict | None, plan: dict | None, meta: dict | None) -> str:
    out = [
        "<h3>Effective tokens</h3>",
        "<p><i>D</i><sub>eff</sub> ≈ <i>D</i><sub>nominal</sub> (1 − r<sub>dup</sub>)(1 − r<sub>pad</sub>) "
        "ρ<sub>parse</sub> ρ<sub>quality</sub>: r<sub>dup</sub> = share of bytes the dedup steps removed, "
        "r<sub>pad</sub> = the packer's padding / lost-target share, ρ<sub>parse</sub> = share of read documents "
        "that parse, ρ<sub>quality</sub> = share of bytes the quality steps kept (bytes stand in for tokens; "
        "measured by the funnel, per bucket).</p>",
    ]
    source, rows = effective_rows(funnel, plan, meta)
    if not rows:
        return "".join(out) + _placeholder("Needs curated/_funnel.json and a token store or a training plan.")
    tot_nom = sum(r[1] for r in rows)
    tot_eff = sum(r[7] for r in rows)
    header = ["bucket", "D_nominal (tokens)", "ρ_parse", "ρ_quality", "r_dup", "r_pad", "coefficient", "D_eff (tokens)"]
    if plan:
        header.append("repetition-discounted tokens (plan)")
        rows.append(
            [
                "all",
                tot_nom,
                None,
                None,
                None,
                plan.get("r_pad"),
                tot_eff / tot_nom if tot_nom else None,
                tot_eff,
                plan.get("effective_tokens"),
            ]
        )
    else:
        rows = [r[:-1] for r in rows]
        rows.append(["all", tot_nom, None, None, None, None, tot_eff / tot_nom if tot_nom else None, tot_eff])
    out.append(
        f"<p>D<sub>nominal</sub>: {html.escape(source)}. The dedup, parse and quality factors are what "
        "curation removed from the sources, so D<sub>eff</sub> reads as what this budget would be worth drawn "
        "from the uncurated sources; the curated tokens the run trains on have already paid those losses, "
        "and only r<sub>pad</sub> (and repetition) still applies to them.</p>"
    )
    out.append(_table(header, rows))
    if plan:
        out.append(
            f"<p class=muted>The last column is the plan's own discount for repeated epochs "
            f"({html.escape(str(plan.get('effective_rule', '')))}), independent of the D_eff factors.</p>"
        )
    return "".join(out)


# --------------------------------------------------------------------------- 6. tokenizer audit
def token_store_table(meta: dict | None) -> str:
    """Documents and tokens per bucket and split of the token store (tokens/_meta.json)."""
    if not meta:
        return ""
    rows = [
        [
            b,
            d["train"]["docs"],
            d["train"]["tokens"],
            d["val"]["docs"],
            d["val"]["tokens"],
            d["train"]["bytes"] / d["train"]["tokens"] if d["train"].get("tokens") and "bytes" in d["train"] else None,
        ]
        for b, d in sorted(meta["buckets"].items())
    ]
    return "<p>Token store:</p>" + _table(
        ["bucket", "train docs", "train tokens", "held-out docs", "held-out tokens", "train bytes/token"], rows
    )


def section_tokenizer(run: RunDir, meta: dict | None = None) -> str:
    out = ["<h3>Tokenizer audit</h3>"]
    audit = read_json(run.sub("tokenizer", "audit.json"))
    if not audit:
        return "".join(out) + _placeholder("No tokenizer/audit.json yet.") + token_store_table(meta)
    out.append(
        f"<p>Byte-level BPE, vocabulary {audit['vocab_size']:,}, trained on {audit['sample_bytes']:,} bytes "
        "of curated training text; audited on held-out documents it never saw.</p>"
    )
    buckets = audit.get("buckets") or {}
    out.append(_tokenizer_buckets(buckets))
    fast = audit.get("fast_encoder")
    if fast:
        ok = fast.get("identical")
        out.append(
            f"<p>Fast encoder ({html.escape(str(fast.get('encoder')))}): "
            f"<span class={'good' if ok else 'bad'}>{'identical' if ok else 'differs'}</span> to the reference "
            f"on {fast.get('docs', 0):,} documents ({fast.get('mismatched_docs', 0):,} mismatched).</p>"
        )
    terms = audit.get("key_terms") or {}
    if isinstance(terms, dict) and terms:
        out.append(_key_terms_table(terms))
    out.append(token_store_table(meta))
    return "".join(out)


def _tokenizer_buckets(buckets: dict) -> str:
    """The held-out audit per bucket: a table, and a bytes-per-token chart when there are buckets."""
    out = [
        _table(
            [
                "bucket",
                "held-out docs",
                "bytes",
                "tokens",
                "bytes/token",
                "chars/token",
                "tokens/word",
                "byte-fallback rate",
                "partial-char rate",
                "exact round-trip",
            ],
            [
                [
                    b,
                    a.get("docs"),
                    a.get("bytes"),
                    a.get("tokens"),
                    a.get("bytes_per_token"),
                    a.get("chars_per_token"),
                    a.get("tokens_per_word"),
                    a.get("byte_fallback_rate"),
                    a.get("partial_char_rate"),
                    a.get("roundtrip_exact"),
                ]
                for b, a in buckets.items()
            ],
        )
    ]
    if buckets:
        names = list(buckets)
        out.append(
            bar_chart(
                names,
                {"bytes/token": [buckets[b].get("bytes_per_token") or 0 for b in names]},
                title="Compression per bucket (held-out)",
                ylabel="bytes per token",
            )
        )
    return "".join(out)


def _key_terms_table(terms: dict) -> str:
    """How each key term is split into tokens, at a line start and after a space."""

    def split(v: Any, key: str) -> str:
        toks = v.get(key) if isinstance(v, dict) else (v if key == "tokens" else None)
        # a leading space is what distinguishes " word" from "word": make it visible
        return " · ".join(str(t).replace(" ", "␣") for t in toks) if toks else "—"

    return "<p>How key terms are split (at a line start and after a space):</p>" + _table(
        ["term", "pieces", "tokens", "after a space", "tokens"],
        [
            [
                t,
                split(v, "tokens"),
                len(v.get("tokens", []) if isinstance(v, dict) else v),
                split(v, "spaced"),
                len(v.get("spaced", [])) if isinstance(v, dict) else None,
            ]
            for t, v in terms.items()
        ],
    )


# --------------------------------------------------------------------------- 7. planned vs delivered
@dataclass
class TrainedSteps:
    steps: int  # distinct optimizer steps whose batch was drawn (1..steps)
    replayed: int  # step records beyond the distinct ones (after rollbacks / resumes)
    skipped: int  # steps whose update was skipped by the guard


def trained_steps(events: list[dict], plan: dict) -> TrainedSteps:
    """Steps of the training that logged `plan`: from its last fresh start (step 0) on."""
    fp = plan.get("fingerprint")
    starts = [
        i for i, e in enumerate(events) if e.get("kind") == "train_start" and e.get("plan") and e["plan"].get("fingerprint") == fp
    ]
    fresh = [i for i in starts if not int(events[i].get("step") or 0)]
    begin = fresh[-1] if fresh else (starts[0] if starts else 0)
    seen: set[int] = set()
    records = skipped = 0
    top = 0
    for e in events[begin:]:
        if e.get("kind") == "train_step":
            records += 1
            seen.add(int(e["step"]))
            skipped += e.get("action") == "skip"
        elif e.get("kind") == "train_done":
            top = max(top, int(e.get("step") or 0))
    top = min(max([top, *seen]), int(plan.get("max_steps") or top))
    return TrainedSteps(top, max(0, records - len(seen)), skipped)


def phase_prefix_samples(ph: dict, n: int) -> tuple[dict[str, int], bool]:
    """Samples of each bucket among the first n of a phase, and whether that is exact.

    Exact when the interleave rebuilt from the plan's weights reproduces the phase's logged
    per-bucket samples; otherwise (a plan written by another loader version) pro rata.
    """
    from tokenmill.mixture.schedule import Interleave

    il = Interleave(ph["weights"])
    full = {b: il.count_before(k, ph["samples"]) for k, b in enumerate(il.buckets)}
    if full == ph["bucket_samples"]:
        return {b: il.count_before(k, n) for k, b in enumerate(il.buckets)}, True
    return {b: round(s * n / max(ph["samples"], 1)) for b, s in ph["bucket_samples"].items()}, False


def delivered(plan: dict, steps: int) -> tuple[dict[str, dict[str, float]], bool]:
    """Samples, tokens and epochs of each bucket in optimizer steps 1..steps.

    The loader is stateless: a phase's samples are split among buckets by a closed-form interleave
    of the phase's (quantised) weights, so the samples of any step prefix are computed exactly,
    not estimated. Tokens are samples × the phase's sequence length (packed); padded rows hold
    documents of varying length, so tokens are only known for whole phases there.
    """
    rows_per_step = plan.get("world_size", 1) * plan.get("grad_accum", 1)
    packed = plan.get("packing") == "packed"
    out = {b: {"samples": 0, "tokens": 0.0} for b in plan["buckets"]}
    exact = True
    for ph in plan["phases"]:
        done = min(steps, ph["end_step"]) - ph["start_step"] + 1
        if done <= 0:
            continue
        if done >= ph["steps"]:
            got = dict(ph["bucket_samples"])
        else:
            got, ok = phase_prefix_samples(ph, done * rows_per_step * ph["rows_per_micro_batch"])
            exact &= ok
        for b, s in got.items():
            out[b]["samples"] += s
            out[b]["tokens"] += s * ph["seq_len"] if packed else float("nan")
    for b, d in out.items():
        u = plan["buckets"][b]
        if not packed and steps >= plan.get("max_steps", 0):
            d["tokens"] = float(u["tokens"])  # the whole plan was served
        d["epochs"] = d["tokens"] / u["available_tokens"] if packed else d["samples"] / max(u.get("docs", 0), 1)
    return out, exact


def section_planned_vs_delivered(events: list[dict]) -> str:
    out = ["<h3>Planned versus delivered tokens</h3>"]
    plan = last_plan(events)
    if not plan:
        return "".join(out) + _placeholder("No training plan yet (no train_start event).")
    done = trained_steps(events, plan)
    got, exact = delivered(plan, done.steps)
    rows = _planned_delivered_rows(plan, got)
    out.append(
        f"<p>Planned: the mixture plan of the last training start ({plan.get('max_steps', 0):,} steps, "
        f"{plan.get('token_budget', 0):,} tokens). Delivered: the samples of the {done.steps:,} steps trained, "
        "recomputed from the loader's closed-form data order (it is stateless: a step's batch is a function "
        "of the step), not counted at run time; a step replayed after a rollback or resume counts once."
    )
    if not exact:
        out.append(
            " <span class=bad>The plan's weights do not reproduce its per-phase samples, so the last, "
            "partial phase is split pro rata (approximate).</span>"
        )
    if done.replayed or done.skipped:
        out.append(
            f" {done.replayed:,} step records were replays and {done.skipped:,} updates were skipped by the "
            "guard (their tokens were read but not learned from)."
        )
    out.append("</p>")
    out.append(
        _table(
            [
                "bucket",
                "available tokens",
                "planned tokens",
                "planned epochs",
                "planned share",
                "delivered samples",
                "delivered tokens",
                "delivered epochs",
                "delivered of planned",
            ],
            rows,
        )
    )
    names = sorted(plan["buckets"])
    out.append(
        bar_chart(
            names,
            {"planned": [plan["buckets"][b]["tokens"] for b in names], "delivered": [got[b]["tokens"] for b in names]},
            title="Tokens per bucket: planned vs delivered",
            ylabel="tokens",
        )
    )
    for w in plan.get("warnings", []):
        out.append(f"<p class=bad>{html.escape(str(w))}</p>")
    return "".join(out)


def _planned_delivered_rows(plan: dict, got: dict) -> list[list[Any]]:
    """One row per bucket (planned tokens and epochs beside the delivered ones), then the total."""
    rows = []
    for b, u in sorted(plan["buckets"].items()):
        d = got[b]
        warn = u.get("warn")
        rows.append(
            [
                b,
                u["available_tokens"],
                u["tokens"],
                Raw(f"<span class={'bad' if warn else ''}>{u['epochs']:.3g}</span>"),
                u.get("share"),
                d["samples"],
                d["tokens"],
                d["epochs"],
                _pct(d["tokens"], u["tokens"]),
            ]
        )
    tot_plan = sum(u["tokens"] for u in plan["buckets"].values())
    tot_got = sum(d["tokens"] for d in got.values())
    rows.append(
        [
            "all",
            sum(u["available_tokens"] for u in plan["buckets"].values()),
            tot_plan,
            None,
            1.0,
            sum(d["samples"] for d in got.values()),
            tot_got,
            None,
            _pct(tot_got, tot_plan),
        ]
    )
    return rows


# --------------------------------------------------------------------------- the section
def section_data(run: RunDir, events: list[dict]) -> str:
    """The whole Data section (HTML); every part renders a placeholder when its files are missing."""
    funnel = read_json(run.sub("curated", "_funnel.json"))
    meta = read_json(run.sub("tokens", "_meta.json"))
    parts = curated_parts(run)
    return "".join(
        [
            "<h2>Data</h2>",
            section_funnel(funnel),
            section_removals(run),
            section_clusters(run, parts),
            section_distributions(parts),
            section_effective(funnel, last_plan(events), meta),
            section_tokenizer(run, meta),
            license_tokens_table(meta),
            section_planned_vs_delivered(events),
        ]
    )
