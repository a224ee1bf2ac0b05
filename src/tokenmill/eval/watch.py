"""`tokenmill eval --watch RUN`: the expensive evaluation tier in its own process, off the training path.

The watcher follows the run's checkpoint directory and scores every due checkpoint with the full
`tokenmill eval` (CheckpointScorer: held-out buckets, samples, probes, tasks, audits) on its own
device, writing `eval/watch/step_<N>.json` atomically. It only reads what the trainer writes: a
`checkpoints/step_<N>` directory exists only once it is complete (the trainer renames it into
place, train/checkpoint.py), and the run has finished when the newest training process logged
`train_done`. A checkpoint that retention deletes before it is scored is skipped with one line; a
watcher started again skips the checkpoints it already scored.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import torch

from tokenmill.eval.config import TiersConfig
from tokenmill.runs import RunDir, atomic_write_text, event_from_line
from tokenmill.eval.table import bpb_text

WATCH_SOURCE = "watch"  # the "source" of every record the watcher writes (report/run_files.py reads them back)


def watch_path(run: RunDir, step: int) -> Path:
    return run.sub("eval", "watch", f"step_{step:06d}.json")


class TrainEnd:
    """Follows the run's events.jsonl from where it last stopped, so a poll reads only the lines
    written since (a long run's log has a line per step): `()` is the step of the `train_done`
    that closed the newest training process, None while one runs (a `stage_start` of training
    after a `train_done` means a resumed or restarted run). A line still being written is read at
    the next call; a log that shrank (rewritten) is read again from the start."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0
        self.done: int | None = None

    def __call__(self) -> int | None:
        if not self.path.is_file():
            return self.done
        if self.path.stat().st_size < self.offset:
            self.offset, self.done = 0, None
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break
                self.offset += len(raw)
                self._see(raw)
        return self.done

    def _see(self, raw: bytes) -> None:
        e = event_from_line(raw)  # None for a line that is not a JSON object (deep, torn, a bare value)
        if e is None or e.get("stage") != "train":
            return
        if e.get("kind") == "stage_start":
            self.done = None
        elif e.get("kind") == "train_done":
            self.done = int(e.get("step", 0))


def finished_step(run: RunDir) -> int | None:
    """TrainEnd read once over the whole log."""
    return TrainEnd(run.sub("events.jsonl"))()


def is_due(step: int, period: int, final: int | None) -> bool:
    """A checkpoint is scored when its step is a multiple of `period` (train.ckpt_every times
    every_checkpoints; 0: none periodic) or it is the run's last step."""
    return step == final or (period > 0 and step % period == 0)


def watch_device(spec: str) -> torch.device:
    """'auto': the last CUDA device when there is one (a one-GPU trainer takes the first), else cpu."""
    from tokenmill.train.device import resolve_device

    if spec.strip().lower() == "auto":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return torch.device(f"cuda:{n - 1}" if n else "cpu")
    return resolve_device(spec)


class Watcher:
    """One pass (`poll`) scores every due, unscored checkpoint on disk; `run` polls until the run ends."""

    def __init__(self, run: RunDir, device: torch.device, say: Callable[[str], None]):
        self.run, self.device, self.say = run, device, say
        self.handled: set[int] = set()  # steps scored, found scored, or gone
        self.scored: list[int] = []
        self.skipped: list[int] = []
        self._scorer: Any = None  # built at the first checkpoint: the token store may not exist before training
        self._config_text = ""
        self.train_end = TrainEnd(run.sub("events.jsonl"))
        self.use_config(run.config)

    def use_config(self, config: Any) -> None:
        tiers = config.eval.tiers or TiersConfig()
        self.run = RunDir(config=config, path=self.run.path)
        self.period = config.train.ckpt_every * tiers.expensive.every_checkpoints
        self.poll_seconds = tiers.expensive.poll_seconds
        self._scorer = None

    def refresh(self) -> None:
        """Read config.yaml again when it changed: the trainer rewrites it when it starts (with its
        --set overrides), which may be after this watcher started."""
        from tokenmill.config import load_config

        path = self.run.sub("config.yaml")
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if text and text != self._config_text:
            self.use_config(load_config(path))
            self._config_text = text

    def scorer(self) -> Any:
        from tokenmill.eval.evaluate import CheckpointScorer

        if self._scorer is None:
            self._scorer = CheckpointScorer(self.run, self.device)
        return self._scorer

    def poll(self, final: int | None) -> None:
        from tokenmill.train.checkpoint import list_checkpoints

        for step, path in list_checkpoints(self.run.sub("checkpoints")):
            if step in self.handled or not is_due(step, self.period, final):
                continue
            self.handled.add(step)
            if watch_path(self.run, step).exists():  # a watcher before this one scored it
                continue
            self.score(step, path)

    def score(self, step: int, path: Path) -> None:
        from tokenmill.train.checkpoint import CheckpointError, verify_checkpoint

        try:
            verify_checkpoint(path)
            record = self.scorer().score(path)
        except Exception as exc:  # noqa: BLE001 - a checkpoint deleted under us fails anywhere in loading
            if isinstance(exc, CheckpointError) and path.exists():  # corrupt on disk: the trainer skips it too
                self.skipped.append(step)
                self.say(f"step {step}: {exc}; skipped")
                return
            if path.exists():
                raise
            self.skipped.append(step)
            self.say(f"step {step}: checkpoint removed by retention before it was scored, skipped ({type(exc).__name__})")
            return
        record = {"source": WATCH_SOURCE, "device": str(self.device), **record}
        atomic_write_text(watch_path(self.run, step), json.dumps(record, indent=1))
        self.scored.append(step)
        bpb = ", ".join(f"{b} bpb {bpb_text(m, 4)}" for b, m in record["buckets"].items())
        self.say(f"step {step}: scored ({bpb})")

    def run_until_done(self) -> dict[str, Any]:
        """Poll until training has finished and every due checkpoint is scored; Ctrl-C stops between
        files (every result is already written whole)."""
        try:
            while True:
                self.refresh()
                final = self.train_end()  # read before listing: the last checkpoint precedes train_done
                self.poll(final)
                if final is not None:
                    return {"scored": self.scored, "skipped": self.skipped, "final_step": final}
                time.sleep(self.poll_seconds)
        except KeyboardInterrupt:
            import shlex

            again = f"tokenmill eval --watch {shlex.quote(str(self.run.path))}"
            raise KeyboardInterrupt(
                f"eval --watch stopped after scoring {len(self.scored)} checkpoint(s); `{again}` goes on"
            ) from None
