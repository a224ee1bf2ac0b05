"""AdamW with weight-decay groups (or Muon for the blocks' matrices), and the learning-rate schedules
(warmup, then cosine, linear or WSD).

Weight decay (decoupled, AdamW) applies to the Linear weight matrices only: attention q/k/v/o,
the SwiGLU gate/up/down and an untied lm_head. It does not apply to
- norm gains (1-D; decaying them pulls the scale toward 0, a pure regularisation artefact), nor
- the token embedding table (and so a lm_head tied to it): a row of a rare token receives a
  gradient only when that token appears, yet decay shrinks it every step, so rare tokens'
  embeddings would collapse toward 0 (OLMo excludes embeddings from decay for this reason).

μP (model.mup): the hidden matrices (`tokenmill.model.mup.is_hidden_matrix`) get their own group
with "lr_mult" = 1/width_mult; `set_lr` multiplies each group's LR by its "lr_mult" (1 when absent).

Muon (train.optimizer=muon, torch.optim.Muon): momentum, then each 2-D update orthogonalized by
Newton-Schulz iterations, for the 2-D weights inside the blocks; AdamW keeps the embeddings, the
head, norms and biases (Muon is defined for hidden matrices only). Its group's "lr_mult" is
muon_lr / lr, so one schedule drives both at their own peaks (Muon's 0.02 is ~7× AdamW's 3e-3 because
its updates have a fixed spectral norm, not a per-coordinate one). Clipping is over all parameters.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from tokenmill.model import mup
from tokenmill.model.transformer import Block
from tokenmill.train.config import TrainConfig
from tokenmill.train.errors import TrainError


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


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device | None = None) -> torch.optim.Optimizer:
    """AdamW(β1, β2, ε from cfg) over `param_groups`, the fused kernel on CUDA; with
    train.optimizer=muon, `MuonWithAdamW` (Muon over the blocks' matrices, this AdamW over the rest).

    The LR is set per step from `lr_at`; the initial value here is the step-1 LR.
    """
    kwargs: dict = {}
    if device is not None and device.type == "cuda":
        kwargs["fused"] = True
    hidden = muon_params(model) if cfg.optimizer == "muon" else []
    if hidden and bool(getattr(getattr(model, "config", None), "mup", False)):
        raise TrainError(
            "train.optimizer=muon with model.mup: Muon's per-shape LR scaling replaces μP's hidden-matrix "
            "multipliers; turn one off"
        )
    taken = {id(p) for p in hidden}
    groups = [
        {**g, "params": [p for p in g["params"] if id(p) not in taken]}
        for g in param_groups(model, cfg.weight_decay, cfg.decay_embeddings)
    ]
    optimizer: torch.optim.Optimizer = torch.optim.AdamW(
        groups, lr=lr_at(1, cfg), betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, **kwargs
    )
    if hidden:
        muon = torch.optim.Muon(
            [{"params": hidden, "name": "muon", "lr_mult": cfg.muon_lr / cfg.lr}],
            lr=cfg.muon_lr,
            weight_decay=cfg.muon_weight_decay,
            momentum=cfg.muon_momentum,
            nesterov=True,
            ns_steps=cfg.muon_ns_steps,
            adjust_lr_fn=cfg.muon_adjust_lr,
        )
        optimizer = MuonWithAdamW(optimizer, muon)
    set_lr(optimizer, lr_at(1, cfg))  # applies the per-group multipliers (μP, Muon's own LR) from the first step
    return optimizer


def muon_params(model: nn.Module) -> list[nn.Parameter]:
    """The 2-D weights inside the transformer blocks (attention and MLP projections, fused or not),
    selected by shape and place rather than by name; embeddings, the head, norms and biases are
    outside this set. Each shared parameter appears once."""
    seen: set[int] = set()
    out: list[nn.Parameter] = []
    for module in model.modules():
        if isinstance(module, Block):
            for p in module.parameters():
                if p.requires_grad and p.ndim == 2 and id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
    return out


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon (Jordan et al. 2024) over the blocks' matrices and AdamW over the rest, stepped together
    as one optimizer: one param_groups list (AdamW's groups, then Muon's) and one state shared with
    both, so `set_lr`, the checkpoint's optim.pt (state_dict / load_state_dict), rollbacks and
    init_optimizer treat it like plain AdamW and a resume restores both exactly."""

    def __init__(self, adamw: torch.optim.Optimizer, muon: torch.optim.Optimizer) -> None:
        self.adamw, self.muon = adamw, muon
        super().__init__(adamw.param_groups + muon.param_groups, {})  # the same group dicts, not copies
        self._share()

    def _share(self) -> None:
        """Point both inner optimizers at this one's groups and state (again after a load, which replaces them)."""
        n = len(self.adamw.param_groups)
        self.adamw.param_groups, self.muon.param_groups = self.param_groups[:n], self.param_groups[n:]
        self.adamw.state = self.muon.state = self.state

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.adamw.step()
        self.muon.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._share()


def lr_at(step: float, cfg: TrainConfig, anneal_start: int | None = None) -> float:
    """Learning rate of optimizer step `step` (1-based), for the step knobs `resolve_budget` set; a
    time-budgeted run reads it at fractional steps (train/time_budget.py).

    warmup:  lr · step / warmup_steps                              for step <= warmup_steps
    then, with progress = (step - warmup) / (max_steps - warmup) and min = min_lr_ratio · lr:
      cosine: min + (lr - min) · ½(1 + cos(π · progress))
      linear: min + (lr - min) · (1 - progress)
      wsd:    lr until the last decay_fraction of the run, then linear to min at max_steps
              (warmup-stable-decay: the stable phase can be extended or branched without knowing
              the end in advance; MiniCPM, Hu et al. 2024)
    after max_steps: min.
    anneal:  when the curriculum ends with an annealing phase starting after step `anneal_start`,
             the LR decays linearly from its value at anneal_start to 0 at max_steps (the
             high-quality data is seen while the LR goes to zero; Llama 3's annealing, Dubey et al. 2024).
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
