"""The run directory: resolved config, one event log for every stage, and stage caching.

A stage is skipped when its fingerprint (its config sections, the fingerprint of the stage
before it, and for curation the raw inputs on disk) equals the one recorded when it last
finished; a stage that reruns forgets that every later stage finished. Stages talk to each other only through files under the run directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tokenmill import json_limits
from tokenmill.config import RunConfig, dump_config

# TEMPORARY and temporary_name lived here first: callers still import them from runs
from tokenmill.ownership import TEMPORARY as TEMPORARY, OwnershipError, claim_dir, read_marker, temporary_name as temporary_name

STAGES: tuple[str, ...] = ("curate", "tokenizer", "tokenize", "train", "eval", "report")

# Config sections each stage depends on; a change in any of them reruns the stage and all later.
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "curate": ("curate",),
    "tokenizer": ("tokenizer",),
    "tokenize": ("tokenize",),
    "train": ("mixture", "model", "train"),
    "eval": ("eval",),
    "report": ("report",),
}

# Knobs that change how a stage reports or how often it saves, never what it computes: changing
# them must not restart a run (training resumes bit-exactly across them).
NOT_FINGERPRINTED: dict[str, frozenset[str]] = {
    "train": frozenset(
        {
            "log_every",
            "ckpt_every",
            "keep_checkpoints",
            "keep_every",
            "eval_every",
            "eval_docs",
            "peak_tflops",
            "distributed",
            "checksum_every",
            "spectrum_every",
            "metrics_every",
            "activation_checkpointing",
            "threads",
            "compile",
            "compile_min_steps",
            "parallel",
            "noise_scale_every",
            "noise_scale_ema",
            "preempt_grace_s",
            "hang_timeout_s",
            "rank_stats_every",
            "slow_rank_margin",
            "slow_rank_patience",
            "health",
        }
    ),
    "eval": frozenset({"batch_size", "tiers"}),  # tiers say when and where evaluation runs, never what it computes
    "tokenize": frozenset({"workers"}),
    "tokenizer": frozenset({"audit_docs", "key_terms"}),
    # the collapse guard only refuses a mixture, it never changes what training computes
    "mixture": frozenset({"prefetch", "max_epochs_warn", "synthetic"}),
}


# Optional steps added to a section after runs were made: while a step is off its settings cannot
# change the stage's output, so they stay out of the fingerprint, and upgrading tokenmill does not
# make the earlier runs' stages stale.
OPTIONAL_STEPS: dict[str, tuple[str, ...]] = {"curate": ("substring_dedup",)}


# Source fields added after runs were made: at their default they stay out of the fingerprint.
LATER_SOURCE_DEFAULTS: dict[str, Any] = {"synthetic": False}
# Classifier fields (curate.classify[]) added after runs were made: at their default they stay out too.
LATER_CLASSIFIER_DEFAULTS: dict[str, Any] = {"max_examples": 20_000}
# Curriculum phase fields added after runs were made: at their default they stay out too.
LATER_PHASE_DEFAULTS: dict[str, Any] = {"rope": None}
# Eval task fields added after runs were made (generative tasks): at their default they stay out too.
LATER_TASK_DEFAULTS: dict[str, Any] = {
    "mode": "auto",
    "generation": {"max_new_tokens": 64, "stop": ["\n\n"], "temperature": 0.0, "top_p": None, "samples": 1, "pass_k": [1], "seed": 0},
    "exact_match": {"strip": True, "regexes_to_ignore": [], "ignore_case": True, "ignore_punctuation": True, "ignore_numbers": False},
    "max_bytes": 64 << 20,
    "max_line_bytes": 4 << 20,
}  # fmt: skip
# Section fields added after runs were made (a path of keys): at their default they stay out too.
LATER_DEFAULTS: dict[str, dict[tuple[str, ...], Any]] = {
    "model": {("rope_original_max_seq_len",): None},
    "mixture": {("replay",): None},
    "eval": {
        ("long_context",): {"enabled": False, "seq_len": None, "position_buckets": 4, "max_docs": 64, "passkey_trials": 40},
        # the whole section at its defaults first; else its later fields one by one
        ("sandbox",): {
            "timeout_s": 10.0,
            "cpu_s": 10,
            "memory_mb": 512,
            "file_size_mb": 16,
            "open_files": 64,
            "max_processes": 4,
            "isolation": "namespaces",
            "disk_mb": 64,
            "max_files": 1024,
            "isolate_network": True,
            "workers": 2,
            "stderr_lines": 20,
        },
        ("sandbox", "isolation"): "namespaces",
        ("sandbox", "disk_mb"): 64,
        ("sandbox", "max_files"): 1024,
    },
    "tokenizer": {("file",): None},
    "train": {
        ("init_from",): None,
        ("init_optimizer",): False,
        ("fp8",): False,
        ("loss_scale",): {
            "init_scale": 65536.0,
            "growth_factor": 2.0,
            "backoff_factor": 0.5,
            "growth_interval": 2000,
            "min_scale": 1.0,
            "max_overflows_at_floor": 10,
        },  # fmt: skip
        ("faults", "kill"): None,
        ("faults", "hang"): None,
        ("faults", "slow"): None,
        ("guard", "severe_factor"): 2.0,
        ("guard", "keep_spike_states"): 2,
        ("guard", "rollback_rewind"): True,
        ("faults", "poison_bucket"): None,
        ("faults", "poison_steps"): None,
        ("faults", "collapse_embedding"): None,
        ("faults", "collapse_rate"): 0.95,
        ("parallel", "cp"): 1,
        ("parallel", "zero"): None,
        ("optimizer",): "adamw",
        ("muon_lr",): 0.02,
        ("muon_momentum",): 0.95,
        ("muon_weight_decay",): 0.0,
        ("muon_ns_steps",): 5,
        ("muon_adjust_lr",): "original",
        ("parallel", "sequence_parallel"): True,
    },
    "curate": {
        ("decontaminate", "set_max_overlap"): {},
        ("model_quality", "keep_top_percent"): None,
        ("classify",): [],
        ("licenses",): {},
        ("license_policy",): {"require": [], "exclude_if": [], "bucket_by_permission": {}},
        ("safety", "labelled"): None,
        ("safety", "band"): [0.005, 0.25],
        ("safety", "classifier_threshold"): 0.5,
        ("safety", "max_examples"): 20_000,
    },
}


def _without_disabled(section: str, values: dict[str, Any]) -> dict[str, Any]:
    for step in OPTIONAL_STEPS.get(section, ()):
        if not (values.get(step) or {}).get("enabled", False):
            values.pop(step, None)
    for src in values.get("sources", []) if section == "curate" else []:
        for key, default in LATER_SOURCE_DEFAULTS.items():
            if src.get(key, default) == default:
                src.pop(key, None)
    for clf in values.get("classify", []) if section == "curate" else []:
        for key, default in LATER_CLASSIFIER_DEFAULTS.items():
            if clf.get(key, default) == default:
                clf.pop(key, None)
    for phase in values.get("phases", []) if section == "mixture" else []:
        for key, default in LATER_PHASE_DEFAULTS.items():
            if phase.get(key, default) == default:
                phase.pop(key, None)
    for task in values.get("tasks", []) if section == "eval" else []:
        for key, default in LATER_TASK_DEFAULTS.items():
            if task.get(key, default) == default:
                task.pop(key, None)
    for keys, default in LATER_DEFAULTS.get(section, {}).items():
        parent = values
        for key in keys[:-1]:
            parent = parent.get(key) or {}
        if parent.get(keys[-1], default) == default:
            parent.pop(keys[-1], None)
    return values


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def remove_temporaries(directory: Path) -> int:
    """Delete the temporary files that writers killed mid-write left under a directory (their
    file was never renamed into place, so it holds nothing); how many were removed."""
    gone = 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            if TEMPORARY.match(name):
                os.unlink(os.path.join(root, name))
                gone += 1
    return gone


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a kill never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class EventLog:
    """Append-only JSONL timeline: {"t": unix time, "stage": ..., "kind": ..., ...}."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, stage: str, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"t": round(time.time(), 3), "stage": stage, "kind": kind, **fields}
        line = json.dumps(event, default=_json_default, allow_nan=True)
        # One write call per line, O_APPEND: a killed process leaves at most one partial line.
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        return event

    def read(self) -> list[dict[str, Any]]:
        return list(read_events(self.path))


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def event_from_line(line: bytes | str) -> dict[str, Any] | None:
    """The event on one line of an event log, or None when the line is not a JSON object: torn by
    a killed writer, not UTF-8, nested deeper than json_limits allows, or a bare value (`null`,
    `[1,2,3]`, `Infinity`). The log may be appended to by anything, so a reader skips such a line."""
    try:
        event = json_limits.loads(line)
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError and TooDeep are ValueErrors
        return None
    return event if isinstance(event, dict) else None


