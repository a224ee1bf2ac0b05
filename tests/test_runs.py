import json

from tokenmill.config import load_config
from tokenmill.runs import STAGES, RunDir, SkippedLines, event_from_line, is_event_log, read_events


def _run(tmp_path, *overrides):
    return RunDir.create(load_config(None, [f"root={tmp_path}", "name=r", *overrides]))


def test_create_writes_resolved_config(tmp_path):
    run = _run(tmp_path, "train.lr=0.5")
    assert run.path == tmp_path / "r"
    assert "lr: 0.5" in (run.path / "config.yaml").read_text()


def test_events_append_and_torn_line_is_skipped(tmp_path):
    run = _run(tmp_path)
    run.events.write("train", "train_step", step=1, loss=2.5)
    with open(run.path / "events.jsonl", "a") as fh:
        fh.write('{"t": 1, "stage": "tr')  # a writer killed mid-line
    events = list(read_events(run.path / "events.jsonl"))
    assert len(events) == 1 and events[0]["kind"] == "train_step" and events[0]["stage"] == "train"
    assert {"t", "stage", "kind", "step", "loss"} <= set(events[0])


def test_fresh_until_config_or_upstream_or_inputs_change(tmp_path):
    run = _run(tmp_path)
    for s in STAGES:
        run.mark_done(s, inputs=["x"] if s == "curate" else None)
    assert all(run.is_fresh(s, ["x"] if s == "curate" else None) for s in STAGES)
    assert not run.is_fresh("curate", ["y"])

    # A train-only change leaves the data stages fresh and makes train and later stale.
    changed = RunDir(load_config(None, [f"root={tmp_path}", "name=r", "train.lr=0.1"]), run.path)
    assert changed.is_fresh("tokenize")
    assert [s for s in STAGES if not changed.is_fresh(s, ["x"] if s == "curate" else None)] == ["train", "eval", "report"]

    # An upstream config change changes every downstream fingerprint.
    tok = RunDir(load_config(None, [f"root={tmp_path}", "name=r", "tokenizer.vocab_size=300"]), run.path)
    assert [s for s in STAGES if not tok.is_fresh(s, ["x"] if s == "curate" else None)] == list(STAGES[1:])


def test_invalidate_from(tmp_path):
    run = _run(tmp_path)
    for s in STAGES:
        run.mark_done(s)
    run.invalidate_from("train")
    assert [s for s in STAGES if run.finished(s)] == ["curate", "tokenizer", "tokenize"]
    assert json.loads((run.path / ".stages" / "curate.json").read_text())["stage"] == "curate"


def test_reporting_knobs_do_not_change_the_fingerprint(tmp_path):
    base = _run(tmp_path)
    other = RunDir(load_config(None, [f"root={tmp_path}", "name=r", "train.log_every=3", "train.ckpt_every=7",
                                      "train.eval_every=5", "eval.batch_size=2"]), base.path)
    assert all(base.fingerprint(s) == other.fingerprint(s) for s in STAGES)
    assert base.fingerprint("train") != RunDir(load_config(None, ["train.max_steps=3"]), base.path).fingerprint("train")


def test_an_optional_step_that_is_off_stays_out_of_the_fingerprint(tmp_path):
    """Runs made before substring_dedup existed (its section absent) keep their curation fresh after
    an upgrade: while the step is off, none of its settings enter the fingerprint."""
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir

    def fp(*overrides: str) -> str:
        return RunDir(load_config(None, ["name=t", f"root={tmp_path}", *overrides]), tmp_path / "t").fingerprint("curate")

    assert fp() == fp("curate.substring_dedup.k=80")
    assert fp("curate.substring_dedup.enabled=true") != fp()
    assert fp("curate.substring_dedup.enabled=true") != fp("curate.substring_dedup.enabled=true", "curate.substring_dedup.k=80")


def test_synthetic_data_settings_leave_runs_without_synthetic_data_unchanged(tmp_path, monkeypatch):
    """The collapse guard's limits and the sources' `synthetic` flag came after runs were made: a
    run with no synthetic source hashes exactly what it hashed before (no key of them reaches the
    fingerprint), and the limits, which only refuse a mixture, never change a fingerprint."""
    from pathlib import Path

    import tokenmill.runs as runs_mod

    hashed: list = []
    real_hash = runs_mod.sha256_json
    monkeypatch.setattr(runs_mod, "sha256_json", lambda obj: hashed.append(obj) or real_hash(obj))
    cfg = load_config(Path(__file__).resolve().parents[1] / "examples" / "tiny.yaml", [f"root={tmp_path}", "name=r"])
    base = RunDir(cfg, tmp_path / "r")
    prints = {s: base.fingerprint(s) for s in STAGES}
    assert "synthetic" not in json.dumps(hashed)
    limits = RunDir(load_config(None, [f"root={tmp_path}", "name=r", "mixture.synthetic.max_share=0.9",
                                       "mixture.synthetic.max_generation=5"]), base.path)
    default = RunDir(load_config(None, [f"root={tmp_path}", "name=r"]), base.path)
    assert all(limits.fingerprint(s) == default.fingerprint(s) for s in STAGES)
    flagged = cfg.model_copy(deep=True)
    flagged.curate.sources[0].synthetic = True  # a synthetic source is new input: curation reruns
    assert RunDir(flagged, base.path).fingerprint("curate") != prints["curate"]


