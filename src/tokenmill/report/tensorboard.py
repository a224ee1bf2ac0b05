"""A run's events as TensorBoard scalars, for users who watch their runs there.

The sources are the same files the HTML report reads: `events.jsonl` (one scalar per numeric
field of every `train_step`) and `eval/<step>.json` (held-out buckets, probes, tasks). TensorBoard
is optional (`pip install 'tokenmill[tensorboard]'`); without it the functions here say so and
write nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

from tokenmill import json_limits
from tokenmill.runs import RunDir, event_from_line, read_events

DEFAULT_LOGDIR = "tensorboard"
INSTALL_HINT = "TensorBoard is not installed: pip install 'tokenmill[tensorboard]' (or: pip install tensorboard)"

# train_step field -> TensorBoard tag. Fields not listed (action, phase, tokens, ...) are not scalars
# worth a chart of their own; grad_norms (per layer group), bucket_loss (per bucket), act_rms and
# attn_logit_max (per layer) are expanded separately.
STEP_TAGS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "update_ratio": "train/update_ratio",
    "tokens_per_s": "perf/tokens_per_s",
    "mfu": "perf/mfu",
    "data_wait_s": "perf/data_wait_s",
    "seconds": "perf/step_seconds",
    "memory_peak": "perf/memory_peak_bytes",
    "ckpt_age_steps": "checkpoint/age_steps",
    "ckpt_age_s": "checkpoint/age_s",
    "r_pad": "data/r_pad",
    "z_loss": "train/z_loss",
    "moe_aux": "train/moe_aux",
}

Scalar = tuple[str, float, int]  # (tag, value, step)


def tensorboard_available() -> bool:
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (needs the tensorboard package)
    except ImportError:
        return False
    return True


def _number(v: Any) -> float | None:
    """A finite-or-not float for a JSON number; None for anything else (bools, strings, None)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def step_scalars(event: dict[str, Any]) -> list[Scalar]:
    """The scalars of one `train_step` event (empty for every other kind)."""
    if event.get("kind") != "train_step" or "step" not in event:
        return []
    step = int(event["step"])
    out = [(tag, v, step) for key, tag in STEP_TAGS.items() if (v := _number(event.get(key))) is not None]
    for group, norm in sorted((event.get("grad_norms") or {}).items()):
        if (v := _number(norm)) is not None:
            out.append((f"grad_norm/{group}", v, step))
    for bucket, loss in sorted((event.get("bucket_loss") or {}).items()):  # train.health signals
        if (v := _number(loss)) is not None:
            out.append((f"bucket_loss/{bucket}", v, step))
    for key, tag in (("act_rms", "activations/rms"), ("attn_logit_max", "activations/attn_logit_max")):
        for layer, value in enumerate(event.get(key) or []):
            if (v := _number(value)) is not None:
                out.append((f"{tag}/layers.{layer}", v, step))
    return out


def eval_scalars(record: dict[str, Any]) -> list[Scalar]:
    """The scalars of one evaluation record (`eval/<step>.json`): buckets, probes and tasks."""
    step = int(record["step"])
    out: list[Scalar] = []
    for bucket, m in sorted((record.get("buckets") or {}).items()):
        for key in ("loss", "bpb"):
            if (v := _number(m.get(key))) is not None:
                out.append((f"eval/{bucket}/{key}", v, step))
    for name, m in sorted((record.get("probes") or {}).items()):
        for key in ("loss", "bpb"):
            if (v := _number(m.get(key))) is not None:
                out.append((f"probes/{name}/{key}", v, step))
    for task in record.get("tasks") or []:
        for key in ("acc", "acc_norm", "acc_bytes"):
            if (v := _number(task.get(key))) is not None:
                out.append((f"tasks/{task['name']}/{key}", v, step))
    return out


def _eval_files(run: RunDir) -> list[Path]:
    folder = run.sub("eval")
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("*.json") if p.stem.isdigit()), key=lambda p: int(p.stem))