@dataclass
class SkippedLines:
    """How many lines of a log a reader skipped, and the first one's number (1-based)."""

    count: int = 0
    first: int | None = None

    def add(self, lineno: int) -> None:
        self.count += 1
        if self.first is None:
            self.first = lineno

    def message(self, path: Path) -> str | None:
        """One line for the user, None when nothing was skipped."""
        if not self.count:
            return None
        lines = "line that is" if self.count == 1 else "lines that are"
        return f"{path.name}: skipped {self.count} {lines} not JSON objects (first at line {self.first})"


def read_events(path: Path, skipped: SkippedLines | None = None) -> Iterator[dict[str, Any]]:
    """Events in order. A line that is not a JSON object (see event_from_line; also a torn last
    line, the writer killed mid-write) is skipped, and counted in `skipped` when one is given."""
    if not path.exists():
        return
    with open(path, "rb") as fh:  # bytes: a line that is not UTF-8 is one bad line, not a crash
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            event = event_from_line(line)
            if event is not None:
                yield event
            elif skipped is not None:
                skipped.add(lineno)


def is_event_log(path: Path) -> bool:
    """The file's first line is a tokenmill event ({"t", "stage", "kind", ...}). Only that line is
    read (at most 64 KB of it): a user's big file is not scanned for a line that happens to parse."""
    try:
        with open(path, "rb") as fh:
            first = event_from_line(fh.readline(1 << 16))
    except OSError:
        return False
    return first is not None and {"t", "stage", "kind"} <= set(first)


