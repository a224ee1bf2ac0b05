"""The report stage: one self-contained `report.html` from the files of a run directory.

It reads only files (config, stage markers, funnel, tokenizer audit, token meta, events, eval
results), so it can be rebuilt at any time, also while a run is still training.
"""

from __future__ import annotations

import html
import time
from typing import Any

from tokenmill import json_limits
from tokenmill import __version__
from tokenmill.report.attempts import split_attempts
from tokenmill.report.continued_section import section_continued
from tokenmill.report.data_section import section_data
from tokenmill.report.eval_section import section_eval
from tokenmill.report.noise_section import section_noise
from tokenmill.report.page import CSS, table
from tokenmill.report.run_files import eval_history, watch_history
from tokenmill.report.scaling import section_scaling
from tokenmill.report.stopping_section import section_stopping
from tokenmill.report.timeline import section_run
from tokenmill.runs import STAGES, RunDir, SkippedLines, atomic_write_text, read_events
from tokenmill.summaries import summary_line


def section_experiment(run: RunDir) -> str:
    """A run trained for an experiment (an ablation) links the experiment's page."""
    path = run.sub("experiment.json")
    if not path.is_file():
        return ""
    link = json_limits.load_file(path)
    return (
        f"<p>One run of the {html.escape(link['kind'])} experiment <b>{html.escape(link['name'])}</b>: "
        f"<a href='{html.escape(link['page'])}'>its page</a> compares it with the other arms.</p>"
    )


def section_stages(run: RunDir) -> str:
    rows = []
    for stage in STAGES:
        done = run.finished(stage)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(done["finished_at"])) if done else "—"
        summary = summary_line(stage, done.get("summary", {})) if done else "this page" if stage == "report" else "not finished"
        rows.append([stage, when, summary])
    return "<h2>Stages</h2>" + table(["stage", "finished", "summary"], rows)


def section_mixture(events: list[dict]) -> str:
    """The loader's plan as the trainer logged it: phases, per-bucket epochs, nominal vs effective."""
    starts = [e for e in events if e.get("kind") == "train_start" and e.get("plan")]
    if not starts:
        return ""
    plan = starts[-1]["plan"]
    out = [
        "<h2>Mixture and curriculum</h2>",
        f"<p>Token budget {plan['token_budget']:,} ({plan['packing']}, document masking "
        f"{'on' if plan['doc_masking'] else 'off'}, r_pad {plan['r_pad']:.4f}: the share of the budget's "
        f"targets lost to padding and document boundaries, {plan.get('r_pad_kind', '')}); "
        f"nominal {plan['nominal_tokens']:,.0f} vs effective {plan['effective_tokens']:,.0f} tokens "
        f"({html.escape(plan.get('effective_rule', ''))}).</p>",
        table(
            ["phase", "steps", "seq_len", "rows / micro-batch", "anneal", "weights"],
            [
                [
                    p["name"],
                    f"{p['start_step']}–{p['end_step']}",
                    p["seq_len"],
                    p["rows_per_micro_batch"],
                    "yes" if p["anneal"] else "",
                    ", ".join(f"{b} {w:.2f}" for b, w in p["weights"].items()),
                ]
                for p in plan["phases"]
            ],
        ),
    ]  # per-bucket planned vs delivered: data_section
    for w in plan.get("warnings", []):
        out.append(f"<p class=bad>{html.escape(str(w))}</p>")
    return "".join(out)


def render(run: RunDir, skipped: SkippedLines | None = None) -> str:
    """The page; lines of events.jsonl that are not JSON objects are left out, counted in
    `skipped` when one is given, and the page says how many."""
    skipped = skipped if skipped is not None else SkippedLines()
    log = list(read_events(run.sub("events.jsonl"), skipped))
    # Only the current training attempt's events describe the weights this page is about; the Run
    # section lists the earlier attempts apart (report/attempts.py).
    events, _ = split_attempts(log)
    note = skipped.message(run.sub("events.jsonl"))
    evals, watched = eval_history(run), watch_history(run.path)
    title = run.config.report.title or run.config.name
    replay = run.config.mixture.replay
    config_yaml = run.sub("config.yaml").read_text() if run.sub("config.yaml").exists() else ""
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class=muted>tokenmill {__version__} · run directory {html.escape(str(run.path))} · "
        f"generated {time.strftime('%Y-%m-%d %H:%M:%S')}</p>",
        f"<p class=bad>{html.escape(note)}</p>" if note else "",
        section_experiment(run),
        section_continued(events, evals, list(replay.buckets) if replay else [], replay.share if replay else None),
        section_eval(evals, watched) if evals else "",
        section_stages(run),
        section_data(run, events),
        section_mixture(events),
        section_run(run, log, evals),
        section_stopping(run, events, evals),
        section_noise(events),
        "" if evals else section_eval(evals, watched),
        section_scaling(run, events),
        f"<h2>Config</h2><details><summary>resolved config.yaml</summary><pre>{html.escape(config_yaml)}</pre></details>",
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} — tokenmill</title>"
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>"
    )


def run_report(run: RunDir) -> dict[str, Any]:
    from tokenmill.report.tensorboard import tensorboard_available, write_tensorboard

    path, skipped = run.sub("report.html"), SkippedLines()
    atomic_write_text(path, render(run, skipped))
    out = {"path": str(path)}
    note = skipped.message(run.sub("events.jsonl"))
    if note:
        out["warning"] = note
    mode = run.config.report.tensorboard
    if mode == "on" or (mode == "auto" and tensorboard_available()):
        logdir = write_tensorboard(run)  # 'on' without tensorboard: it says how to install it
        if logdir is not None:
            out["tensorboard"] = str(logdir)
    return out
