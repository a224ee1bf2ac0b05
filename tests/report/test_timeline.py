import math
import re
import statistics
import time
from pathlib import Path

import pytest

from tokenmill.config import load_config
from tokenmill.report.run_files import eval_history
from tokenmill.report.timeline import (grad_norm_heatmap, heldout_losses, last_record_per_step, run_summary,
                                       section_run)
from tokenmill.runs import RunDir, read_events

GROUPS = ["embed_tokens", "layers.0", "layers.1", "norm"]
DEMO = Path(__file__).resolve().parents[2] / "runs" / "demo"


def _run(tmp_path: Path) -> RunDir:
    return RunDir.create(load_config(None, [f"root={tmp_path}", "name=tl"]))


def _step(step: int, t: float, loss: float, **extra) -> dict:
    rec = {"t": t, "stage": "train", "kind": "train_step", "step": step, "loss": loss, "lr": 1e-3 * min(1, step / 5),
           "grad_norm": 1.0 + step / 100, "tokens_per_s": 1000.0 + step, "mfu": 0.1 + step / 1000,
           "data_wait_s": 0.001, "ckpt_age_steps": step % 10, "memory_peak": 2**30, "action": "apply"}
    if step % 2 == 0:  # train.metrics_every = 2
        rec["grad_norms"] = {g: 0.1 * (i + 1) * (10.0 if (step == 24 and g == "layers.1") else 1.0)
                             for i, g in enumerate(GROUPS)}
    rec.update(extra)
    return rec


def synthetic_events() -> list[dict]:
    """Steps 1–25 trained, killed, resumed from the checkpoint at 20 (21–25 replayed, then 26–40),
    a spike and a non-finite skip at 23, a rollback at 30 to step 20."""
    ev: list[dict] = [{"t": 0.0, "stage": "train", "kind": "train_start", "step": 0}]
    t = 1.0
    for s in range(1, 26):
        ev.append(_step(s, t, 5.0 - s * 0.05))
        if s in (10, 20):
            ev.append({"t": t, "stage": "train", "kind": "checkpoint", "step": s, "seconds": 0.1, "bytes": 2**20})
        t += 1.0
    t += 500.0  # the process was down
    ev.append({"t": t, "stage": "train", "kind": "resumed", "step": 20, "checkpoint": "checkpoints/step_20"})
    ev.append({"t": t, "stage": "train", "kind": "train_start", "step": 20})
    for s in range(21, 41):
        if s == 23:
            ev.append({"t": t, "stage": "train", "kind": "spike", "step": 23, "reason": "loss_spike", "loss": 9.0,
                       "loss_median": 4.0, "grad_norm": 8.0, "grad_norm_median": 1.2, "consecutive": 1,
                       "lineage": [{"bucket": "web", "doc_id": "web-7"}, {"bucket": "code", "doc_id": "c-1"}]})
            ev.append({"t": t, "stage": "train", "kind": "skip", "step": 23, "reason": "nonfinite", "loss": math.nan,
                       "grad_norm": math.inf, "consecutive": 2})
        if s == 30:
            ev.append({"t": t, "stage": "train", "kind": "rollback", "step": 30, "to_step": 20,
                       "skipped_window": [21, 30], "spike_start": 23, "reason": "loss_spike", "lr_scale": 0.5,
                       "rollbacks": 1, "checkpoint": "checkpoints/step_20"})
        loss = math.nan if s == 23 else 4.0 - s * 0.01  # the non-finite step: a hole in the loss line
        ev.append(_step(s, t, loss, loss_replayed=True) if s <= 25 else _step(s, t, loss))
        t += 1.0
    ev.append({"t": t, "stage": "eval", "kind": "eval", "step": 40,
               "buckets": {"web": {"loss": 3.9}, "code": {"loss": 3.1}}})
    return ev


def _marker_ids(svg: str) -> set[tuple[str, int]]:
    return {(k, int(s)) for k, s in re.findall(r'id="marker-([a-z_]+)-(\d+)-p\d+"', svg)}


