"""Atomic, verified checkpoints holding the whole training state S_t.

    checkpoints/step_<N>/
      model.safetensors   parameters (a tied lm_head is stored once, as embed_tokens.weight)
      optim.pt            optimizer.state_dict(): tensors, numbers and strings only, loaded with
                          torch.load(weights_only=True)
      rng.safetensors     torch CPU (and CUDA) generator states as uint8 tensors
      state.json          step, resolved model config, train fingerprint, scheduler / data cursor /
                          accumulation position, guard state, python + numpy RNG states, caller fields
      SHA256SUMS          `sha256sum -c` format, one line per file above

A checkpoint is written into `step_<N>.tmp/`, every file fsynced, the directory fsynced and
renamed to `step_<N>`, then the parent fsynced: a kill at any moment leaves either the previous
set of checkpoints or the new one, never a directory that passes verification half-written.
Loading never executes code from the files (safetensors, weights_only, JSON).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import random
import re
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from tokenmill import json_limits
from tokenmill.errors import UserError
from tokenmill.model import fused
from tokenmill.runs import EventLog

FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")
REQUIRED_FILES = ("model.safetensors", "optim.pt", "rng.safetensors", "state.json")
# A model-only checkpoint (e.g. an average of several, train/averaging.py) holds weights and
# state.json only; its state.json says so with "kind": MODEL_ONLY. It evaluates, never resumes.
MODEL_ONLY = "model_only"
MODEL_ONLY_FILES = ("model.safetensors", "state.json")
# A sharded checkpoint of an FSDP run (train/dist_checkpoint.py): torch.distributed.checkpoint
# shards under dcp/ instead of model.safetensors + optim.pt; its state.json says "kind": DCP_KIND.
DCP_KIND = "dcp"
DCP_REQUIRED_FILES = ("dcp/.metadata", "rng.safetensors", "state.json")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that is missing, partial or does not match its SHA256SUMS."""


# --------------------------------------------------------------------------- files
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_bytes(path: Path, data: bytes) -> str:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- reading
# Checksums only say a file is the one SHA256SUMS lists, and whoever can edit a checkpoint can
# rewrite SHA256SUMS too: what a file holds is checked again when it is parsed, and a refusal
# names the file in one line (never safetensors' or torch's multi-line error).
def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (model.safetensors, rng.safetensors)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        return st_load(data)
    except SafetensorError as exc:
        reason = str(exc).removeprefix("Error while deserializing: ")
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({reason}); the checkpoint is corrupt: "
            "resume from another one, or evaluate another"
        ) from exc


def _unpickle_reason(exc: Exception) -> str:
    """The one informative line of torch's refusal (its message is a page of advice on how to
    load the file with weights_only=False, which tokenmill never does)."""
    text = str(exc)
    after = text.split("WeightsUnpickler error:", 1)[1] if "WeightsUnpickler error:" in text else text
    first = next((ln.strip() for ln in after.splitlines() if ln.strip()), "")
    first = re.split(r"(?<=\.) Please", first)[0]  # "Unsupported global: GLOBAL x. Please file an issue..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def read_optimizer_state(path: Path) -> dict[str, Any]:
    """optim.pt's optimizer state: tensors, numbers and strings only (torch.load weights_only=True
    refuses any other object before constructing it, so no code from the file ever runs)."""
    try:
        with warnings.catch_warnings():  # torch warns about a pickle protocol before it refuses the file
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except (pickle.UnpicklingError, RuntimeError, ValueError, KeyError, EOFError, TypeError, AttributeError) as exc:
        raise CheckpointError(
            f"{path}: not a tensors-only file (torch refused to unpickle it: {_unpickle_reason(exc)}); "
            "tokenmill never runs code from a checkpoint"
        ) from exc
    if not isinstance(state, dict) or not isinstance(state.get("param_groups", []), list):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, not an optimizer state dict; the checkpoint is corrupt")
    return state


