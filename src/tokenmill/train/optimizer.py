"""AdamW with weight-decay groups, and the learning-rate schedules (warmup, then cosine, linear or WSD).

Weight decay (decoupled, AdamW) applies to the Linear weight matrices only: attention q/k/v/o,
the SwiGLU gate/up/down and an untied lm_head. It does not apply to
- norm gains (1-D; decaying them pulls the scale toward 0, a pure regularisation artefact), nor
- the token embedding table (and so a lm_head tied to it): a row of a rare token receives a
  gradient only when that token appears, yet decay shrinks it every step, so rare tokens'
  embeddings would collapse toward 0 (OLMo excludes embeddings from decay for this reason).

μP (model.mup): the hidden matrices (`tokenmill.model.mup.is_hidden_matrix`) get their own group
with "lr_mult" = 1/width_mult; `set_lr` multiplies each group's LR by its "lr_mult" (1 when absent).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tokenmill.train.config import TrainConfig
from tokenmill.model import mup


def param_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = False) -> list[dict]:
    """[{"params": decayed, "weight_decay": wd, "name": "decay"}, {"params": rest, "weight_decay": 0, ...}].

    decay_embeddings=True puts the embedding tables (and a head tied to them) in the decayed group."""
    no_decay_ids: set[int] = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding) and not decay_embeddings:
            no_decay_ids.add(id(module.weight))
    cfg = getattr(model, "config", None)
    use_mup = bool(getattr(cfg, "mup", False))
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    hidden: list[nn.Parameter] = []
    for name, p in model.named_parameters():  # shared parameters appear once
        if not p.requires_grad:
            continue
        if p.ndim >= 2 and id(p) not in no_decay_ids:
            (hidden if use_mup and mup.is_hidden_matrix(name) else decay).append(p)
        else:
            no_decay.append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
    ]
    if use_mup and cfg is not None:  # (use_mup implies a config)
        groups.append({"params": hidden, "weight_decay": weight_decay, "name": "mup_hidden", "lr_mult": mup.hidden_lr_mult(cfg)})
    return groups


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device | None = None) -> torch.optim.AdamW:
    """AdamW(β1, β2, ε from cfg) over `param_groups`; the fused kernel on CUDA.

    The LR is set per step from `lr_at`; the initial value here is the step-1 LR.
    """
    kwargs: dict = {}
    if device is not None and device.type == "cuda":
        kwargs["fused"] = True
    optimizer = torch.optim.AdamW(
        param_groups(model, cfg.weight_decay, cfg.decay_embeddings),
        lr=lr_at(1, cfg),
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        **kwargs,
    )
    set_lr(optimizer, lr_at(1, cfg))  # applies the μP per-group multipliers from the first step
    return optimizer


def lr_at(step: float, cfg: TrainConfig, anneal_start: int | None = None) -> float:
    """Learning rate of optimizer step `step` (1-based), for the step knobs `resolve_budget` set; a
    time-budgeted run reads it at fractional steps (train/time_budget.py).

    warmup:  lr · step / warmup_steps                              for step <= warmup_steps
    then, with progress = (step - warmup) / (max_steps - warmup) and min = min_lr_ratio · lr:
      cosine: min + (lr - min) · ½(1 + cos(π · progress))
      linear: min + (lr - min) · (1 - progress)
      wsd:    lr until the last decay_fraction of the run, then linear to min at max_steps
              (warmup-stable-decay: the stable phase can be extended or branched without knowing
              the end in advance; seed 002 §5, MiniCPM)
    after max_steps: min.
    anneal:  when the curriculum ends with an annealing phase starting after step `anneal_start`,
             the LR decays linearly from its value at anneal_start to 0 at max_steps (the
             high-quality data is seen while the LR goes to zero; seed 002 §3.5, seed 004).
    """
    if anneal_start is not None and anneal_start < step <= cfg.max_steps:
        base = lr_at(anneal_start, cfg)
        return base * (cfg.max_steps - step) / max(cfg.max_steps - anneal_start, 1)
    peak = cfg.lr
    floor = cfg.min_lr_ratio * peak
    warm = cfg.warmup_steps
    if warm > 0 and step <= warm:
        return peak * max(step, 0) / warm
    if cfg.schedule == "wsd":
        decay_steps = max(1, round(cfg.decay_fraction * cfg.max_steps))
        start = max(cfg.max_steps - decay_steps, warm)
        if step <= start:
            return peak
        progress = min(1.0, (step - start) / max(cfg.max_steps - start, 1))
        return peak + (floor - peak) * progress
    decay_steps = cfg.max_steps - warm
    if decay_steps <= 0:
        return peak
    progress = min(1.0, (step - warm) / decay_steps)
    if cfg.schedule == "linear":
        return floor + (peak - floor) * (1.0 - progress)
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's LR to lr · group["lr_mult"] (μP per-layer multipliers; 1 when absent)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_mult"] if "lr_mult" in group else lr