def test_every_event_gets_a_marker_on_every_panel(tmp_path):
    page = section_run(_run(tmp_path), synthetic_events(), [])
    step_figure = page.split("<h3>Against wall-clock time")[0]
    assert _marker_ids(step_figure) == {("checkpoint", 10), ("checkpoint", 20), ("resumed", 20), ("spike", 23),
                                        ("skip", 23), ("rollback", 30)}
    # loss, grad norm, heat map, lr, tokens/s, MFU, data wait, checkpoint age, memory: nine panels
    panels = len(set(re.findall(r'id="marker-resumed-20-p(\d+)"', step_figure)))
    assert panels == 9
    for kind, step in [("checkpoint", 10), ("spike", 23), ("skip", 23), ("rollback", 30)]:
        assert len(re.findall(rf'id="marker-{kind}-{step}-p\d+"', step_figure)) == panels
    assert 'id="rollback-window-30-p0"' in step_figure  # the thrown-away steps are shaded
    for legend in ("resumed", "spike (step skipped)", "skip (non-finite)", "rollback", "checkpoint"):
        assert f">{legend}<" in step_figure
    assert ">resumed 20<" in step_figure and ">rollback 30<" in step_figure  # labelled state changes


def test_heat_map_has_one_row_per_layer_group_in_model_order(tmp_path):
    records = last_record_per_step(synthetic_events())
    heat = grad_norm_heatmap(records)
    assert heat is not None and heat.rows == GROUPS
    measured = [r for r in records if "grad_norms" in r]
    assert len(heat.values[0]) == len(measured) == 20  # one column per measured step (every 2nd)
    col = [int(r["step"]) for r in measured].index(24)
    assert heat.values[GROUPS.index("layers.1")][col] == pytest.approx(3.0)  # the per-group spike
    assert heat.x_edges[0] == 1.0 and heat.x_edges[-1] == 41.0  # half a spacing around steps 2..40
    page = section_run(_run(tmp_path), synthetic_events(), [])
    assert 'id="heatmap-rows-4"' in page
    for g in GROUPS:
        assert f">{g}<" in page


def test_heat_map_bins_keep_the_largest_norm_when_downsampled():
    records = [{"step": s, "grad_norms": {"a": 5.0 if s == 7 else 1.0}} for s in range(1, 101)]
    heat = grad_norm_heatmap(records, max_columns=10)
    assert len(heat.values[0]) == 10 and max(heat.values[0]) == 5.0 and sorted(heat.values[0])[0] == 1.0