def check_event_log(path: Path) -> None:
    """Refuse to append events to a file someone else wrote (an empty or absent one is fine)."""
    if os.path.lexists(path) and (not path.is_file() or (path.stat().st_size and not is_event_log(path))):
        raise OwnershipError(
            f"{path}: exists and is not a tokenmill event log; refusing to append to it "
            "(move it away or choose another output name)"
        )


def is_legacy_run_dir(path: Path) -> bool:
    """A run directory of a tokenmill made before the ownership marker: it has stage records, or a
    config.yaml beside an event log whose first line is a tokenmill event."""
    if (path / ".stages").is_dir():
        return True
    return (path / "config.yaml").is_file() and is_event_log(path / "events.jsonl")


def claim_experiment_dir(directory: Path, stage: str, name: str, config_file: str) -> None:
    """The directory of an experiment of several runs (a sweep, an ablation, a mixture or source
    study): new, empty, tokenmill's, or an earlier version's (its `config_file`, or the `data/`
    run directory its runs share). Refused in one line before any run starts."""

    def earlier(d: Path) -> bool:
        return (d / config_file).is_file() or (
            (d / "data").is_dir() and (read_marker(d / "data") is not None or is_legacy_run_dir(d / "data"))
        )

    claim_dir(directory, stage, run=name, legacy=earlier, hint=" (set `name`/`root` in the experiment's file to a new directory)")


@dataclass
class RunDir:
    """One run: its config, its directory and its event log."""

    config: RunConfig
    path: Path

    @classmethod
    def create(cls, config: RunConfig, path: Path | None = None) -> "RunDir":
        """Open the run directory: a new or empty one, or one tokenmill made (else OwnershipError,
        before anything is written). config.yaml is written here only for a new run; a stage
        rewrites it when it starts (record_config), after its own config checks passed."""
        run = cls(config=config, path=Path(path) if path is not None else config.run_dir)
        claim_dir(
            run.path,
            "run",
            run=config.name,
            legacy=is_legacy_run_dir,
            hint=" (set `name`/`root` or --run-dir to a new directory)",
        )
        if not (run.path / "config.yaml").exists():
            run.record_config()
        return run

    def record_config(self) -> None:
        """Write the resolved config as config.yaml (only when it changed)."""
        path, text = self.path / "config.yaml", dump_config(self.config)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            atomic_write_text(path, text)

    @property
    def events(self) -> EventLog:
        return EventLog(self.path / "events.jsonl")

    def sub(self, *parts: str) -> Path:
        return self.path.joinpath(*parts)

    # -- stage caching --------------------------------------------------------
    def _marker(self, stage: str) -> Path:
        return self.path / ".stages" / f"{stage}.json"

    def finished(self, stage: str) -> dict[str, Any] | None:
        marker = self._marker(stage)
        if not marker.exists():
            return None
        try:
            record = json_limits.loads(marker.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):  # torn or foreign: the stage is not known to be done
            return None
        return record if isinstance(record, dict) else None

    def finished_record(self, stage: str) -> dict[str, Any]:
        """The record of a stage the caller has just run (or found fresh): its absence is a bug, said by name."""
        done = self.finished(stage)
        if done is None:
            raise RuntimeError(f"{self.path}: stage {stage!r} has no finished record")
        return done

    def fingerprint(self, stage: str, inputs: Any = None) -> str:
        """Hash of the stage's config sections, the previous stage's fingerprint and its inputs."""
        idx = STAGES.index(stage)
        sections = {
            s: _without_disabled(s, getattr(self.config, s).model_dump(mode="json", exclude=set(NOT_FINGERPRINTED.get(s, ()))))
            for s in STAGE_SECTIONS[stage]
        }
        # Raw-input changes reach later stages through invalidation: a stage that reruns
        # forgets every later stage (see pipeline.run_stage).
        upstream = self.fingerprint(STAGES[idx - 1]) if idx > 0 else None
        return sha256_json(
            {"stage": stage, "seed": self.config.seed, "sections": sections, "upstream": upstream, "inputs": inputs}
        )

    def is_fresh(self, stage: str, inputs: Any = None) -> bool:
        done = self.finished(stage)
        return done is not None and done.get("fingerprint") == self.fingerprint(stage, inputs)

    def mark_done(self, stage: str, inputs: Any = None, summary: dict[str, Any] | None = None) -> None:
        record = {
            "stage": stage,
            "fingerprint": self.fingerprint(stage, inputs),
            "finished_at": time.time(),
            "summary": summary or {},
        }
        atomic_write_text(self._marker(stage), json.dumps(record, indent=1, default=_json_default))
        self.events.write(stage, "stage_done", **(summary or {}))

    def invalidate_from(self, stage: str) -> None:
        """Forget that this stage and every later one finished (their outputs are now stale)."""
        for s in STAGES[STAGES.index(stage) :]:
            self._marker(s).unlink(missing_ok=True)