# --------------------------------------------------------------------------- RNG
def capture_rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON-safe python + numpy state, torch generator states as tensors)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    js = {
        "python": {"version": version, "state": list(internal), "gauss_next": gauss},
        "numpy": {
            "name": name,
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
    }
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s.cpu()
    return js, tensors


def restore_rng_state(js: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    py = js["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    n = js["numpy"]
    np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(tensors["torch_cpu"])
    cuda = [
        tensors[k] for k in sorted((k for k in tensors if k.startswith("torch_cuda_")), key=lambda k: int(k.rsplit("_", 1)[1]))
    ]
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            warnings.warn(
                f"checkpoint holds {len(cuda)} CUDA RNG states, this machine has "
                f"{torch.cuda.device_count()} devices; CUDA RNG not restored",
                stacklevel=2,
            )


# --------------------------------------------------------------------------- model weights
def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU copies of the persistent parameters/buffers; a tensor shared by two names is kept once
    under its first name (a tied lm_head is stored as embed_tokens.weight, like HF)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, t in model.state_dict().items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else (id(t), 0)
        if key in seen:
            continue
        seen.add(key)
        out[name] = t.detach().to("cpu", copy=True).contiguous()
    return out


def fused_layout(
    model: nn.Module, tensors: dict[str, torch.Tensor], origin: Path, optimizer: bool = False
) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors in the model's fused-projection layout (model/fused.py): a checkpoint
    written before the fusion stores separate q/k/v_proj and gate/up_proj matrices. Its weights
    convert exactly; its optimizer state is per old parameter, so resuming it (`optimizer`) is refused."""
    if not any(n.endswith((fused.SEPARATE_QKV[0], fused.SEPARATE_GATE_UP[0])) for n in tensors):
        return tensors
    if optimizer:
        raise CheckpointError(
            f"{origin}: written with separate q/k/v and gate/up projections, whose optimizer state cannot "
            f"resume the fused model; start a run from its weights instead (train.init_from)"
        )
    return fused.fuse_tensors(tensors, getattr(model, "config"))


def load_model_tensors(model: nn.Module, tensors: dict[str, torch.Tensor], origin: Path, optimizer: bool = False) -> None:
    """Copy stored tensors into the model; the only key allowed missing is a tied duplicate.
    `optimizer`: the caller loads the optimizer state too (see `fused_layout`)."""
    tensors = fused_layout(model, tensors, origin, optimizer)
    expected = model.state_dict()
    missing = set(expected) - set(tensors)
    unexpected = set(tensors) - set(expected)
    tied = {n for n in missing if any(expected[n].data_ptr() == expected[m].data_ptr() for m in tensors if m in expected)}
    if missing - tied or unexpected:
        raise CheckpointError(
            f"{origin}: parameters do not match the model (missing {sorted(missing - tied)}, unexpected {sorted(unexpected)})"
        )
    for name, t in tensors.items():
        if expected[name].shape != t.shape:
            raise CheckpointError(f"{origin}: {name} has shape {tuple(t.shape)}, the model expects {tuple(expected[name].shape)}")
    model.load_state_dict(tensors, strict=False)


# --------------------------------------------------------------------------- listing / verify
def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Every `step_<N>` directory under root (verified or not), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check SHA256SUMS covers every required file and every hash matches; return state.json."""
    path = Path(path)
    sums = path / "SHA256SUMS"
    if not sums.is_file():
        raise CheckpointError(f"{path}: no SHA256SUMS (partial or not a checkpoint)")
    listed: dict[str, str] = {}
    for i, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            raise CheckpointError(f"{sums}:{i}: malformed line {line!r}")
        listed[parts[1].lstrip("*").strip()] = parts[0]
    if "state.json" not in listed:
        raise CheckpointError(f"{path}: SHA256SUMS does not list state.json")
    for name, digest in listed.items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"{path}: {name} is missing")
        actual = _sha256_file(f)
        if actual != digest:
            raise CheckpointError(f"{path}: {name} has SHA-256 {actual[:16]}…, SHA256SUMS says {digest[:16]}…")
    state = json_limits.load_file((path / "state.json"))
    kind = state.get("kind")  # (state.json is verified: its "kind" can be trusted)
    required = {MODEL_ONLY: MODEL_ONLY_FILES, DCP_KIND: DCP_REQUIRED_FILES}.get(kind, REQUIRED_FILES)
    for name in required:
        if name not in listed:
            raise CheckpointError(f"{path}: SHA256SUMS does not list {name}")
    m = _STEP_DIR.match(path.name)
    if m and int(m.group(1)) != state.get("step"):
        raise CheckpointError(f"{path}: state.json says step {state.get('step')}")
    return state


def latest_checkpoint(root: Path, events: EventLog | None = None) -> Path | None:
    """Newest checkpoint that verifies; a corrupt or partial newer one is skipped with a warning
    (and a `checkpoint_corrupt` event when `events` is given). None when there is none."""
    for step, path in reversed(list_checkpoints(root)):
        try:
            verify_checkpoint(path)
            return path
        except (CheckpointError, OSError, ValueError) as exc:
            msg = f"skipping checkpoint {path}: {exc}"
            warnings.warn(msg, stacklevel=2)
            if events is not None:
                events.write("train", "checkpoint_corrupt", step=step, path=str(path), reason=str(exc))
    return None


# --------------------------------------------------------------------------- save / load
def save_checkpoint(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
    keep: int | None = None,
    keep_every: int = 0,
) -> Path:
    """Write `root/step_<step>/` atomically, then apply retention (`retained_steps`): the `keep`
    newest (None or 0: all) plus every step that is a multiple of `keep_every` (0: none).

    `state` (JSON-serialisable) goes into state.json next to the step, RNG states and format.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for p in root.iterdir():  # leftovers of a write or replace that was killed
        if p.is_dir() and (p.name.endswith(".tmp") or p.name.endswith(".old")) and p.name.startswith("step_"):
            shutil.rmtree(p, ignore_errors=True)
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp"
    tmp.mkdir()

    sums: dict[str, str] = {}
    sums["model.safetensors"] = _write_bytes(tmp / "model.safetensors", st_save(model_tensors(model)))
    buf = io.BytesIO()
    torch.save(optimizer.state_dict() if optimizer is not None else {}, buf)
    sums["optim.pt"] = _write_bytes(tmp / "optim.pt", buf.getvalue())
    rng_js, rng_tensors = capture_rng_state()
    sums["rng.safetensors"] = _write_bytes(tmp / "rng.safetensors", st_save(rng_tensors))
    full_state = {
        "format": FORMAT_VERSION,
        "step": int(step),
        "saved_at": time.time(),
        "torch": torch.__version__,
        **state,
        "rng": rng_js,
    }
    sums["state.json"] = _write_bytes(tmp / "state.json", json.dumps(full_state, indent=1, sort_keys=True).encode("utf-8"))
    _write_bytes(tmp / "SHA256SUMS", "".join(f"{d}  {n}\n" for n, d in sums.items()).encode("utf-8"))
    _fsync_dir(tmp)

    old = None
    if final.exists():  # e.g. re-reaching a step whose checkpoint was corrupt
        old = root / f"step_{step}.old"
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(root)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

    if keep is not None and keep > 0:
        existing = list_checkpoints(root)
        survivors = retained_steps([s for s, _ in existing], keep, keep_every, written=step)
        for s, p in existing:
            if s not in survivors:
                shutil.rmtree(p, ignore_errors=True)
        _fsync_dir(root)
    return final


def retained_steps(steps: list[int], keep: int, keep_every: int = 0, written: int | None = None) -> set[int]:
    """The checkpoint steps retention keeps: the `keep` highest, every multiple of `keep_every`
    (milestones for later analysis and averaging), and `written`, the one just saved, even when
    it is not among the highest (a rollback re-writing an older step must never lose it)."""
    ordered = sorted(set(steps))
    keep_set = set(ordered[-keep:]) if keep > 0 else set(ordered)
    if keep_every > 0:
        keep_set |= {s for s in ordered if s % keep_every == 0}
    if written is not None:
        keep_set.add(written)
    return keep_set


def read_state(path: Path) -> dict[str, Any]:
    return json_limits.load_file((Path(path) / "state.json"))


def checkpoint_fingerprint(path: Path) -> str | None:
    """The train fingerprint the checkpoint was written under (None if state.json lacks one)."""
    return read_state(path).get("train_fingerprint")
