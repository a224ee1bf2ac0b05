"""The report's Evaluation section: held-out bits-per-byte by slice, probes, tasks, contamination
(n-gram and semantic), memorization audits, canaries and the long-context measures."""

from __future__ import annotations

import html
import math

from tokenmill.eval.table import bpb_text, small_sample_notes
from tokenmill.report.charts import line_chart
from tokenmill.report.page import table
from tokenmill.tokens.heldout_size import MIN_HELDOUT_DOCS, MIN_HELDOUT_TOKENS, TARGET_HALF_WIDTH
from tokenmill.report.trace_section import canary_traces, memorization_traces
from tokenmill.report.timeline import task_lines


def _probes(evals: list[dict]) -> str:
    """Probe sets: the latest scores and, over several evaluations, their bits-per-byte curves."""
    names = sorted({n for e in evals for n in (e.get("probes") or {})})
    if not names:
        return ""
    last = {n: m for e in evals for n, m in (e.get("probes") or {}).items()}  # the newest value of each
    out = [
        "<h3>Probes</h3><p>Small fixed text sets chosen for this run, scored at every evaluation.</p>",
        table(
            ["probe set", "docs", "tokens", "loss", "bpb ± 95%"],
            [[n, last[n]["docs"], last[n]["tokens"], last[n]["loss"], bpb_text(last[n])] for n in names],
        ),
    ]
    series = {
        n: (
            [e["step"] for e in evals if n in (e.get("probes") or {})],
            [e["probes"][n]["bpb"] for e in evals if n in (e.get("probes") or {})],
        )
        for n in names
    }
    if any(len(xs) > 1 for xs, _ in series.values()):
        out.append(line_chart(series, title="Probe bits-per-byte", xlabel="step", ylabel="bpb", markers=True))
    return "".join(out)


def _slices_over_steps(evals: list[dict]) -> str:
    """Bits-per-byte of every bucket at every evaluation (rows: steps), the table behind the curve."""
    buckets = list(evals[-1]["buckets"])
    rows = [[e["step"], *(bpb_text(e["buckets"][b]) if b in e["buckets"] else "—" for b in buckets)] for e in evals]
    return (
        "<details><summary>bits-per-byte by bucket at every evaluation</summary>" + table(["step", *buckets], rows) + "</details>"
    )


def _task_curves(evals: list[dict], watched: list[dict]) -> str:
    """Task accuracy over the evaluations that scored tasks (eval.tasks_in_training, and the
    watcher's checkpoints marked "(watcher)"), beside the loss."""
    series = task_lines(evals, watched)
    if not any(len(xs) > 1 for xs, _ in series.values()):
        return ""
    chart = line_chart(series, title="Task accuracy", xlabel="step", ylabel="accuracy", markers=True)
    # Lines with the same values at the same steps are drawn on top of each other: only the last
    # is seen, and a reader looks for the others in vain. Say which ones share a line.
    shared: dict[tuple, list[str]] = {}
    for name, (xs, ys) in series.items():
        shared.setdefault((tuple(xs), tuple(ys)), []).append(name)
    notes = []
    for (_, ys), names in shared.items():
        if len(names) > 1:
            value = f" ({ys[0]:.3g})" if len(set(ys)) == 1 else ""
            notes.append(f"{', '.join(names[:-1])} and {names[-1]} score the same at every evaluation{value}: one line.")
    return chart + (f"<p class=muted>{html.escape(' '.join(notes))}</p>" if notes else "")


def _watched(watched: list[dict]) -> str:
    """The checkpoints `tokenmill eval --watch` scored in its own process: bpb per bucket, task accuracy."""
    if not watched:
        return ""
    buckets = sorted({b for w in watched for b in w["buckets"]})
    tasks = sorted({t["name"] for w in watched for t in w.get("tasks") or []})
    rows = []
    for w in watched:
        acc = {t["name"]: t.get("acc") for t in w.get("tasks") or []}
        bpb = [bpb_text(w["buckets"][b]) if b in w["buckets"] else "—" for b in buckets]
        rows.append([w["step"], *bpb, *(acc.get(n, "—") for n in tasks), html.escape(str(w.get("device", "")))])
    return (
        "<h3>Scored by the watcher</h3><p>Checkpoints the expensive tier (eval.tiers) scored in a separate "
        "process, <code>tokenmill eval --watch RUN</code>, while the trainer went on; the full audits of each "
        "are in eval/watch/step_&lt;N&gt;.json.</p>"
        + table(["step", *(f"{b} bpb" for b in buckets), *(f"{n} acc" for n in tasks), "device"], rows)
    )


