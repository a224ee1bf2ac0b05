"""`tokenmill verify-resume CONFIG`: the exact-resume proof (docs/training.md) on any
user config.

1. The upstream stages (curate → tokenizer → tokenize) are brought up to date through the
   pipeline (cached: nothing reruns when they are fresh).
2. Two scratch runs under `<run>/verify_resume/` share the run's token store by symlink:
   (a) `uninterrupted`: `tokenmill train` once, start to end;
   (b) `killed`: the same training under the restart supervisor, and each time the child logs
       the `train_step` of a chosen step it gets a real SIGKILL; the supervisor restarts it with
       --resume from the latest valid checkpoint. The kill steps are drawn from --seed, after the
       first checkpoint when the run is long enough (a kill before any checkpoint restarts from
       step 0 and proves little).
3. Every `train_step` event of (b), including the steps run again after a resume, must carry
   exactly (bitwise) the loss (a) logged for that step, (b) must cover every step of (a), and the
   final weights must be byte-identical. The verdict, the kills and where each resumed go to
   `<run>/verify_resume.json` and a `verify_resume` event.

Both runs are child processes with the same config (so the same thread count). Evaluation is
switched off inside them (train.eval_every=0: it draws no randomness and changes no number) to
save time. `steps` limits both runs to their first S optimizer steps (train.max_steps=S; that is
a different schedule from the full run's, but the same for (a) and (b)).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tokenmill.config import RunConfig
from tokenmill.errors import UserError
from tokenmill.runs import RunDir, atomic_write_text, event_from_line, read_events
from tokenmill.train.supervisor import Supervised, describe_exit, supervise, train_command

UPSTREAM = ("curate", "tokenizer", "tokenize")
SHARED = ("tokens", "tokenizer")  # read-only inputs the scratch runs link to instead of copying


class VerifyResumeError(UserError, RuntimeError):
    """verify-resume could not carry out the proof (a training child failed, too few steps)."""


# --------------------------------------------------------------------------- setup
def scratch_config(cfg: RunConfig, steps: int | None) -> RunConfig:
    """The config both scratch runs train with: the user's, evaluation off, optionally S steps."""
    data = cfg.model_dump(mode="json")
    data["train"]["eval_every"] = 0
    if steps is not None:
        if steps < 2:
            raise VerifyResumeError(f"--steps {steps}: at least 2 steps are needed to kill a run in the middle")
        data["train"]["max_steps"] = steps
        if data["train"].get("max_tokens") is not None:  # a token budget would override max_steps
            data["train"]["max_tokens"] = None
    return RunConfig.model_validate(data)


def make_scratch(run: RunDir, cfg: RunConfig, dest: Path) -> RunDir:
    """A fresh run directory at `dest` with `cfg` and symlinks to the run's token store and tokenizer."""
    if dest.exists():
        shutil.rmtree(dest)
    scratch = RunDir.create(cfg, dest)
    for name in SHARED:
        src = run.sub(name)
        if src.exists():
            os.symlink(src.resolve(), dest / name, target_is_directory=True)
    return scratch


def choose_kill_steps(seed: int, kills: int, steps: int, ckpt_every: int) -> list[int]:
    """`kills` distinct steps in [1, steps - 1] drawn from `seed`, sorted; from after the first
    checkpoint (ckpt_every + 1 ..) when that range is wide enough."""
    if kills < 1:
        raise VerifyResumeError(f"--kills {kills}: at least one kill is needed")
    late = list(range(ckpt_every + 1, steps)) if ckpt_every > 0 else []
    candidates = late if len(late) >= kills else list(range(1, steps))
    if len(candidates) < kills:
        raise VerifyResumeError(
            f"{kills} kills need at least {kills + 1} training steps, the run has {steps}; raise --steps or lower --kills"
        )
    return sorted(random.Random(seed).sample(candidates, kills))


