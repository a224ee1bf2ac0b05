"""The Run section of the report: every training signal on one shared step axis, with the run's
incidents (checkpoints, resumes, spikes, skips, rollbacks) drawn across all panels, so "did the
spike follow a resume?" is answered by looking.

Panels follow the 60-second inspection order (docs/operations.md): first whether train loss, held-out
loss and gradient norm go wrong together (an optimization problem), then the learning rate that
drives them, then tokens/s, MFU, data wait and checkpoint age (a systems problem). A second figure
puts the same run against wall-clock time, where replays after a resume and downtime are visible.
"""

from __future__ import annotations

import html
import math
import statistics
import time
from typing import Any, Iterable, Sequence

from tokenmill.report.attempts import attempts_table, split_attempts
from tokenmill.report.charts import MAX_POINTS, Heatmap, Marker, MarkerStyle, Panel, Span, stacked_panels
from tokenmill.report.run_files import watch_history
from tokenmill.runs import RunDir

# Event kinds drawn as markers, in legend order, and how each looks.
MARKER_STYLES: dict[str, MarkerStyle] = {
    "checkpoint": MarkerStyle("#a0a0a0", "-", 0.5, "checkpoint"),
    "resumed": MarkerStyle("#1f5fd6", "-", 1.8, "resumed"),
    "restart": MarkerStyle("#7b2cbf", "-", 1.8, "restart (supervisor)"),
    "interrupted": MarkerStyle("#e07b00", ":", 1.5, "interrupted"),
    "spike": MarkerStyle("#d62728", "--", 1.2, "spike (step skipped)"),
    "skip": MarkerStyle("#ff7f0e", "--", 1.2, "skip (non-finite)"),
    "rollback": MarkerStyle("#000000", "-", 1.8, "rollback"),
    "recovered": MarkerStyle("#2ca02c", ":", 1.2, "recovered"),
    "rebaseline": MarkerStyle("#8c8c00", ":", 1.0, "rebaseline"),
    "rank_mismatch": MarkerStyle("#e377c2", "-", 1.5, "rank mismatch"),
    "checkpoint_corrupt": MarkerStyle("#8c564b", "-", 1.5, "checkpoint corrupt"),
    "diverged": MarkerStyle("#8b0000", "-", 2.2, "diverged"),
    "phase": MarkerStyle("#4c72b0", "-.", 1.4, "curriculum phase (mixture, sequence length)"),
    "rope_changed": MarkerStyle("#55a868", "-.", 1.2, "RoPE changed"),
    "preempted": MarkerStyle("#c44e52", ":", 1.8, "preempted (SIGTERM)"),
    "hang": MarkerStyle("#dd8452", "-", 2.0, "hung rank (watchdog)"),
    "slow_rank": MarkerStyle("#937860", ":", 1.4, "slow rank"),
    "grad_drift": MarkerStyle("#bcbd22", "-.", 1.2, "gradient-norm drift (warning)"),
    "embedding_collapse": MarkerStyle("#9467bd", "-", 1.6, "embedding collapse (warning)"),
    "bucket_loss_warning": MarkerStyle("#e7298a", "-.", 1.6, "one bucket's loss up (warning)"),
}
# Only on the wall-clock figure: each (re)start of the trainer process. On the step axis a fresh
# start sits at step 0 and a resume already has its `resumed` marker.
TIME_MARKER_STYLES: dict[str, MarkerStyle] = {
    "train_start": MarkerStyle("#17becf", "-", 1.4, "trainer started"),
    # where an in-training evaluation ended: the step line is flat while it runs
    "eval": MarkerStyle("#2ca02c", ":", 1.0, "evaluation done"),
    **MARKER_STYLES,
}
# Kinds whose markers carry a text label: the rare state changes a spike may follow.
LABELLED_KINDS = frozenset(
    {"resumed", "restart", "interrupted", "rollback", "rank_mismatch", "diverged", "phase", "preempted", "hang", "slow_rank"}
)
# Beyond this many markers of one kind (a long run's checkpoints) the kind's markers are left out
# and the caption says so: thousands of full-height lines would hide the curves and bloat the page.
MAX_MARKERS_PER_KIND = 150
# Events listed in the table: everything the training and evaluation stages log except per-step
# records and periodic diagnostics, which are the curves themselves.
TABLE_SKIP_KINDS = frozenset({"train_step", "embedding_spectrum", "rank_times"})
EVENT_TABLE_ROWS = 40


# -- what the events say ------------------------------------------------------------------------


def last_record_per_step(events: Iterable[dict]) -> list[dict]:
    """The train_step records, one per step in step order; a step replayed after a resume or a
    retrain keeps its last record (what the final weights went through)."""
    by_step: dict[int, dict] = {}
    for e in events:
        if e.get("kind") == "train_step" and e.get("step") is not None:
            by_step[int(e["step"])] = e
    return [by_step[s] for s in sorted(by_step)]