def _semantic(contamination: dict) -> str:
    """The embedding back-check per task, with the best matches it flagged."""
    sem = {name: c["semantic"] for name, c in contamination.items() if c.get("semantic")}
    if not sem:
        return ""
    rows = [
        [name, s["items"], f'<span class="bad">{s["flagged"]}</span>' if s["flagged"] else 0, s.get("max_score"), s["threshold"]]
        for name, s in sem.items()
    ]
    out = [
        "<h3>Semantic contamination</h3><p>Each item against every window of the training documents, by the "
        "cosine of SIF embeddings tokenmill trained on the training text (finds paraphrases the n-gram "
        "check misses).</p>",
        table(["task", "items", "flagged", "best similarity", "threshold"], rows),
    ]
    for name, s in sem.items():
        for ex in s.get("examples", []):
            out.append(
                f"<p class=muted>{html.escape(name)} · {ex['score']:.3f} · {html.escape(ex['doc_id'])}</p>"
                f"<pre><b>{html.escape(ex['item'])}</b>\n{html.escape(ex['match'])}</pre>"
            )
    return "".join(out)


# A task's metric besides acc, by the names the scorers write, with the words the table shows.
SECOND_METRICS = (
    ("acc_norm", "acc_norm"),
    ("acc_bytes", "acc_bytes"),
    ("mean_logprob", "mean log-prob"),
    ("exact_match", "exact match"),
)


def _second_metric(t: dict) -> str:
    """The task's metric besides acc, named ("acc_norm 0.5", "mean log-prob -9.215", "pass@1 0"):
    never a bare nan, as a generation task has no acc_norm."""
    names = [*SECOND_METRICS, *((k, k) for k in sorted(t) if k.startswith("pass@"))]
    for key, label in names:
        v = t.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return f"{label} {v:.4g}"
    return "—"


def _eval_audits(last: dict) -> str:
    """Tasks, contamination and memorization of an evaluation record, when it has them."""
    out: list[str] = []
    contamination = last.get("contamination") or {}
    tasks = last.get("tasks") or []
    if tasks:
        rows = []
        for t in tasks:
            c = contamination.get(t["name"], {})
            flag = (
                f'<span class="bad">{c["share"]:.2%} flagged</span>'
                if c.get("flagged")
                else (f"{c['share']:.2%}" if "share" in c else "—")
            )
            rows.append(
                [
                    t["name"],
                    t.get("format", ""),
                    t.get("shots", 0),
                    t.get("n", ""),
                    t.get("acc", "—"),
                    _second_metric(t),
                    flag,
                ]
            )
        out += [
            "<h3>Tasks</h3><p>Scored by log-likelihood of each continuation (multiple choice), greedy "
            "last-word match (cloze), or the greedy answer's exact match and, for code, pass@k of the "
            "completions run in the sandbox (generation), from local files, with lm-evaluation-harness's "
            "metrics: acc_norm divides each choice's log-likelihood by its length in characters (acc_bytes, "
            "in eval/STEP.json: in UTF-8 bytes); every item's log-likelihoods are in eval/STEP.json. "
            "Contamination = share of the set's token n-grams found in the training tokens.</p>",
            table(["task", "format", "shots", "items", "acc", "other metric", "contamination"], rows),
        ]
    out.append(_semantic(contamination))
    other = {k: v for k, v in contamination.items() if k not in {t["name"] for t in tasks}}
    if other:
        rows = [
            [
                name,
                c.get("ngrams", ""),
                c.get("found", ""),
                f'<span class="bad">{c["share"]:.2%} flagged</span>' if c.get("flagged") else f"{c['share']:.2%}",
            ]
            for name, c in other.items()
        ]
        out += ["<h3>Contamination</h3>", table(["eval set", "n-grams", "found in training", "share"], rows)]
    mem = last.get("memorization") or {}
    if mem:
        rows = []
        for scope, split in mem.items():
            if isinstance(split, dict) and "train" in split and "heldout" in split:
                tr, ho = split["train"], split["heldout"]
                vals = [tr.get("exact"), ho.get("exact"), tr.get("token_match"), ho.get("token_match")]
                rows.append([scope, tr.get("n", ""), *("—" if v is None else v for v in vals)])
        if rows:
            out += [
                "<h3>Memorization</h3><p>Greedy continuations of document prefixes: exact-match rate on "
                "training documents vs held-out ones (the gap is what the model memorized).</p>",
                table(
                    ["scope", "docs", "exact (train)", "exact (held-out)", "token match (train)", "token match (held-out)"], rows
                ),
            ]
        out.append(memorization_traces(mem))
    out.append(_canaries(last.get("canaries") or {}))
    out.append(_long_context(last.get("long_context") or {}))
    return "".join(out)


