"""Checkpoint averaging: the element-wise mean of the weights of the last n checkpoints.

Averaging the weights of checkpoints late in training (a cheap "model soup" along one run) often
evaluates better than the last checkpoint alone, especially before the learning rate has
decayed. The result is a model-only checkpoint directory

    <out>/model.safetensors   the mean, computed in float64, stored in each tensor's own dtype
    <out>/state.json          kind "model_only", step (the newest averaged), averaged_from
                              (the steps), the model config
    <out>/SHA256SUMS

written like every checkpoint (temporary directory, fsync, rename), which `load_model` and
`tokenmill eval --checkpoint` accept. Its name never matches `step_<N>`, so
`latest_checkpoint` and `--resume` never mistake it for a resumable training state. The inputs
may be full checkpoints or an FSDP run's sharded (dcp) ones, gathered in this process.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors.torch import save as st_save

from tokenmill import json_limits
from tokenmill.ownership import publish_entries, temporary_name
from tokenmill.runs import RunDir
from tokenmill.train.checkpoint import (
    _STEP_DIR,
    DCP_KIND,
    FORMAT_VERSION,
    MODEL_ONLY,
    CheckpointError,
    _fsync_dir,
    _write_bytes,
    list_checkpoints,
    model_tensors,
    read_state,
    read_tensors,
    verify_checkpoint,
)
from tokenmill.train.restore import load_model


def last_valid_checkpoints(root: Path, n: int) -> list[Path]:
    """The `n` newest checkpoints under `root` that verify, oldest first; a corrupt one is skipped
    with a warning (it would poison the mean)."""
    if n < 1:
        raise CheckpointError(f"--last must be at least 1, got {n}")
    chosen: list[Path] = []
    skipped: list[str] = []
    for step, path in reversed(list_checkpoints(root)):
        if len(chosen) == n:
            break
        try:
            verify_checkpoint(path)
        except (CheckpointError, OSError, ValueError) as exc:
            skipped.append(f"step_{step} ({exc})")
            warnings.warn(f"not averaging {path}: {exc}", stacklevel=2)
            continue
        chosen.append(path)
    if len(chosen) < n:
        have = ", ".join(p.name for p in reversed(chosen)) or "none"
        bad = f"; skipped as corrupt: {'; '.join(skipped)}" if skipped else ""
        raise CheckpointError(
            f"{root}: {len(chosen)} valid checkpoint(s) ({have}), {n} needed for --last {n}{bad}. Lower --last, "
            f"or keep more checkpoints (train.keep_checkpoints / train.keep_every) and train further"
        )
    return list(reversed(chosen))


def _config_diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def mean_tensors(paths: Sequence[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model.safetensors of `paths`: accumulated in float64 one file at a
    time (one model in memory plus the accumulator), cast back to each tensor's dtype once.
    Non-float tensors (integer buffers) must be equal in every checkpoint and are kept as they are."""
    acc: dict[str, torch.Tensor] = {}
    first: dict[str, torch.Tensor] = {}
    for i, path in enumerate(paths):
        tensors = _weights(Path(path))
        if i == 0:
            first = tensors
            acc = {k: t.to(torch.float64) for k, t in tensors.items() if t.is_floating_point()}
            continue
        if set(tensors) != set(first):
            raise CheckpointError(
                f"{path}: tensors {sorted(set(tensors) ^ set(first))} are not in both "
                f"{path} and {paths[0]}; only checkpoints of one model can be averaged"
            )
        for k, t in tensors.items():
            ref = first[k]
            if t.shape != ref.shape or t.dtype != ref.dtype:
                raise CheckpointError(f"{path}: {k} is {tuple(t.shape)} {t.dtype}, {paths[0]} has {tuple(ref.shape)} {ref.dtype}")
            if k in acc:
                acc[k] += t.to(torch.float64)
            elif not torch.equal(t, ref):
                raise CheckpointError(f"{path}: non-float tensor {k} differs from {paths[0]}; it cannot be averaged")
    n = len(paths)
    return {k: (acc[k] / n).to(t.dtype).contiguous() if k in acc else t for k, t in first.items()}