# --------------------------------------------------------------------------- the killer
@dataclass
class Killer:
    """A supervisor `watch`: reads the child's new events and sends SIGKILL once the child has
    logged the train_step of the next pending kill step (or a later one, when the child resumed
    past it). One kill per child process; only events after the supervisor's `child_started`
    for the running attempt count (a killed child may log a step or two before it dies)."""

    events_path: Path
    pending: list[int]
    offset: int = 0
    live_attempt: int | None = None
    killed_attempts: set[int] = field(default_factory=set)
    sent: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, proc: subprocess.Popen[bytes], attempt: int) -> None:
        if not self.pending or attempt in self.killed_attempts:
            return
        for event in self._new_events():
            if event.get("kind") == "child_started":
                self.live_attempt = event.get("attempt")
            elif event.get("kind") == "train_step" and self.live_attempt == attempt and int(event["step"]) >= self.pending[0]:
                proc.send_signal(signal.SIGKILL)
                self.killed_attempts.add(attempt)
                self.sent.append(
                    {"chosen_step": self.pending.pop(0), "seen_step": int(event["step"]), "attempt": attempt, "pid": proc.pid}
                )
                return

    def _new_events(self) -> list[dict[str, Any]]:
        try:
            with open(self.events_path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # only whole lines: the writer may be mid-line
        self.offset += end
        events = (event_from_line(line) for line in data[:end].splitlines())
        return [e for e in events if e is not None]


# --------------------------------------------------------------------------- comparison
def _bits(x: float) -> bytes:
    return struct.pack("<d", float(x))


def _train_steps(events_path: Path) -> list[tuple[int, float]]:
    return [
        (int(e["step"]), float(e["loss"]))
        for e in read_events(events_path)
        if e.get("kind") == "train_step" and e.get("loss") is not None
    ]


def compare_losses(reference: list[tuple[int, float]], resumed: list[tuple[int, float]]) -> dict[str, Any]:
    """Every (step, loss) of the resumed run against the reference's loss for that step, bitwise.

    A step the reference logged more than once (a guard rollback re-runs steps) may match any of
    its values; the normal case is one value per step, so the check is exact."""
    ref: dict[int, list[float]] = {}
    for step, loss in reference:
        if not any(_bits(v) == _bits(loss) for v in ref.setdefault(step, [])):
            ref[step].append(loss)
    mismatches: list[dict[str, Any]] = []
    max_diff = 0.0
    seen: set[int] = set()
    for step, loss in resumed:
        seen.add(step)
        values = ref.get(step)
        if values is None:
            mismatches.append({"step": step, "resumed": loss, "reference": None})
            max_diff = math.inf
            continue
        if any(_bits(v) == _bits(loss) for v in values):
            continue
        diff = min(abs(v - loss) if not (math.isnan(v) or math.isnan(loss)) else math.inf for v in values)
        max_diff = max(max_diff, diff)
        mismatches.append({"step": step, "resumed": loss, "reference": values[0] if len(values) == 1 else values})
    missing = sorted(set(ref) - seen)
    return {
        "steps_compared": len(ref),
        "events_compared": len(resumed),
        "replayed_events": len(resumed) - len(seen),
        "missing_steps": missing,
        "mismatches": mismatches,
        "max_abs_diff": max_diff,
    }


def kill_records(events_path: Path) -> list[dict[str, Any]]:
    """One record per restart of the killed run, from its events: how the child ended, the last
    step it logged, the checkpoint the restart resumed from and the `resumed` event's step."""
    records: list[dict[str, Any]] = []
    last_step = 0
    current: dict[str, Any] | None = None
    for e in read_events(events_path):
        kind = e.get("kind")
        if kind == "train_step":
            last_step = int(e["step"])
        elif kind == "restart":
            current = {
                "attempt": e.get("attempt"),
                "signal": e.get("signal"),
                "exit_code": e.get("exit_code"),
                "last_logged_step": last_step,
                "resume_checkpoint": e.get("resume_from"),
                "resume_step": e.get("resume_step"),
                "resumed_event_step": None,
            }
            records.append(current)
        elif kind == "resumed" and current is not None and current["resumed_event_step"] is None:
            current["resumed_event_step"] = int(e["step"])
    return records


def _same_bytes(a: Path, b: Path) -> bool | None:
    if not (a.is_file() and b.is_file()):
        return None
    return a.read_bytes() == b.read_bytes()


# --------------------------------------------------------------------------- the proof
def _train(scratch: RunDir, restarts: int, watch: Callable[..., None] | None, label: str) -> Supervised:
    log_path = scratch.sub("train.log")
    cmd = train_command(scratch.sub("config.yaml"), [], scratch.path)
    with open(log_path, "ab") as log:
        result = supervise(
            cmd,
            scratch.path,
            restarts,
            resume=False,
            watch=watch,
            poll_s=0.01,
            stdout=log,
            stderr=subprocess.STDOUT,
            log=lambda msg: None,
        )
    if result.interrupted:
        raise KeyboardInterrupt(f"verify-resume interrupted during the {label} run")
    if result.returncode != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        ended = describe_exit(result.returncode)
        how = f"killed by {ended['signal']}" if ended["signal"] else f"exit code {ended['exit_code']}"
        raise VerifyResumeError(f"the {label} training run failed ({how}); its log is {log_path}:\n{tail}")
    return result


def verify_resume(
    run: RunDir,
    kills: int = 2,
    steps: int | None = None,
    seed: int = 0,
    keep_scratch: bool = False,
    say: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    """Carry out the proof (module docstring); return the result written to verify_resume.json."""
    from tokenmill.pipeline import run_pipeline

    t0 = time.time()
    run_pipeline(run, stages=UPSTREAM)
    cfg = scratch_config(run.config, steps)
    root = run.sub("verify_resume")
    full = make_scratch(run, cfg, root / "uninterrupted")
    killed = make_scratch(run, cfg, root / "killed")

    say(f"(a) uninterrupted run in {full.path}")
    _train(full, 0, None, "uninterrupted")
    reference = _train_steps(full.sub("events.jsonl"))
    total = max((s for s, _ in reference), default=0)
    kill_steps = choose_kill_steps(seed, kills, total, cfg.train.ckpt_every)
    if cfg.train.ckpt_every <= 0 or kill_steps[0] <= cfg.train.ckpt_every:
        say(
            f"warning: train.ckpt_every={cfg.train.ckpt_every} leaves no checkpoint before the kills at "
            f"{kill_steps}: restarts begin at step 0; lower it with --set train.ckpt_every=N"
        )

    say(f"(b) killed run in {killed.path}: SIGKILL after steps {kill_steps}")
    killer = Killer(killed.sub("events.jsonl"), list(kill_steps))
    _train(killed, kills, killer, "killed")
    records = [r for r in kill_records(killed.sub("events.jsonl")) if r["signal"] == "SIGKILL"]
    cmp = compare_losses(reference, _train_steps(killed.sub("events.jsonl")))
    final = f"checkpoints/step_{total}/model.safetensors"
    weights_equal = _same_bytes(full.sub(final), killed.sub(final))

    if len(killer.sent) < kills or len(records) < kills:
        verdict = "inconclusive"
    elif cmp["mismatches"] or cmp["missing_steps"] or weights_equal is False:
        verdict = "mismatch"
    else:
        verdict = "identical"
    result = {
        "config_fingerprint": full.fingerprint("train"),
        "steps": total,
        "seed": seed,
        "kills_requested": kills,
        "kill_steps": kill_steps,
        "kills_performed": len(records),
        "kills": records,
        "resumed_from": [r["resume_step"] for r in records],
        **{k: v for k, v in cmp.items() if k != "mismatches"},
        "mismatches": cmp["mismatches"][:20],
        "mismatch_count": len(cmp["mismatches"]),
        "final_weights_identical": weights_equal,
        "verdict": verdict,
        "seconds": round(time.time() - t0, 2),
        "scratch": str(root) if (keep_scratch or verdict != "identical") else None,
    }
    atomic_write_text(run.sub("verify_resume.json"), json.dumps(result, indent=1, allow_nan=True))
    run.events.write(
        "train",
        "verify_resume",
        verdict=verdict,
        steps=total,
        kills=len(records),
        resumed_from=result["resumed_from"],
        max_abs_diff=cmp["max_abs_diff"],
    )
    if verdict == "identical" and not keep_scratch:
        shutil.rmtree(root, ignore_errors=True)
    return result


def render(result: dict[str, Any]) -> Any:
    """A rich Table of the kills and the comparison, for the CLI."""
    from rich.table import Table

    table = Table(
        title=f"verify-resume: {result['steps']} steps, {result['kills_performed']}/{result['kills_requested']} SIGKILLs"
    )
    for col in ("kill", "signal", "last step logged", "resumed from", "steps run again"):
        table.add_column(col, justify="right")
    for i, r in enumerate(result["kills"], 1):
        again = r["last_logged_step"] - (r["resume_step"] or 0)
        table.add_row(
            str(i),
            str(r["signal"]),
            str(r["last_logged_step"]),
            f"step_{r['resume_step']}" if r["resume_step"] else "start",
            str(max(again, 0)),
        )
    table.caption = (
        f"steps compared {result['steps_compared']}, train_step events compared "
        f"{result['events_compared']} ({result['replayed_events']} replayed), max |diff| "
        f"{result['max_abs_diff']:.3g}, final weights identical: {result['final_weights_identical']}"
    )
    return table