def test_replayed_steps_keep_their_last_record_and_summary_matches_an_independent_computation(tmp_path):
    events = synthetic_events()
    records = last_record_per_step(events)
    assert [r["step"] for r in records] == list(range(1, 41))
    assert all(r.get("loss_replayed") for r in records if 21 <= r["step"] <= 25)

    last = {}
    for e in events:
        if e["kind"] == "train_step":
            last[e["step"]] = e
    tps = statistics.median(last[s]["tokens_per_s"] for s in last)
    mfu = statistics.median(last[s]["mfu"] for s in last)
    s = run_summary(events)
    assert s["steps"] == 40 and s["final_loss"] == pytest.approx(4.0 - 0.4)
    assert s["median_tokens_per_s"] == pytest.approx(tps) and s["median_mfu"] == pytest.approx(mfu)
    assert (s["resumes"], s["restarts"], s["spikes"], s["skips"], s["rollbacks"], s["interruptions"]) == (
        1, 0, 1, 1, 1, 0)
    page = section_run(_run(tmp_path), events, [])
    row = re.search(r"<tr><td>40</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[0] == "3.6" and cells[1] == f"{tps:,.0f}" and cells[2] == f"{mfu:.2%}"
    assert cells[3:] == ["0", "1 / 0", "1", "1", "1"]


def test_heldout_loss_per_bucket_prefers_the_eval_records():
    events = synthetic_events()
    records = [{"step": 40, "buckets": {"web": {"loss": 3.5}}}, {"step": 20, "buckets": {"web": {"loss": 4.5}}}]
    held = heldout_losses(events, records)
    assert held["web"] == ([20, 40], [4.5, 3.5])
    assert "code" not in held  # the record of step 40 replaces that step's eval event as a whole
    assert heldout_losses(events, [])["code"] == ([40], [3.1])


def test_wall_clock_figure_shows_the_downtime_and_the_event_table_lists_newest_first(tmp_path):
    page = section_run(_run(tmp_path), synthetic_events(), [])
    clock = page.split("<h3>Against wall-clock time")[1].split("<h3>Events")[0]
    assert 'id="gap-0-p0"' in clock and 'id="gap-1-p0"' not in clock  # the 500 s outage, only it
    assert re.search(r'id="tmarker-resumed-20-\d+-p0"', clock)
    assert re.search(r'id="tmarker-train_start-0-\d+-p0"', clock)
    events = page.split("<h3>Events")[1]
    kinds = re.findall(r"<tr><td>([a-z_]+)</td>", events)
    assert kinds[:3] == ["eval", "rollback", "skip"] and kinds[-1] == "train_start"
    assert re.search(r'id="tmarker-eval-40-\d+-p0"', clock)  # where the evaluation ended
    assert "to checkpoint of step 20, steps 21–30 dropped, LR factor 0.5" in events
    assert "batch: web ×1, code ×1; docs web-7, c-1" in events


def test_a_run_without_steps_renders_a_placeholder(tmp_path):
    page = section_run(_run(tmp_path), [{"t": 1.0, "stage": "train", "kind": "train_start", "step": 0}], [])
    assert "No training steps yet" in page and "<svg" not in page


def test_long_runs_are_downsampled(tmp_path):
    noise = [((s * 7919) % 13) / 13 for s in range(20001)]  # not collinear: matplotlib keeps every point
    events = [_step(s, float(s), 5.0 + noise[s] + (10.0 if s == 4321 else 0.0), tokens_per_s=1000.0 + 99 * noise[s])
              for s in range(1, 20001)]
    events.insert(10000, {"t": 10000.5, "stage": "train", "kind": "resumed", "step": 9990})
    for e in events[10001:]:
        e["t"] += 3600.0  # an hour down: the wall-clock lines break there
    page = section_run(_run(tmp_path), events, [])
    assert len(page) < 2_000_000
    for gid in ("series-train_loss-p0", "series-tokens_s-p4"):
        path = re.search(rf'<g id="{gid}">\s*<path d="([^"]+)"', page).group(1)
        assert 1000 < path.count("L") <= 2100
    assert 'id="gap-0-p0"' in page


@pytest.mark.skipif(not (DEMO / "events.jsonl").exists(), reason="no runs/demo here")
def test_the_demo_run_renders(tmp_path):
    run = RunDir(config=load_config(DEMO / "config.yaml", []), path=DEMO)  # read only: nothing is written
    events = list(read_events(DEMO / "events.jsonl"))
    t0 = time.perf_counter()
    page = section_run(run, events, eval_history(run))
    seconds = time.perf_counter() - t0
    print(f"runs/demo Run section: {len(page):,} characters in {seconds:.2f} s")
    assert page.count("<svg") == 2 and len(page) < 1_000_000
    checkpoints = {e["step"] for e in events if e["kind"] == "checkpoint"}
    assert {s for k, s in _marker_ids(page) if k == "checkpoint"} == checkpoints
    assert not [t for t in _svg_texts(page) if re.search(r"\bNone\b|\bnan\b", t)]  # curate's phases were "phase None"


def test_a_supervisor_restart_is_marked_at_the_step_it_resumes_from(tmp_path):
    events = synthetic_events()
    events.insert(30, {"t": 30.0, "stage": "train", "kind": "restart", "attempt": 1, "restarts": 3, "signal": "SIGKILL",
                       "exit_code": None, "resume_from": "checkpoints/step_20", "resume_step": 20})
    page = section_run(_run(tmp_path), events, [])
    assert ("restart", 20) in _marker_ids(page) and ">restart 20<" in page
    assert "attempt 1/3 after signal SIGKILL, from checkpoints/step_20" in page
    assert run_summary(events)["restarts"] == 1


def test_too_many_markers_of_one_kind_are_left_out_with_a_note(tmp_path):
    events = []
    for s in range(1, 401):
        events.append(_step(s, float(s), 5.0))
        if s % 2 == 0:
            events.append({"t": float(s), "stage": "train", "kind": "checkpoint", "step": s})
    events.append({"t": 400.0, "stage": "train", "kind": "spike", "step": 399, "reason": "grad_spike"})
    page = section_run(_run(tmp_path), events, [])
    assert _marker_ids(page) == {("spike", 399)}
    assert "200 checkpoint markers left out" in page


def test_phase_changes_preemption_hangs_and_slow_ranks_are_drawn_where_they_happened(tmp_path):
    from tokenmill.report.timeline import phase_events, rank_time_lines

    events = synthetic_events()
    plan = {"phases": [{"name": "short", "start_step": 1, "seq_len": 128, "weights": {"web": 0.5, "code": 0.5}},
                       {"name": "long", "start_step": 15, "seq_len": 256, "weights": {"web": 0.5, "code": 0.5}},
                       {"name": "anneal", "start_step": 35, "seq_len": 256, "anneal": True,
                        "weights": {"web": 0.75, "code": 0.25}}]}
    events[0]["plan"] = plan
    assert phase_events(events) == [
        {"kind": "phase", "step": 15, "name": "long", "changes": "seq 128→256", "label": "seq 128→256"},
        {"kind": "phase", "step": 35, "name": "anneal", "changes": "mixture web 75%, code 25%; LR anneal",
         "label": "mixture; LR anneal"}]
    extra = [{"t": 3.0, "stage": "train", "kind": "hang", "step": 3, "rank": 1, "detected_by": "self", "timeout_s": 300.0,
              "stacks": "hangs/attempt0-rank1.txt"},
             {"t": 30.0, "stage": "train", "kind": "preempted", "step": 31, "checkpoint": "checkpoints/step_31",
              "seconds_since_signal": 2.5, "grace_s": 30.0, "within_grace": True}]
    for step in (10, 20, 30, 40):
        extra.append({"t": 40.0, "stage": "train", "kind": "rank_times", "step": step, "median_s": 1.0, "max_s": 1.5,
                      "read_s": [0.0, 0.5], "forward_s": [1.0, 1.0], "slowest": [{"rank": 1, "seconds": 1.5}]})
    extra.append({"t": 40.0, "stage": "train", "kind": "slow_rank", "step": 30, "rank": 1, "host": "node7",
                  "ratio": 1.5, "cause": "batch reads", "intervals": 3})
    spike = next(e for e in events if e["kind"] == "spike")
    spike.update(spike_kind="periodic", same_documents_as_step=7, state_kept="checkpoints/spikes/step_22")
    page = section_run(_run(tmp_path), events + extra, [])
    assert "; periodic (same documents as step 7); state kept: checkpoints/spikes/step_22" in page
    step_figure = page.split("<h3>Against wall-clock time")[0]
    assert {("phase", 15), ("phase", 35), ("hang", 3), ("preempted", 31), ("slow_rank", 30)} <= _marker_ids(step_figure)
    assert ">long (seq 128→256)<" in step_figure and ">anneal (mixture; LR anneal)<" in step_figure  # one short line
    assert "anneal from step 35: mixture web 75%, code 25%; LR anneal" in page  # the weights, under the figure
    assert "rank 1 on node7: 1.5× the median rank" in page and "stacks in hangs/attempt0-rank1.txt" in page
    assert "SIGTERM: checkpoint checkpoints/step_31 2.5 s after the signal" in page
    assert rank_time_lines(extra) == {"rank 0": ([10, 20, 30, 40], [1.0] * 4), "rank 1": ([10, 20, 30, 40], [1.5] * 4)}
    assert "per rank (s)" in step_figure
    assert run_summary(events + extra)["interruptions"] == 1


def test_health_signals_get_panels_and_their_warnings_markers(tmp_path):
    from tokenmill.report.timeline import health_lines

    events = synthetic_events()
    for e in events:
        if e["kind"] == "train_step":
            s = e["step"]
            e["bucket_loss"] = {"web": 4.0 - s / 100, "code": 3.0 - s / 100}
            if s % 10 == 0:
                e["act_rms"] = [0.5 + s / 100, 1.0 + s / 100]
                e["attn_logit_max"] = [2.0 + s / 10, math.inf]
    events += [{"t": 99.0, "stage": "train", "kind": "grad_drift", "step": 32, "group": "layers.1", "ratio": 2.1,
                "threshold": 2.0, "grad_norm": 0.42, "baseline": 0.2, "window": [16, 31], "baseline_window": [2, 17],
                "growth_per_1k_steps": 1.9},
               {"t": 99.0, "stage": "train", "kind": "embedding_collapse", "step": 40, "sv_ratio": 12.5,
                "threshold": 10.0, "sv1": 25.0, "sv2": 2.0}]
    records = last_record_per_step(events)
    assert health_lines(records, "act_rms") == {"layers.0": ([10, 20, 30, 40], [0.6, 0.7, 0.8, 0.9]),
                                                "layers.1": ([10, 20, 30, 40], [1.1, 1.2, 1.3, 1.4])}
    assert health_lines(records, "attn_logit_max")["layers.1"] == ([10, 20, 30, 40], [None] * 4)  # a hole, not inf
    buckets = health_lines(records, "bucket_loss")
    assert list(buckets) == ["code", "web"] and buckets["web"][0] == list(range(1, 41))
    page = section_run(_run(tmp_path), events, [])
    step_figure = page.split("<h3>Against wall-clock time")[0]
    assert {("grad_drift", 32), ("embedding_collapse", 40)} <= _marker_ids(step_figure)
    panels = len(set(re.findall(r'id="marker-resumed-20-p(\d+)"', step_figure)))
    assert panels == 12  # the nine of a run without them, plus bucket loss, activation RMS, attention logits
    assert "layers.1: mean grad norm 0.42 over steps 16–31 is 2.1× its lowest, 0.2 over 2–17" in page
    assert "embedding sv1/sv2 = 12.5 ≥ 10" in page
    for legend in ("gradient-norm drift (warning)", "embedding collapse (warning)"):
        assert f">{legend}<" in step_figure


def test_each_warning_is_listed_with_the_documents_of_its_batch(tiny_run):
    """A bucket warning at step 12 of a real (tiny) run names the step's documents of that bucket,
    the ones the loader put in that batch; a rewound step says so instead."""
    from tokenmill.mixture.loader import Loader
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.trainer import run_train

    run_train(tiny_run, progress=False)
    events = list(read_events(tiny_run.path / "events.jsonl"))
    events += [{"t": 1.0, "stage": "train", "kind": "bucket_loss_warning", "step": 12, "bucket": "a", "loss": 9.0,
                "median": 3.0, "ratio": 3.0, "steps": 3, "other_buckets": {"b": 1.01}},
               {"t": 1.0, "stage": "train", "kind": "embedding_collapse", "step": 20, "sv_ratio": 12.0, "threshold": 10.0}]
    tc = tiny_run.config.train
    loader = Loader(TokenStore(tiny_run.path / "tokens"), tiny_run.config.mixture, tc.seq_len, tc.micro_batch,
                    tc.grad_accum, tc.max_steps, tiny_run.config.train_seed)
    want = [sp.doc_id for s in loader.global_provenance(12) for sp in s.spans if sp.bucket == "a"]
    page = section_run(tiny_run, events, [])
    section = page.split("<h3>Warnings")[1].split("</table>")[0]
    assert "bucket a: training loss 9 is 3× its running median 3" in section
    assert all(doc in section for doc in want[:5]) and want
    assert "b 1.01×" in section and "sv1/sv2 = 12" in section
    events[-1]["step"] = 21
    events.append({"t": 2.0, "stage": "train", "kind": "train_step", "step": 21, "loss": 1.0, "draw": 1})
    assert "a rewound step" in section_run(tiny_run, events, []).split("<h3>Warnings")[1]


def _svg_texts(page: str) -> list[str]:
    """Every text of the page's figures (labels, ticks, legends): SVG text elements keep their text."""
    return [t for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S) for t in re.findall(r">([^<>]+)<", svg)]