def _weights(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's stored model tensors; a sharded (FSDP, dcp) checkpoint is first gathered
    into a plain model by `load_model`, in this process."""
    if read_state(path).get("kind") == DCP_KIND:
        return model_tensors(load_model(path)[0])
    return read_tensors(path / "model.safetensors")


def average_checkpoints(paths: Sequence[Path], out: Path) -> Path:
    """Write the mean of the model weights of `paths` (checkpoints of one model config) to `out`
    as a model-only checkpoint; return `out`. An existing model-only checkpoint at `out` is
    replaced atomically; anything else there is refused."""
    paths = [Path(p) for p in paths]
    out = Path(out)
    if not paths:
        raise CheckpointError("no checkpoints to average")
    if _STEP_DIR.match(out.name):
        raise CheckpointError(
            f"{out}: an average must not be named step_<N>: --resume would take it for a training checkpoint; choose another name"
        )
    states = [verify_checkpoint(p) for p in paths]
    ref_cfg = states[0].get("model_config")
    if ref_cfg is None:
        raise CheckpointError(f"{paths[0]}: state.json has no model_config")
    for p, st in zip(paths[1:], states[1:]):
        if st.get("model_config") != ref_cfg:
            raise CheckpointError(
                f"{p} and {paths[0]} have different model configs "
                f"({'; '.join(_config_diff(st.get('model_config') or {}, ref_cfg))}); "
                f"only checkpoints of one model can be averaged"
            )
    if out.exists() and not _replaceable(out):
        raise CheckpointError(f"{out} exists and is not a model-only checkpoint; choose another -o/--out")

    tensors = mean_tensors(paths)
    steps = [int(st["step"]) for st in states]
    newest = max(range(len(states)), key=lambda i: steps[i])
    state = {
        "format": FORMAT_VERSION,
        "kind": MODEL_ONLY,
        "step": steps[newest],
        "averaged_from": steps,
        "averaged_paths": [str(p) for p in paths],
        "model_config": ref_cfg,
        "tokens": states[newest].get("tokens"),
        "saved_at": time.time(),
        "torch": torch.__version__,
    }
    _write_atomically(out, tensors, state)
    return out


def _replaceable(out: Path) -> bool:
    if out.is_dir() and not any(out.iterdir()):
        return True
    try:
        return json_limits.load_file((out / "state.json")).get("kind") == MODEL_ONLY
    except (OSError, ValueError):
        return False


MODEL_ONLY_FILES = ("model.safetensors", "state.json", "SHA256SUMS")


def _write_atomically(out: Path, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    """Same protocol as save_checkpoint: a .tmp directory, every file fsynced, renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(out)  # only this process uses the name: an OUT.tmp or OUT.old of the user's is never touched
    tmp.mkdir()
    sums = {
        "model.safetensors": _write_bytes(tmp / "model.safetensors", st_save(tensors)),
        "state.json": _write_bytes(tmp / "state.json", json.dumps(state, indent=1, sort_keys=True).encode()),
    }
    _write_bytes(tmp / "SHA256SUMS", "".join(f"{d}  {n}\n" for n, d in sums.items()).encode("utf-8"))
    _fsync_dir(tmp)
    if out.exists():  # empty, or an earlier average (_replaceable): replace only the files tokenmill writes
        publish_entries(tmp, out, MODEL_ONLY_FILES)
        tmp.rmdir()
        _fsync_dir(out)
    else:
        os.replace(tmp, out)
    _fsync_dir(out.parent)


def average_last(run: RunDir, n: int, out: Path | None = None) -> Path:
    """`tokenmill checkpoint average`: the mean of the run's last `n` valid checkpoints, written to
    `out` (default `<run>/checkpoints/avg_last<n>`), recorded as a `checkpoint_average` event."""
    paths = last_valid_checkpoints(run.sub("checkpoints"), n)
    target = Path(out) if out is not None else run.sub("checkpoints", f"avg_last{n}")
    average_checkpoints(paths, target)
    # last_valid_checkpoints lists step_<N> directories only: each name matches
    steps = [int(_STEP_DIR.match(p.name).group(1)) for p in paths]  # type: ignore[union-attr]
    run.events.write("train", "checkpoint_average", path=str(target), steps=steps)
    return target