def run_scalars(run: RunDir) -> Iterator[tuple[Scalar, float | None]]:
    """Every scalar of a finished or running run, with its wall time (None where the file has none).
    A step replayed after a resume keeps its last record, as in the report's training curve; the
    steps of an attempt that training started over from are left out (report/attempts.py)."""
    from tokenmill.report.attempts import split_attempts

    by_step: dict[int, dict[str, Any]] = {}
    current, _ = split_attempts(read_events(run.sub("events.jsonl")))
    for e in current:
        if e.get("kind") == "train_step" and "step" in e:
            by_step[int(e["step"])] = e
    for step in sorted(by_step):
        for scalar in step_scalars(by_step[step]):
            yield scalar, _number(by_step[step].get("t"))
    for path in _eval_files(run):
        for scalar in eval_scalars(json_limits.load_file(path)):
            yield scalar, None


def _writer(logdir: Path) -> Any:
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(logdir))


def _add(writer: Any, scalar: Scalar, walltime: float | None) -> None:
    tag, value, step = scalar
    if math.isfinite(value):  # TensorBoard charts choke on inf/nan; the report shows those
        writer.add_scalar(tag, value, step, walltime=walltime)


def write_tensorboard(run: RunDir, logdir: Path | None = None) -> Path | None:
    """Write all scalars of `run` to `logdir` (default `<run>/tensorboard`); returns the directory,
    or None (after printing why) when TensorBoard is not installed.

    Idempotent: earlier event files in `logdir` are removed first, so writing the same run twice
    gives one copy of each scalar, not two."""
    if not tensorboard_available():
        print(INSTALL_HINT)
        return None
    logdir = Path(logdir) if logdir is not None else run.sub(DEFAULT_LOGDIR)
    logdir.mkdir(parents=True, exist_ok=True)
    for old in logdir.glob("events.out.tfevents.*"):
        old.unlink()
    writer = _writer(logdir)
    try:
        for scalar, walltime in run_scalars(run):
            _add(writer, scalar, walltime)
    finally:
        writer.close()
    return logdir


class TensorBoardTail:
    """Live export: each `update()` writes the scalars of the events appended to `events.jsonl`
    since the last call and of the evaluation records that appeared since then.

    It reads only whole lines (a line being written is picked up next time) and keeps the byte
    offset, so a long run costs O(new lines) per poll. A fresh tail starts a fresh log directory."""

    def __init__(self, run: RunDir, logdir: Path | None = None):
        if not tensorboard_available():
            raise RuntimeError(INSTALL_HINT)
        self.run = run
        self.logdir = Path(logdir) if logdir is not None else run.sub(DEFAULT_LOGDIR)
        self.logdir.mkdir(parents=True, exist_ok=True)
        for old in self.logdir.glob("events.out.tfevents.*"):
            old.unlink()
        self.offset = 0
        self.evals_done: set[int] = set()
        self.writer = _writer(self.logdir)

    def _new_events(self) -> Iterator[dict[str, Any]]:
        path = self.run.sub("events.jsonl")
        if not path.exists():
            return
        with open(path, "rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read()
        end = chunk.rfind(b"\n") + 1  # up to the last complete line
        self.offset += end
        for line in chunk[:end].splitlines():
            event = event_from_line(line)  # None: torn by a killed writer, too deep, not an object
            if event is not None:
                yield event

    def update(self) -> int:
        """Write what is new; returns the number of scalars written."""
        n = 0
        for event in self._new_events():
            for scalar in step_scalars(event):
                _add(self.writer, scalar, _number(event.get("t")))
                n += 1
        for path in _eval_files(self.run):
            step = int(path.stem)
            if step in self.evals_done:
                continue
            try:
                record = json_limits.load_file(path)
            except ValueError:  # torn or too deep: not an evaluation record yet
                continue
            self.evals_done.add(step)
            for scalar in eval_scalars(record):
                _add(self.writer, scalar, None)
                n += 1
        self.writer.flush()
        return n

    def close(self) -> None:
        self.writer.close()