def test_remove_temporaries_deletes_only_unrenamed_writer_files(tmp_path):
    from tokenmill.runs import remove_temporaries, temporary_name

    keep = [tmp_path / "part-00000.parquet", tmp_path / "b" / ".hidden", tmp_path / "b" / "x.tmp"]
    for p in keep:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    orphans = [temporary_name(tmp_path / "part-00001.parquet"), temporary_name(tmp_path / "b" / "s.npy", ".npy")]
    for p in orphans:
        p.write_text("half")
    assert remove_temporaries(tmp_path) == 2
    assert all(p.exists() for p in keep) and not any(p.exists() for p in orphans)


def test_fields_added_later_are_left_out_of_fingerprints_only_at_their_current_defaults():
    """A run made before a field existed keeps its fingerprint: each LATER_* default must be what
    the config writes for that field today."""
    from tokenmill.config import RunConfig
    from tokenmill.mixture.config import PhaseConfig
    from tokenmill.eval.config import TaskConfig
    from tokenmill.runs import LATER_DEFAULTS, LATER_PHASE_DEFAULTS, LATER_TASK_DEFAULTS, _without_disabled

    fresh = RunConfig.model_validate({"name": "x"})
    for section, fields in LATER_DEFAULTS.items():
        dumped = getattr(fresh, section).model_dump(mode="json")
        for keys, default in fields.items():
            value = dumped
            for key in keys:
                value = value[key]
            assert value == default, (section, keys)
    phase = PhaseConfig(name="p", fraction=1.0).model_dump(mode="json")
    assert all(phase[k] == v for k, v in LATER_PHASE_DEFAULTS.items())
    mixture = {"phases": [dict(phase)], "weights": None}
    assert "rope" not in _without_disabled("mixture", mixture)["phases"][0]
    task = TaskConfig(name="t", path="t.jsonl", format="arc").model_dump(mode="json")
    assert all(task[k] == v for k, v in LATER_TASK_DEFAULTS.items())
    assert set(_without_disabled("eval", {"tasks": [dict(task)]})["tasks"][0]) == set(task) - set(LATER_TASK_DEFAULTS)
    from tokenmill.data.config import ClassifierConfig
    from tokenmill.runs import LATER_CLASSIFIER_DEFAULTS

    clf = ClassifierConfig(name="c", labelled="l.jsonl").model_dump(mode="json")
    assert all(clf[k] == v for k, v in LATER_CLASSIFIER_DEFAULTS.items())
    left = _without_disabled("curate", {"classify": [dict(clf), {**clf, "max_examples": 5}]})["classify"]
    assert "max_examples" not in left[0] and left[1]["max_examples"] == 5


HOSTILE_LINES = ["[1,2,3]", "null", "Infinity", "[" * 100_000 + "]" * 100_000]


def test_lines_that_are_not_json_objects_are_skipped_and_counted(tmp_path):
    """Bare values, a line 100,000 levels deep (a RecursionError for Python's json), bytes that are
    not UTF-8 and a torn last line are skipped; the tally counts them and names the first line."""
    run = _run(tmp_path)
    run.events.write("train", "train_step", step=1, loss=2.5)
    with open(run.path / "events.jsonl", "ab") as fh:
        fh.write("\n".join(HOSTILE_LINES).encode() + b"\n\xff\xfe\n\n")
    run.events.write("train", "train_step", step=2, loss=float("inf"))
    with open(run.path / "events.jsonl", "a") as fh:
        fh.write('{"t": 1, "stage": "tr')
    skipped = SkippedLines()
    events = list(read_events(run.path / "events.jsonl", skipped))
    assert [e["step"] for e in events] == [1, 2] and events[1]["loss"] == float("inf")
    assert (skipped.count, skipped.first) == (6, 2)
    assert skipped.message(run.path / "events.jsonl") == "events.jsonl: skipped 6 lines that are not JSON objects (first at line 2)"
    assert SkippedLines().message(run.path / "events.jsonl") is None
    assert [event_from_line(line) for line in HOSTILE_LINES] == [None] * 4


def test_a_log_whose_first_line_is_too_deep_is_not_an_event_log(tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_text(HOSTILE_LINES[-1] + "\n")
    assert not is_event_log(log)
    log.write_text(json.dumps({"t": 1, "stage": "s", "kind": "k"}) + "\n")
    assert is_event_log(log)


def test_a_stage_record_that_is_too_deep_or_not_an_object_means_not_finished(tmp_path):
    run = _run(tmp_path)
    run.mark_done("curate")
    assert run.finished("curate") is not None
    for text in HOSTILE_LINES:
        (run.path / ".stages" / "curate.json").write_text(text)
        assert run.finished("curate") is None