def _long_context(lc: dict) -> str:
    """Loss by position and passkey accuracy by distance at the extended length (eval.long_context)."""
    if not lc.get("positions"):
        return ""
    pos, trained = lc["positions"], lc.get("trained_seq_len")
    rope = lc.get("rope") or {}
    rows = [
        [
            f"{b['from']}–{b['to']}" + (" (beyond the trained length)" if trained and b["from"] >= trained else ""),
            b["tokens"],
            b["loss"],
            b["bpb"],
        ]
        for b in pos["buckets"]
    ]
    out = [
        f"<h3>Long context</h3><p>{pos['docs']} held-out documents of at least {pos['seq_len']} tokens, "
        f"each scored from its start; trained at {trained} tokens; RoPE theta {rope.get('rope_theta')}, "
        f"scaling {html.escape(str(rope.get('rope_scaling')))} × {rope.get('rope_scaling_factor')}. A model "
        "that uses the longer context has lower bpb at later positions.</p>",
        table(["positions", "tokens", "loss", "bpb"], rows),
    ]
    pk = lc.get("passkey")
    if pk:
        out += [
            f"<p>Passkey retrieval at {pk['seq_len']} tokens: <b>{pk['accuracy']:.0%}</b> of {pk['trials']} "
            "trials (every key token the top prediction), by distance from the key to the question:</p>",
            table(
                ["distance (tokens)", "trials", "accuracy", "key log-prob"],
                [[f"{b['from']}–{b['to']}", b["trials"], b["accuracy"], b["logprob"]] for b in pk["by_distance"]],
            ),
        ]
    return "".join(out)


def _canaries(c: dict) -> str:
    """Canary exposure per repetition count (Carlini et al. 2019): how far above chance the model
    ranks a random secret it saw k times."""
    if not c.get("by_count"):
        return ""
    rows = [
        [k, v["canaries"], v["mean_exposure_empirical"], v["mean_exposure_extrapolated"], v["mean_log_ppl"]]
        for k, v in sorted(c["by_count"].items(), key=lambda kv: int(kv[0]))
    ]
    return (
        "<h3>Canaries</h3><p>Random secrets inserted during curation k times each; exposure = log2|R| − "
        f"log2 rank among {c['candidates']} random candidates (empirical, at most log2 of that + 1) and from a normal "
        f"fit to the candidates' log-perplexity (extrapolated); the maximum is {c['max_exposure']:.1f} bits. "
        "Exposure that grows with k is memorization.</p>"
        + table(
            ["repetitions k", "canaries", "exposure (empirical, bits)", "exposure (extrapolated, bits)", "log-perplexity (bits)"],
            rows,
        )
        + canary_traces(c.get("canaries") or [])
    )


def _small_samples(last: dict) -> str:
    """A warning under the table for each bucket whose held-out sample is too small to read its
    bits-per-byte from (tokens/heldout_size.py), with the setting that fixes it."""
    notes = small_sample_notes(last)
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (
        '<p class="bad">Too few held-out documents to trust these bits-per-byte: each needs at least '
        f"{MIN_HELDOUT_DOCS} documents and {MIN_HELDOUT_TOKENS:,} tokens, and an interval within "
        f"±{TARGET_HALF_WIDTH:.0%}.</p><ul>{items}</ul>"
    )


def section_eval(evals: list[dict], watched: list[dict] | None = None) -> str:
    if not evals:
        return "<h2>Model</h2><p class=muted>No evaluation yet.</p>" + _watched(watched or [])
    last = evals[-1]
    rows = []
    for bucket, m in last["buckets"].items():
        ratio = m["bpb"] / m["unigram_bpb"] if m.get("unigram_bpb") else float("nan")
        verdict = f'<span class="{"good" if ratio < 1 else "bad"}">{ratio:.3f}</span>'
        rows.append([bucket, m["docs"], m["tokens"], m["loss"], m["ppl"], bpb_text(m), m["unigram_bpb"], verdict])
    out = [
        f"<h2>Model: evaluation at step {last['step']}</h2>",
        "<p>Held-out documents, scored one by one. Bits-per-byte = Σ NLL / (ln 2 · UTF-8 bytes), ± the "
        "half-width of its 95% interval over documents (a ratio estimator with Student's t: docs/evaluation.md); "
        "the unigram baseline is fitted on the bucket's training tokens (add-one smoothing).</p>",
        table(["bucket", "docs", "tokens", "loss", "ppl", "bpb ± 95%", "unigram bpb", "bpb / unigram"], rows),
        _small_samples(last),
    ]
    if len(evals) > 1:
        series = {}
        for bucket in last["buckets"]:
            pts = [(e["step"], e["buckets"][bucket]["bpb"]) for e in evals if bucket in e["buckets"]]
            series[bucket] = ([p[0] for p in pts], [p[1] for p in pts])
        out.append(line_chart(series, title="Held-out bits-per-byte", xlabel="step", ylabel="bpb", markers=True))
        out.append(_slices_over_steps(evals))
    out.append(_probes(evals))
    out.append(_eval_audits(last))
    out.append(_task_curves(evals, watched or []))
    out.append(_watched(watched or []))
    samples = last.get("samples") or []
    if samples:
        out.append("<h3>Samples</h3>")
        for s in samples:
            out.append(
                f"<p class=muted>{html.escape(s['bucket'])}</p><pre><b>{html.escape(s['prompt'])}</b>"
                f"{html.escape(s['completion'])}</pre>"
            )
    return "".join(out)
