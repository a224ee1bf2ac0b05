"""Checkpoints of an earlier training setup are moved aside, never deleted.

When `tokenmill run` restarts training (the config or data changed since the newest checkpoint,
or `--force train`), the run's `checkpoints/` directory is renamed to
`checkpoints.stale-<UTC time>-<reason>/` beside it, and `eval/` (the evaluations of those
checkpoints) moves into it, with the config.yaml they were trained under and a `.tokenmill`
marker. A rename within the run directory: nothing is copied or deleted, hours of training cost
one line, and the directory is still a checkpoints directory (`train.init_from` starts from it,
`tokenmill eval --checkpoint` scores its step_<N>). Deleting it is the user's decision.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from tokenmill.ownership import write_marker
from tokenmill.runs import RunDir

STALE_PREFIX = "checkpoints.stale-"
STAGE = "stale-checkpoints"  # the marker's stage: tokenmill's checkpoints of an earlier setup


def stale_name(run_path: Path, reason: str, now: float | None = None) -> Path:
    """A path beside checkpoints/ that nothing holds yet: checkpoints.stale-<UTC time>-<reason>[-k]."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    base = run_path / f"{STALE_PREFIX}{stamp}-{reason}"
    path, k = base, 1
    while os.path.lexists(path):  # a rename onto an existing empty directory would replace it
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def set_aside(run: RunDir, reason: str) -> Path | None:
    """Move `checkpoints/` and `eval/` out of the way of a new training run; the directory they are
    now in, or None when the run has neither. Call it after every config check passed and before
    config.yaml is rewritten: the copy of config.yaml beside them is the config they belong to."""
    ckpt, evals = run.sub("checkpoints"), run.sub("eval")
    if not os.path.lexists(ckpt) and not os.path.lexists(evals):
        return None
    dest = stale_name(run.path, reason)
    if os.path.lexists(ckpt):
        os.rename(ckpt, dest)  # one rename: a kill leaves the checkpoints in one place or the other
    else:
        dest.mkdir()
    if os.path.lexists(evals):
        os.rename(evals, dest / "eval")
    config = run.sub("config.yaml")
    if config.is_file() and not os.path.lexists(dest / "config.yaml"):
        shutil.copy2(config, dest / "config.yaml")
    write_marker(dest, STAGE, run=run.config.name, outputs=[e.name for e in dest.iterdir()])
    return dest