def test_no_marker_label_says_none_or_nan(tmp_path):
    # curate logs "phase" events of its own (no step); a curriculum phase may be left unnamed
    events = [{"t": -5.0, "stage": "curate", "kind": "phase", "phase": "map", "seconds": 1.0},
              {"t": -4.0, "stage": "curate", "kind": "phase", "phase": "dedup", "seconds": 2.0},
              *synthetic_events()]
    events[2]["plan"] = {"phases": [{"start_step": 1, "seq_len": 128}, {"start_step": 15, "seq_len": 256},
                                    {"name": None, "start_step": 30, "seq_len": 256, "anneal": True}]}
    page = section_run(_run(tmp_path), events, [])
    texts = _svg_texts(page)
    assert texts and not [t for t in texts if re.search(r"\bNone\b|\bnan\b", t)]
    assert "phase 2 (seq 128→256)" in texts and "phase 3 (LR anneal)" in texts
    clock = page.split("<h3>Against wall-clock time")[1]
    assert not re.search(r'id="tmarker-phase', clock)  # curate's phases are not training events


def test_only_the_current_attempts_markers_are_on_its_axis_and_earlier_attempts_are_listed(tmp_path):
    from tests.report.test_attempts import two_attempts

    page = section_run(_run(tmp_path), two_attempts(), [])
    step_figure = page.split("<h3>Against wall-clock time")[0]
    assert _marker_ids(step_figure) == {("checkpoint", 30)}  # not the first attempt's checkpoint 20
    assert "interrupted 24" not in page and "tmarker-interrupted" not in page
    row = re.search(r"<tr><td>30</td>(.*?)</tr>", page).group(1)  # the summary counts this attempt only
    assert re.findall(r"<td>(.*?)</td>", row)[3] == "0"  # interruptions
    earlier = page.split("Earlier training attempts (1)")[1]
    assert "interrupted (Ctrl-C) at step 24" in earlier and "checkpoints.stale-20261207T081500Z-config-changed/" in earlier
    # nothing but a set-aside attempt yet: no curve, the attempt still listed
    only_earlier = two_attempts()[:-32]  # up to the second train_start
    page = section_run(_run(tmp_path), only_earlier, [])
    assert "No training steps yet" in page and "Earlier training attempts (1)" in page


def test_the_end_of_training_and_the_compile_decision_read_as_sentences():
    from tokenmill.report.timeline import event_details

    done = {"kind": "train_done", "step": 300, "loss": 4.6034, "seconds": 144.7, "stopped_by": "steps"}
    assert event_details(done) == "loss 4.603 after 144.7 s of training, stopped by train.max_steps"
    compile_ = {"kind": "compile", "enabled": False, "reason": "auto: 300 steps to run < train.compile_min_steps (1000)"}
    assert event_details(compile_) == "torch.compile off: auto: 300 steps to run < train.compile_min_steps (1000)"