def event_step(event: dict) -> int | None:
    """The optimizer step an event belongs to; a supervisor restart belongs to the step it resumes from."""
    step = event.get("resume_step") if event.get("kind") == "restart" else event.get("step")
    return int(step) if isinstance(step, (int, float)) and math.isfinite(step) else None


def heldout_losses(events: Iterable[dict], evals: Sequence[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """{bucket: (steps, held-out loss)} from the eval events, overridden by the eval records on disk
    (the newest evaluation of a step wins, as for train steps)."""
    by_step: dict[int, dict] = {}
    for rec in [e for e in events if e.get("kind") == "eval"] + list(evals):
        if rec.get("step") is not None and isinstance(rec.get("buckets"), dict):
            by_step[int(rec["step"])] = rec["buckets"]
    out: dict[str, tuple[list[int], list[float]]] = {}
    for step in sorted(by_step):
        for bucket, m in by_step[step].items():
            if isinstance(m, dict) and m.get("loss") is not None:
                xs, ys = out.setdefault(bucket, ([], []))
                xs.append(step)
                ys.append(float(m["loss"]))
    return out


def grad_norm_heatmap(records: Sequence[dict], max_columns: int = MAX_POINTS) -> Heatmap | None:
    """Per-layer-group gradient norms as rows (groups in model order, the order the trainer wrote
    them) over evenly spaced step bins. A bin holds one measured step (every train.metrics_every
    steps) unless the run has more than max_columns of them; then a bin keeps the largest norm of
    its steps, so a one-step spike in one group stays visible."""
    measured = [(int(r["step"]), r["grad_norms"]) for r in records if isinstance(r.get("grad_norms"), dict)]
    if not measured:
        return None
    groups: list[str] = []
    for _, norms in measured:
        groups += [g for g in norms if g not in groups]
    steps = [s for s, _ in measured]
    spacing = statistics.median([b - a for a, b in zip(steps, steps[1:])]) if len(steps) > 1 else 1
    lo, hi = steps[0] - spacing / 2, steps[-1] + spacing / 2
    columns = max(1, min(round((hi - lo) / spacing), max_columns))
    width = (hi - lo) / columns
    values = [[math.nan] * columns for _ in groups]
    for step, norms in measured:
        col = min(int((step - lo) / width), columns - 1)
        for row, g in enumerate(groups):
            v = norms.get(g)
            if v is not None and math.isfinite(v) and not v <= values[row][col]:  # NaN compares False
                values[row][col] = float(v)
    if not any(v > 0 for row in values for v in row):  # NaN > 0 is False: nothing to colour
        return None
    return Heatmap(rows=groups, x_edges=[lo + i * width for i in range(columns + 1)], values=values, label="grad norm")


def checkpoint_age(records: Sequence[dict], events: Iterable[dict]) -> tuple[list[int], list[float], str]:
    """(steps, age, how): the trainer's ckpt_age_steps where it logged them, else steps since the
    newest checkpoint event at or before each step (logs from before the field existed)."""
    logged = [(int(r["step"]), r["ckpt_age_steps"]) for r in records if r.get("ckpt_age_steps") is not None]
    if logged:
        return [s for s, _ in logged], [float(a) for _, a in logged], "logged by the trainer"
    saved = sorted({s for e in events if e.get("kind") in ("checkpoint", "resumed") and (s := event_step(e)) is not None})
    if not saved:
        return [], [], ""
    steps, ages, i, newest = [], [], 0, 0
    for r in records:
        step = int(r["step"])
        while i < len(saved) and saved[i] <= step:
            newest, i = saved[i], i + 1
        steps.append(step)
        ages.append(float(step - newest))
    return steps, ages, "derived from checkpoint events"


def run_summary(events: Sequence[dict]) -> dict[str, Any]:
    """The headline numbers: last step, its loss, median tokens/s and MFU over the kept records,
    and counts of the incidents."""
    records = last_record_per_step(events)

    def finite(key: str) -> list[float]:
        return [float(r[key]) for r in records if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]

    def count(*kinds: str) -> int:
        return sum(1 for e in events if e.get("kind") in kinds)

    tps, mfu = finite("tokens_per_s"), finite("mfu")
    return {
        "steps": int(records[-1]["step"]) if records else 0,
        "final_loss": records[-1].get("loss") if records else None,
        "median_tokens_per_s": statistics.median(tps) if tps else None,
        "median_mfu": statistics.median(mfu) if mfu else None,
        # A supervisor restart is followed by its child's `resumed`: counted apart, not summed.
        "interruptions": count("interrupted", "preempted"),
        "resumes": count("resumed"),
        "restarts": count("restart"),
        "spikes": count("spike"),
        "skips": count("skip"),
        "rollbacks": count("rollback"),
    }


# -- the section --------------------------------------------------------------------------------


def section_run(run: RunDir, log: list[dict], evals: list[dict]) -> str:
    """The report's Run section (HTML) from the whole event log: summary row, the step-axis
    figure, the wall-clock figure and the newest events of the current training attempt, and the
    earlier attempts listed apart (their markers would sit on an axis that is not theirs)."""
    events, earlier = split_attempts(log)
    records = last_record_per_step(events)
    if not records:
        return "<h2>Run</h2><p class=muted>No training steps yet.</p>" + attempts_table(earlier)
    panels, notes = _step_panels(run, records, events, evals)
    markers, left_out = _step_markers(events)
    spans = [
        Span(w[0] - 0.5, w[1] + 0.5, f"rollback-window-{e.get('step')}")
        for e in events
        if e.get("kind") == "rollback" and isinstance(w := e.get("skipped_window"), list) and len(w) == 2
    ]
    figure = stacked_panels(panels, markers, MARKER_STYLES, xlabel="optimizer step", spans=spans)
    caption = (
        "Panels in the order of the 60-second check: do train loss, held-out loss and gradient norm go wrong "
        "together (optimization), is the learning rate the cause, and do tokens/s, MFU, data wait and "
        "checkpoint age go wrong too (systems)? Vertical lines are events, on every panel; a step replayed "
        "after a resume shows its last record, the resume line marks where the replay began; a rollback "
        "shades the steps it threw away."
    )
    out = [
        "<h2>Run</h2>",
        _summary_table(run_summary(events)),
        attempts_table(earlier),
        f"<p class=muted>{html.escape(caption)}</p>",
        f"<figure class=timeline>{figure}</figure>",
    ]
    notes += [
        f"{n} {kind} markers left out (more than {MAX_MARKERS_PER_KIND}); "
        + ("the checkpoint-age saw-tooth shows each one." if kind == "checkpoint" else "see the event table.")
        for kind, n in left_out.items()
    ]
    phases = phase_events(events)
    if phases:
        notes.append(
            "Curriculum phases (the dash-dot lines): "
            + " · ".join(f"{p['name']} from step {p['step']}: {p['changes']}" for p in phases)
            + "."
        )
    if notes:
        out.append("<p class=muted>" + " ".join(html.escape(n) for n in notes) + "</p>")
    out.append(_warnings_section(run, events))
    out.append(_time_section(events))
    out.append(_events_table(events))
    return "".join(out)


def _step_panels(run: RunDir, records: list[dict], events: list[dict], evals: list[dict]) -> tuple[list[Panel], list[str]]:
    steps = [int(r["step"]) for r in records]

    def col(key: str, scale: float = 1.0) -> list[float | None]:
        return [_finite(r.get(key), scale) for r in records]

    def has(values: Sequence[float | None], positive: bool = False) -> bool:
        return any(v is not None and math.isfinite(v) and (v > 0 or not positive) for v in values)

    notes: list[str] = []
    loss_lines: dict[str, tuple[Sequence[float], Sequence[float | None]]] = {"train loss": (steps, col("loss"))}
    loss = Panel("loss (nats/token)", lines=loss_lines)
    for bucket, (xs, ys) in heldout_losses(events, evals).items():
        loss_lines[f"held-out: {bucket}"] = (xs, ys)
        loss.point_markers.add(f"held-out: {bucket}")
    panels = [loss, *_watcher_panels(run, evals, loss_lines, loss.point_markers, notes)]
    grad = col("grad_norm")
    if has(grad, positive=True):
        panels.append(Panel("grad norm\n(pre-clip)", lines={"grad norm": (steps, grad)}, logy=True))
    heat = grad_norm_heatmap(records)
    if heat is not None:
        panels.append(Panel("grad norm\nper layer group", heatmap=heat, height=max(1.0, len(heat.rows) / 8)))
        every = getattr(getattr(run.config, "train", None), "metrics_every", None)
        notes.append(
            f"Per-group gradient norms are measured {'every step' if every == 1 else f'every {every} steps'} "
            "(train.metrics_every), colour on a log scale."
            if every
            else "Per-group gradient norms: colour on a log scale."
        )
    optional = [
        ("lr", "learning rate", 1.0, True),
        ("tokens_per_s", "tokens/s", 1.0, False),
        ("mfu", "MFU (%)", 100.0, False),
        ("data_wait_s", "data wait (s)", 1.0, False),
    ]
    for key, label, scale, logy in optional:
        values = col(key, scale)
        if has(values):
            panels.append(
                Panel(
                    label,
                    lines={label: (steps, values)},
                    logy=logy and has(values, positive=True) and all(v is None or v > 0 for v in values),
                )
            )
    age_steps, ages, how = checkpoint_age(records, events)
    if age_steps:
        panels.append(Panel("checkpoint age\n(steps)", lines={"checkpoint age": (age_steps, ages)}, steps=True))
        notes.append(f"Checkpoint age {how}.")
    memory = col("memory_peak", 1 / 2**30)
    if has(memory):
        panels.append(Panel("peak memory\n(GiB)", lines={"peak memory": (steps, memory)}))
    for key, label in (
        ("bucket_loss", "train loss\nper bucket"),
        ("act_rms", "activation RMS\nper layer"),
        ("attn_logit_max", "attention logit\nmax per layer"),
    ):
        lines = health_lines(records, key)
        if lines:  # train.health signals; sparse ones (every K steps) drawn with dots
            panels.append(Panel(label, lines=lines, point_markers=set(lines) if key != "bucket_loss" else set()))
            if key == "act_rms":
                notes.append(
                    "Activation RMS (each block's output) and the attention-logit maximum (over the pairs "
                    "the mask allows) per layer come from a no-grad look at a few rows every "
                    "train.health.activation_stats_every steps; growing logits are the classic precursor "
                    "of a loss spike."
                )
    ranks = rank_time_lines(events)
    if ranks:
        panels.append(Panel("read + forward\nper rank (s)", lines=ranks))
        notes.append(
            "Read + forward seconds per step of each rank (train.rank_stats_every): a synchronous step "
            "hides a straggler in its step time, not here."
        )
    return panels, notes


def task_lines(evals: Sequence[dict], watched: Sequence[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """Task accuracy by step: the in-training evaluations' (eval.tasks_in_training) as "task", the
    watcher's (`tokenmill eval --watch`) as "task (watcher)"."""
    lines: dict[str, tuple[list[int], list[float]]] = {}
    for suffix, records in (("", evals), (" (watcher)", watched)):
        for rec in records:
            for t in rec.get("tasks") or []:
                if isinstance(t, dict) and isinstance(t.get("acc"), (int, float)):
                    xs, ys = lines.setdefault(f"{t.get('name')}{suffix}", ([], []))
                    xs.append(int(rec["step"]))
                    ys.append(float(t["acc"]))
    return lines


def _watcher_panels(
    run: RunDir, evals: Sequence[dict], loss_lines: dict[str, Any], dotted: set[str], notes: list[str]
) -> list[Panel]:
    """The watcher's held-out losses joined on the loss panel at their steps, and a task-accuracy
    panel holding the in-training and the watcher's task scores side by side."""
    watched = watch_history(run.path)
    for bucket, (xs, ys) in heldout_losses([], watched).items():
        loss_lines[f"held-out (watcher): {bucket}"] = (xs, ys)
        dotted.add(f"held-out (watcher): {bucket}")
    if watched:
        notes.append(
            f"{len(watched)} checkpoint(s) scored by `tokenmill eval --watch` in its own process (eval.tiers): "
            "their lines say (watcher)."
        )
    tasks = task_lines(evals, watched)
    return [Panel("task accuracy", lines=tasks, point_markers=set(tasks))] if tasks else []


def health_lines(records: Sequence[dict], key: str) -> dict[str, tuple[list[int], list[float | None]]]:
    """One line per bucket (`bucket_loss`, a dict) or per layer (`act_rms`, `attn_logit_max`, lists)
    of the train_step records that carry `key` (train.health)."""
    lines: dict[str, tuple[list[int], list[float | None]]] = {}
    for r in records:
        value = r.get(key)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for name, v in items:
            xs, ys = lines.setdefault(str(name) if isinstance(value, dict) else f"layers.{name}", ([], []))
            xs.append(int(r["step"]))
            ys.append(_finite(v))
    return dict(sorted(lines.items())) if key == "bucket_loss" else lines


def phase_events(events: Sequence[dict]) -> list[dict]:
    """A `phase` pseudo-event at the first step of every curriculum phase after the first, from the
    newest train_start's mixture plan, saying what changed (sequence length, mixture, annealing)."""
    starts = [e for e in events if e.get("kind") == "train_start" and isinstance(e.get("plan"), dict)]
    phases = (starts[-1]["plan"].get("phases") or []) if starts else []
    out = []
    for index, (prev, cur) in enumerate(zip(phases, phases[1:]), start=2):
        changes, short = [], []
        if cur.get("seq_len") != prev.get("seq_len"):
            changes.append(f"seq {prev.get('seq_len')}→{cur.get('seq_len')}")
            short.append(changes[-1])
        if cur.get("weights") != prev.get("weights"):
            changes.append("mixture " + ", ".join(f"{b} {w:.0%}" for b, w in (cur.get("weights") or {}).items()))
            short.append("mixture")  # the weights go in the note under the figure: a label is one short line
        if cur.get("anneal") and not prev.get("anneal"):
            changes.append("LR anneal")
            short.append(changes[-1])
        out.append(
            {
                "kind": "phase",
                "step": cur.get("start_step"),
                "name": cur.get("name") or f"phase {index}",  # a phase the config left unnamed: its place
                "changes": "; ".join(changes) or "same settings",
                "label": "; ".join(short) or "same settings",
            }
        )
    return out


def _step_markers(events: Iterable[dict]) -> tuple[list[Marker], dict[str, int]]:
    """One marker per (kind, step) of the marked kinds; gid `marker-{kind}-{step}`."""
    seen: dict[tuple[str, int], Marker] = {}
    events = list(events)
    for e in [*events, *phase_events(events)]:
        kind, step = e.get("kind"), event_step(e)
        if kind in MARKER_STYLES and step is not None and (kind, step) not in seen and _train_event(e):
            seen[(kind, step)] = Marker(x=step, kind=kind, gid=f"marker-{kind}-{step}", label=marker_label(e))
    return _cap_per_kind(list(seen.values()))


def _train_event(e: dict) -> bool:
    """An event of the training run (the markers' kinds): other stages reuse kind names (curate
    logs its own "phase" events, of map/dedup/lines, with no step), and are not drawn."""
    return e.get("stage") in (None, "train")


def marker_label(e: dict) -> str:
    """The text above a marker: a curriculum phase by its name and what changed, a labelled kind
    by its step ("interrupted 24"), or by its kind alone when it has no step; never "None"."""
    kind, step = str(e.get("kind")), event_step(e)
    if kind == "phase" and e.get("changes"):
        return f"{e.get('name') or 'phase'} ({e.get('label') or e['changes']})"
    if kind not in LABELLED_KINDS:
        return ""
    return f"{kind} {step}" if step is not None else kind


def _cap_per_kind(markers: list[Marker]) -> tuple[list[Marker], dict[str, int]]:
    counts: dict[str, int] = {}
    for m in markers:
        counts[m.kind] = counts.get(m.kind, 0) + 1
    over = {k: n for k, n in counts.items() if n > MAX_MARKERS_PER_KIND}
    return [m for m in markers if m.kind not in over], over


def rank_time_lines(events: Iterable[dict], max_lines: int = 8) -> dict[str, tuple[list[int], list[float]]]:
    """Per-rank read + forward seconds from the rank_times events: one line per rank up to
    `max_lines` ranks, else the fastest, median and slowest rank of each interval."""
    records = [e for e in events if e.get("kind") == "rank_times" and isinstance(e.get("step"), int)]
    by_step = {int(e["step"]): e for e in records}  # a replayed interval keeps its last record
    steps = sorted(by_step)
    if not steps:
        return {}
    full = all(isinstance(by_step[s].get("forward_s"), list) for s in steps)
    if full and max(len(by_step[s]["forward_s"]) for s in steps) <= max_lines:
        n = max(len(by_step[s]["forward_s"]) for s in steps)
        lines = {}
        for r in range(n):
            pts = [(s, by_step[s]["read_s"][r] + by_step[s]["forward_s"][r]) for s in steps if r < len(by_step[s]["forward_s"])]
            lines[f"rank {r}"] = ([x for x, _ in pts], [y for _, y in pts])
        return lines
    return {
        "median rank": (steps, [float(by_step[s]["median_s"]) for s in steps]),
        "slowest rank": (steps, [float(by_step[s]["max_s"]) for s in steps]),
    }


WARNING_KINDS = ("bucket_loss_warning", "embedding_collapse", "grad_drift", "slow_rank", "hang", "preempt_warning")
WARNINGS_LISTED = 20
DOCS_PER_WARNING = 5


def _warnings_section(run: RunDir, events: list[dict]) -> str:
    """Every early warning with the step it fired at and the documents of that step's batch (those
    of the bucket for a bucket warning), as `tokenmill replay --step N` names them."""
    warnings = [e for e in events if e.get("kind") in WARNING_KINDS and isinstance(e.get("step"), int)]
    if not warnings:
        return ""
    shown = warnings[:WARNINGS_LISTED]
    rewound = {int(e["step"]) for e in events if e.get("kind") == "train_step" and e.get("draw")}
    docs: dict[int, list[dict]] = {}
    try:
        from tokenmill.train.replay import documents_of_steps

        docs = documents_of_steps(run, sorted({int(e["step"]) for e in shown} - rewound))
    except Exception as exc:  # a report renders whatever is missing (no token store here, another machine)
        docs = {}
        note = f"(the batch documents could not be read: {exc})"
    else:
        note = ""
    rows = []
    for e in shown:
        step = int(e["step"])
        batch = [d for d in docs.get(step, []) if e.get("kind") != "bucket_loss_warning" or d["bucket"] == e.get("bucket")]
        names = ", ".join(
            f"{d['doc_id']}" + (f" ({d['url'] or d['source']})" if d.get("url") or d.get("source") else "")
            for d in batch[:DOCS_PER_WARNING]
        )
        more = f" … {len(batch) - DOCS_PER_WARNING} more" if len(batch) > DOCS_PER_WARNING else ""
        where = "a rewound step (another draw of the data)" if step in rewound else (names + more) if names else "—"
        rows.append([e["kind"], step, event_details(e), where])
    more_w = f" (the first {WARNINGS_LISTED} of {len(warnings)})" if len(warnings) > WARNINGS_LISTED else ""
    return (
        f"<h3>Warnings{more_w}</h3><p class=muted>Each warning at the step it fired, with the documents of that "
        f"step's batch (`tokenmill replay RUN --step N` lists them all and recomputes the loss). {html.escape(note)}</p>"
        + _table(["warning", "step", "what", "batch documents"], rows, left_last=True)
    )


# -- against wall-clock time --------------------------------------------------------------------


def _time_section(events: list[dict]) -> str:
    """The run against elapsed wall-clock time: every train_step record in log order (replays
    included, so the step panel is a saw-tooth at each resume), lines broken across downtime,
    which is shaded. Three panels, not all: the question this answers is when and for how long the
    run stopped and what it redid; the per-step signals are read on the step axis above."""
    steps = [e for e in events if e.get("kind") == "train_step" and isinstance(e.get("t"), (int, float))]
    if len(steps) < 2:
        return ""
    t0 = min([e["t"] for e in events if e.get("stage") == "train" and isinstance(e.get("t"), (int, float))] + [steps[0]["t"]])
    span = max(e["t"] for e in steps) - t0
    unit, div = ("h", 3600.0) if span > 3 * 3600 else ("min", 60.0) if span > 180 else ("s", 1.0)
    dts = [b["t"] - a["t"] for a, b in zip(steps, steps[1:])]
    gap = max(60.0, 20 * statistics.median(dts))  # downtime, not a slow step
    xs: list[float] = []
    cols: dict[str, list[float | None]] = {"step": [], "loss": [], "tokens_per_s": []}
    spans: list[Span] = []
    for i, e in enumerate(steps):
        if i and dts[i - 1] > gap:
            spans.append(
                Span((steps[i - 1]["t"] - t0) / div, (e["t"] - t0) / div, f"gap-{len(spans)}", f"no step for\n{_hms(dts[i - 1])}")
            )
            xs.append(math.nan)  # a NaN x breaks the line across the gap
            for c in cols.values():
                c.append(None)
        xs.append((e["t"] - t0) / div)
        for key, c in cols.items():
            c.append(_finite(e.get(key)))
    panels = [
        Panel("optimizer step", lines={"step": (xs, cols["step"])}),
        Panel("train loss", lines={"train loss": (xs, cols["loss"])}),
    ]
    if any(v is not None for v in cols["tokens_per_s"]):
        panels.append(Panel("tokens/s", lines={"tokens/s": (xs, cols["tokens_per_s"])}))
    markers = [
        Marker(
            x=(e["t"] - t0) / div,
            kind=e["kind"],
            gid=f"tmarker-{e['kind']}-{event_step(e)}-{i}",
            label=marker_label(e),
        )
        for i, e in enumerate(events)
        if e.get("kind") in TIME_MARKER_STYLES
        and isinstance(e.get("t"), (int, float))
        and (_train_event(e) or e["kind"] == "eval")
    ]
    markers, _ = _cap_per_kind(markers)
    figure = stacked_panels(
        panels,
        markers,
        TIME_MARKER_STYLES,
        xlabel=f"elapsed wall-clock time ({unit}) since the train stage first started",
        spans=spans,
        panel_height=1.3,
    )
    why = (
        f"Every logged step in the order it ran: where the step line falls back, steps were trained again "
        f"(a resume, restart or retrain); a flat stretch ending at an evaluation line is the time the "
        f"in-training evaluation took; grey bands are pauses of more than {gap:,.0f} s with no step. "
        f"Only step, loss and tokens/s: this view answers when and for how long the run stopped; "
        f"the other signals are read on the step axis above."
    )
    return f"<h3>Against wall-clock time</h3><p class=muted>{html.escape(why)}</p><figure class=timeline>{figure}</figure>"


# -- tables -------------------------------------------------------------------------------------


def _summary_table(s: dict[str, Any]) -> str:
    return _table(
        [
            "steps",
            "final loss",
            "median tokens/s",
            "median MFU",
            "interruptions",
            "resumes / restarts",
            "spikes",
            "skips",
            "rollbacks",
        ],
        [
            [
                s["steps"],
                s["final_loss"],
                s["median_tokens_per_s"],
                f"{s['median_mfu']:.2%}" if s["median_mfu"] is not None else None,
                s["interruptions"],
                f"{s['resumes']} / {s['restarts']}",
                s["spikes"],
                s["skips"],
                s["rollbacks"],
            ]
        ],
    )


def _events_table(events: list[dict], limit: int = EVENT_TABLE_ROWS) -> str:
    listed = [
        e
        for e in events
        if e.get("stage") in ("train", "eval")
        and e.get("kind") not in TABLE_SKIP_KINDS
        and e.get("kind") not in ("stage_start", "stage_done")
    ]
    if not listed:
        return ""
    timed = [e["t"] for e in events if e.get("stage") == "train" and isinstance(e.get("t"), (int, float))]
    t0 = min(timed) if timed else None
    rows = []
    for e in list(reversed(listed))[:limit]:
        t = e.get("t")
        when = (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC") if isinstance(t, (int, float)) else "—"
        elapsed = _hms(t - t0) if isinstance(t, (int, float)) and t0 is not None else "—"
        rows.append([e.get("kind", ""), event_step(e), elapsed, when, event_details(e)])
    more = f" (the newest {limit} of {len(listed)})" if len(listed) > limit else ""
    return f"<h3>Events{more}</h3>" + _table(["event", "step", "elapsed", "time", "details"], rows, left_last=True)


def event_details(e: dict) -> str:
    """The fields of an event that explain it, as one line of text."""
    kind = e.get("kind")
    for details in (_guard_details, _run_details, _health_details):
        text = details(kind, e)
        if text is not None:
            return text
    skip = {"t", "stage", "kind", "step", "plan", "buckets", "model_config"}
    return ", ".join(
        f"{k} {_num(v) if isinstance(v, float) else v}"
        for k, v in e.items()
        if k not in skip and isinstance(v, (str, int, float, bool)) and v is not None
    )[:240]


def _guard_details(kind: object, e: dict) -> str | None:
    """A stability-guard event (spike, skip, rollback, recovery, rebaseline) in one line; None for other kinds."""
    if kind == "spike":
        lineage = e.get("lineage") or []
        buckets: dict[str, int] = {}
        for span in lineage:
            buckets[str(span.get("bucket"))] = buckets.get(str(span.get("bucket")), 0) + 1
        docs = ", ".join(str(s.get("doc_id")) for s in lineage[:3])
        batch = ", ".join(f"{b} ×{n}" for b, n in buckets.items()) or "—"
        return (
            f"{e.get('reason')}: loss {_num(e.get('loss'))} (median {_num(e.get('loss_median'))}), "
            f"grad norm {_num(e.get('grad_norm'))} (median {_num(e.get('grad_norm_median'))}); batch: "
            f"{batch}" + (f"; docs {docs}…" if docs else "") + _spike_kind(e)
        )
    if kind == "skip":
        return (
            f"{e.get('reason')}: loss {_num(e.get('loss'))}, grad norm {_num(e.get('grad_norm'))}, "
            f"{e.get('consecutive')} in a row" + _spike_kind(e)
        )
    if kind == "rollback":
        window = e.get("skipped_window") or ["?", "?"]
        return (
            f"to checkpoint of step {e.get('to_step')}, steps {window[0]}–{window[1]} dropped, LR factor "
            f"{_num(e.get('lr_scale'))}, spike at {e.get('spike_start')} ({e.get('reason')}), "
            f"rollback #{e.get('rollbacks')}"
        )
    if kind == "recovered":
        return f"back to {_num(e.get('pre_level'))} {e.get('steps')} steps after the spike at {e.get('spike_start')}"
    if kind == "rebaseline":
        return (
            f"grad norm {_num(e.get('grad_norm'))} stayed above median {_num(e.get('grad_norm_median'))} "
            f"with a calm loss for {e.get('spikes')} steps: median restarted"
        )
    return None


def _run_details(kind: object, e: dict) -> str | None:
    """A run-lifecycle event (resume, restart, preemption, hang, slow rank, checkpoint) in one line; None for other kinds."""
    if kind == "resumed":
        return f"from {e.get('checkpoint')}"
    if kind == "restart":
        why = (
            f"signal {e.get('signal')}"
            if e.get("signal")
            else "a failed rank (torchrun)"
            if e.get("by") == "torchrun"
            else f"exit code {e.get('exit_code')}"
        )
        return f"attempt {e.get('attempt')}/{e.get('restarts')} after {why}, from {e.get('resume_from')}"
    if kind == "preempted":
        since = e.get("seconds_since_signal")
        return f"SIGTERM: checkpoint {e.get('checkpoint')}" + (
            f" {_num(since)} s after the signal (grace {_num(e.get('grace_s'))} s)" if since is not None else ""
        )
    if kind == "hang":
        how = "no step finished" if e.get("detected_by") == "self" else f"rank {(e.get('peer') or {}).get('rank')} hung"
        return f"rank {e.get('rank')}: {how} for {_num(e.get('timeout_s'))} s; stacks in {e.get('stacks')}"
    if kind == "slow_rank":
        return (
            f"rank {e.get('rank')} on {e.get('host')}: {_num(e.get('ratio'))}× the median rank's read + forward "
            f"time ({e.get('cause')}) for {e.get('intervals')} intervals"
        )
    if kind == "preempt_warning":
        return (
            f"a step ({_num(e.get('step_s'))} s) + checkpoint ({_num(e.get('checkpoint_s'))} s) exceed the "
            f"preemption grace of {_num(e.get('grace_s'))} s: raise train.preempt_grace_s (and the scheduler's)"
        )
    if kind == "train_done":
        if e.get("note"):
            return str(e["note"])
        by = {"steps": "train.max_steps", "time": "train.max_seconds"}.get(str(e.get("stopped_by")), e.get("stopped_by"))
        return f"loss {_num(e.get('loss'))} after {_num(e.get('seconds'))} s of training" + (f", stopped by {by}" if by else "")
    if kind == "compile":
        return f"torch.compile {'on' if e.get('enabled') else 'off'}: {e.get('reason')}"
    if kind == "checkpoint":
        size = e.get("bytes")
        return f"{_num(e.get('seconds'))} s" + (f", {size / 2**20:,.1f} MiB" if isinstance(size, (int, float)) else "")
    return None


def _health_details(kind: object, e: dict) -> str | None:
    """A training-health or eval event (gradient drift, bucket loss, embedding collapse, eval) in one line; None for other kinds."""
    if kind == "grad_drift":
        first, last = e.get("window") or ["?", "?"]
        b0, b1 = e.get("baseline_window") or ["?", "?"]
        return (
            f"{e.get('group')}: mean grad norm {_num(e.get('grad_norm'))} over steps {first}–{last} is "
            f"{_num(e.get('ratio'))}× its lowest, {_num(e.get('baseline'))} over {b0}–{b1} (threshold "
            f"{_num(e.get('threshold'))}; ×{_num(e.get('growth_per_1k_steps'))} per 1k steps)"
        )
    if kind == "bucket_loss_warning":
        others = ", ".join(f"{b} {_num(r)}×" for b, r in (e.get("other_buckets") or {}).items())
        return (
            f"bucket {e.get('bucket')}: training loss {_num(e.get('loss'))} is {_num(e.get('ratio'))}× its running "
            f"median {_num(e.get('median'))} for {e.get('steps')} steps with its rows present"
            + (f" (the others: {others})" if others else "")
        )
    if kind == "embedding_collapse":
        return (
            f"embedding sv1/sv2 = {_num(e.get('sv_ratio'))} ≥ {_num(e.get('threshold'))}: its rows crowd into "
            f"one direction (sv1 {_num(e.get('sv1'))}, sv2 {_num(e.get('sv2'))})"
        )
    if kind == "eval":
        losses = {b: m.get("loss") for b, m in (e.get("buckets") or {}).items() if isinstance(m, dict)}
        return "held-out loss " + ", ".join(f"{b} {_num(v)}" for b, v in losses.items())
    return None


def _spike_kind(e: dict) -> str:
    """ "; periodic (same documents as step 120); state kept: …" for a classified spike or skip."""
    kind = e.get("spike_kind")
    if kind is None:
        return ""
    why = (
        f"same documents as step {e['same_documents_as_step']}"
        if "same_documents_as_step" in e
        else f"every {e['period_steps']} steps"
        if "period_steps" in e
        else f"growing over steps {e['growing_over_steps']}"
        if "growing_over_steps" in e
        else f"episode from step {e['episode_start']}"
        if "episode_start" in e
        else ""
    )
    return f"; {kind}" + (f" ({why})" if why else "") + (f"; state kept: {e['state_kept']}" if e.get("state_kept") else "")


def _finite(v: Any, scale: float = 1.0) -> float | None:
    """A plottable number, or None (a gap in the line): a non-finite loss is drawn as a hole, the
    skip marker at that step says why."""
    return float(v) * scale if isinstance(v, (int, float)) and math.isfinite(v) else None


def _num(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]], left_last: bool = False) -> str:
    """An HTML table in the report's style (build.CSS); every cell is escaped text."""

    def cell(v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return html.escape(str(v))

    style = " style='text-align:left'" if left_last else ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{style if left_last and i == len(r) - 1 else ''}>{cell(v)}</td>" for i, v in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"
