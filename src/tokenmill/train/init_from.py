"""`train.init_from`: a run that starts from trained weights — another run's checkpoint or a local
Hugging Face Llama directory (export/hf_import.py, parity-checked on load) — instead of a random
init. Only the weights are inherited: the optimizer, the schedule and the data order are the new
run's. The run's model config must describe the same parameters (every tensor's shape), so a
mismatch is refused naming the tensors; RoPE settings may differ (that is how a context is
extended).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tokenmill.errors import UserError


class InitFromError(UserError, ValueError):
    """The weights named by train.init_from cannot initialize this run's model."""


def load_source(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state dict, what it is) of a tokenmill checkpoint or an HF Llama directory."""
    if is_hf_dir(path):
        from tokenmill.export.hf_import import import_hf

        model, info = import_hf(path)
        return model.state_dict(), info
    from tokenmill.train.checkpoint import CheckpointError, latest_checkpoint
    from tokenmill.train.restore import load_model

    try:
        ckpt = path if (path / "state.json").is_file() else latest_checkpoint(path)
        model, step = load_model(ckpt if ckpt is not None else path, "cpu")
    except CheckpointError as exc:
        raise InitFromError(f"train.init_from {path}: {exc}") from exc
    return model.state_dict(), {
        "from": str(path.resolve()),
        "format": "tokenmill",
        "step": step,
        "checkpoint": str(Path(ckpt).resolve()) if ckpt is not None else None,
        "model_config": model.config.model_dump(mode="json"),
    }


def init_optimizer(optimizer: torch.optim.Optimizer, info: dict[str, Any]) -> None:
    """Load the source checkpoint's AdamW state (moments and step counts) into `optimizer`."""
    if info.get("format") != "tokenmill" or not info.get("checkpoint"):
        raise InitFromError(
            f"train.init_optimizer: {info.get('from')} is a {info.get('format')} model, which "
            f"carries no optimizer state (only a tokenmill checkpoint does)"
        )
    path = Path(info["checkpoint"]) / "optim.pt"
    if not path.is_file():
        raise InitFromError(f"train.init_optimizer: {path} not found (an FSDP or averaged checkpoint keeps none)")
    from tokenmill.train.checkpoint import read_optimizer_state

    saved = read_optimizer_state(path)  # a file that is not tensors-only: one line naming it
    try:
        optimizer.load_state_dict(saved)
    except (ValueError, KeyError) as exc:
        raise InitFromError(
            f"train.init_optimizer: {path} does not fit this run's optimizer ({exc}); its "
            f"parameter groups come from the source's train settings"
        ) from exc


def check_source(source: str | None) -> None:
    """Refuse a `train.init_from` that cannot be loaded before any stage runs, not after curation,
    tokenization or a checkpoint was moved aside: a path that is not there, one that is neither a
    tokenmill checkpoint, a checkpoints directory nor an HF Llama directory, and an HF directory
    whose config.json and weights do not agree (only config.json and the headers are read)."""
    if not source:
        return
    path = Path(source).expanduser()
    if not path.exists():
        raise InitFromError(f"train.init_from {path}: not found")
    if is_hf_dir(path):
        from tokenmill.export.hf_import import check_hf_dir

        check_hf_dir(path)
        return
    from tokenmill.train.checkpoint import list_checkpoints

    if not (path / "state.json").is_file() and not list_checkpoints(path):
        raise InitFromError(
            f"train.init_from {path}: neither a tokenmill checkpoint (state.json), a checkpoints "
            f"directory (step_<N>/) nor a Hugging Face Llama directory (config.json)"
        )


def is_hf_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and not (path / "state.json").is_file()


def source_tokenizer(source: str) -> Path | None:
    """The tokenizer.json the source model was trained with: the one beside an HF model's
    config.json, or the tokenizer of the run a tokenmill checkpoint belongs to (None: unknown)."""
    path = Path(source).expanduser()
    if is_hf_dir(path):
        return path / "tokenizer.json" if (path / "tokenizer.json").is_file() else None
    from tokenmill.export.hf import find_run_tokenizer

    return find_run_tokenizer(path)


def check_store_tokenizer(source: str, store_sha: str | None, store_root: Path) -> str | None:
    """Refuse a token store made with another tokenizer than the source model's (its ids would mean
    other strings to the inherited embeddings); the warning to log when that cannot be checked."""
    tok = source_tokenizer(source)
    if tok is None:
        return (
            f"train.init_from {source}: no tokenizer.json beside the model, so the token store's tokenizer "
            f"cannot be checked against the model's"
        )
    if store_sha is None:
        return f"token store {store_root} does not record its tokenizer, so it cannot be checked against {tok}"
    model_sha = canonical_sha256(tok)
    if model_sha != store_sha:
        raise InitFromError(
            f"train.init_from {source}: the token store {store_root} was made with another tokenizer (sha256 "
            f"{store_sha[:12]}) than the model's {tok} ({model_sha[:12]}); leave tokenizer.file unset so the "
            f"tokenizer stage takes the model's, and rerun the tokenizer and tokenize stages"
        )
    return None


def canonical_sha256(path: Path) -> str:
    """sha256 of the tokenizer as tokenmill writes it (the tokenizer stage re-serializes a given
    file, so the token store records the hash of that form, not of the original bytes)."""
    from tokenmill.tokenizer.bpe import load_tokenizer

    return hashlib.sha256(load_tokenizer(path).to_str().encode("utf-8")).hexdigest()


def init_from(model: nn.Module, source: str) -> dict[str, Any]:
    """Copy the source's weights into `model` (same names and shapes); return its description."""
    path = Path(source).expanduser()
    if not path.exists():
        raise InitFromError(f"train.init_from {path}: not found")
    tensors, info = load_source(path)
    own = model.state_dict()
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    shapes = [
        f"{n} {tuple(tensors[n].shape)} vs {tuple(own[n].shape)}"
        for n in sorted(set(own) & set(tensors))
        if tensors[n].shape != own[n].shape
    ]
    if missing or unexpected or shapes:
        raise InitFromError(
            f"train.init_from {path}: its weights do not fit this run's model (missing {missing}, unexpected "
            f"{unexpected}, shapes source vs run: {shapes}); set `model:` to the source's: {info['model_config']}"
        )
    with torch.no_grad():
        for name, t in own.items():
            t.copy_(tensors[name].to(t.dtype))
    return info
