"""Restoring from a checkpoint of either format (checkpoint.py: one process or DDP; dist_checkpoint.py:
DCP shards of an FSDP or tensor-parallel run): a training state into a model and optimizer, or a
model alone for evaluation and export. Both formats' modules stay independent of each other; this
one dispatches on the checkpoint's `kind` and on how the model is wrapped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.train import dist_checkpoint
from tokenmill.train.checkpoint import (
    DCP_KIND,
    MODEL_ONLY,
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_model_tensors,
    read_optimizer_state,
    read_state,
    read_tensors,
    restore_rng_state,
    verify_checkpoint,
)


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    restore_rng: bool = True,
    verify: bool = True,
) -> dict[str, Any]:
    """Load weights (and optimizer state, RNG states) from a checkpoint; return its state.json."""
    path = Path(path)
    state = verify_checkpoint(path) if verify else read_state(path)
    if state.get("kind") == MODEL_ONLY and (optimizer is not None or restore_rng):
        raise CheckpointError(
            f"{path} holds model weights only (averaged from steps "
            f"{state.get('averaged_from')}): evaluate it, or resume from a step_<N> checkpoint"
        )
    if dist_checkpoint.needs_parallel_load(state, model):  # sharded checkpoint, or a DDP/FSDP model
        return dist_checkpoint.load_into(path, state, model, optimizer, restore_rng)
    load_model_tensors(model, read_tensors(path / "model.safetensors"), path, optimizer is not None)
    if optimizer is not None:
        opt_state = read_optimizer_state(path / "optim.pt")
        optimizer.load_state_dict(opt_state)
    if restore_rng:
        restore_rng_state(state["rng"], read_tensors(path / "rng.safetensors"))
    return state


def load_model(ckpt_path: Path | str, device: torch.device | str = "cpu") -> tuple[Transformer, int]:
    """(Transformer in eval mode on `device`, step) from a checkpoint directory.

    `ckpt_path` may also be a `checkpoints/` directory: its newest valid checkpoint is used.
    """
    path = Path(ckpt_path)
    if not (path / "state.json").exists() and list_checkpoints(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"{path}: no checkpoint verifies")
        path = latest
    if not path.is_dir():
        raise CheckpointError(f"{path}: no checkpoint here")
    state = verify_checkpoint(path)
    cfg = ModelConfig.model_validate(state["model_config"])
    model = Transformer(cfg)
    if state.get("kind") == DCP_KIND:  # an FSDP run's shards: DCP reads them in this one process
        dist_checkpoint.load_dcp_model(path, model)
    else:
        load_model_tensors(model, read_tensors(path / "model.safetensors"), path)
    return model.to(device).eval(), int(state["step"])


def load_training_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, restore_rng: bool) -> None:
    """Weights and optimizer state from a verified checkpoint, keeping this machine's kernel flags."""
    # only the flags a group has: Muon's groups have none, and adding them would change optim.pt
    kernel_flags: list[dict[str, Any]] = [{k: g[k] for k in ("foreach", "fused") if k in g} for g in optimizer.param_groups]
    load_checkpoint(path, model, optimizer, restore_rng=restore_rng, verify=False)
    for g, flags in zip(optimizer.param_groups, kernel_flags):
        g.update(flags)  # the kernel choice belongs to this machine, not the checkpoint's
