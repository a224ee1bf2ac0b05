"""Mixture-of-Experts FFN: top-k token routing with a load-balancing auxiliary loss (Switch Transformer, Fedus et al. 2022).

    router logits = W_r·x  (fp32)  ->  p = softmax  ->  top-k experts per token,
    output = Σ_{e in top-k} (p_e / Σ_topk p) · Expert_e(x)         (Mixtral-style renormalised gates)

Auxiliary loss (Switch Transformer / GShard): aux = n · Σ_i f_i · P_i, where f_i is the fraction of
the N·k routing slots that chose expert i and P_i the mean router probability of expert i. It is 1
for a perfectly balanced router and grows towards n as the router collapses onto one expert; f is
not differentiable, so the gradient flows through P and pushes probability away from busy experts.
Optional router z-loss (ST-MoE): mean(logsumexp(router logits)²), keeps router logits small.

Every forward stores its losses and utilization on the module (`last_aux`, `last_z`,
`last_utilization`) so the model can sum them and the trainer can log them; no capacity limit or
token dropping: every token reaches exactly k experts.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.model.config import ModelConfig


def load_balancing_loss(probs: torch.Tensor, topk_idx: torch.Tensor, n_experts: int) -> torch.Tensor:
    """n · Σ_i f_i · P_i for router probs [N, n] and chosen experts [N, k]."""
    counts = torch.bincount(topk_idx.reshape(-1), minlength=n_experts).to(probs.dtype)
    f = counts / topk_idx.numel()
    P = probs.mean(dim=0)
    return n_experts * (f * P).sum()


class MoE(nn.Module):
    """Drop-in replacement for the dense MLP: `router` plus `experts.i` (each a dense FFN)."""

    def __init__(self, cfg: ModelConfig, make_expert: type[nn.Module]):
        super().__init__()
        if not 1 <= cfg.top_k <= cfg.n_experts:
            raise ValueError(f"model.top_k={cfg.top_k} must be in [1, model.n_experts={cfg.n_experts}]")
        self.n_experts, self.top_k = cfg.n_experts, cfg.top_k
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(make_expert(cfg) for _ in range(cfg.n_experts))
        self.last_aux: torch.Tensor | None = None
        self.last_z: torch.Tensor | None = None
        self.last_utilization: torch.Tensor | None = None  # [n] fraction of routing slots per expert
        self.last_topk: torch.Tensor | None = None  # [N, k] expert ids of the last forward (tests, debugging)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        logits = self.router(flat).float()  # routing decisions in fp32: bf16 ties flip experts
        probs = logits.softmax(dim=-1)
        gate, idx = probs.topk(self.top_k, dim=-1)
        gate = (gate / gate.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = (idx == e).nonzero(as_tuple=True)
            if token.numel():
                # .to: under autocast the expert returns bf16 while the residual stream is fp32
                out.index_add_(0, token, (expert(flat[token]) * gate[token, slot, None]).to(out.dtype))
        self.last_aux = load_balancing_loss(probs, idx, self.n_experts)
        self.last_z = torch.logsumexp(logits, dim=-1).pow(2).mean()
        self.last_utilization = torch.bincount(idx.reshape(-1), minlength=self.n_experts).float().detach() / idx.numel()
        self.last_topk = idx.detach()
        return out.reshape(shape)
