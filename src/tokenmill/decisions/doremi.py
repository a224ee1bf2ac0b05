"""DoReMi: domain weights from a Group-DRO proxy model (Xie et al. 2023, "DoReMi: Optimizing Data
Mixtures Speeds Up Language Model Pretraining").

Two small models are trained on the user's token store, every step reading one micro-batch of
every bucket (the same rows per bucket, so the sampling distribution is uniform over buckets):

  1. the reference model, on a fixed mixture α_ref: loss Σ_i α_ref[i] · L_i;
  2. the proxy model, with the domain weights α_t updated at every step t by exponentiated
     gradient ascent on the per-domain *excess loss* over the frozen reference,

         λ_t[i] = Σ_{x ∈ batch_i} max(ℓ_proxy(x) − ℓ_ref(x), 0) / |batch_i|   (per token, clipped at 0)
         α'_t   = α_{t−1} · exp(η λ_t),   α_t = (1 − c) · α'_t / Σ α'_t + c / k   (smoothing c)

     and the proxy minimising Σ_i α_t[i] · L_i (the worst-case-weighted loss, Group DRO).

The answer is the average of α_t over the proxy's steps (the paper's ᾱ). A domain the proxy still
finds hard relative to the reference gains weight; one it learns as well as the reference, or that
is noise the reference cannot learn either (excess ≈ 0), loses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import numpy as np
import torch

from tokenmill.mixture.config import MixtureConfig
from tokenmill.model.config import ModelConfig
from tokenmill.train.config import TrainConfig
from tokenmill.mixture.loader import Loader
from tokenmill.model.objectives import token_nll_batch
from tokenmill.model.transformer import Transformer
from tokenmill.tokens.store import TokenStore
from tokenmill.train.device import autocast
from tokenmill.train.optimizer import build_optimizer, lr_at, set_lr


def update_weights(alpha: np.ndarray, excess: np.ndarray, step_size: float, smoothing: float) -> np.ndarray:
    """One DoReMi step: α ← (1 − c) · normalize(α · exp(η λ)) + c / k (in log space for stability)."""
    logits = np.log(alpha) + step_size * excess
    logits -= logits.max()
    new = np.exp(logits)
    new /= new.sum()
    return (1.0 - smoothing) * new + smoothing / len(alpha)


@dataclass
class ProxyHistory:
    """What a proxy run logged every `log_every` steps: its per-bucket losses and weights."""

    buckets: list[str]
    steps: list[int] = field(default_factory=list)
    loss: list[list[float]] = field(default_factory=list)  # per bucket, mean NLL of the step's batch
    excess: list[list[float]] = field(default_factory=list)  # per bucket (DoReMi proxy only)
    weights: list[list[float]] = field(default_factory=list)  # α_t (DoReMi proxy) or the fixed mixture

    def as_dict(self) -> dict:
        return {"buckets": self.buckets, "steps": self.steps, "loss": self.loss, "excess": self.excess, "weights": self.weights}


class BucketBatches:
    """One loader per bucket over the train split, each a one-bucket mixture with the same shape,
    so step s gives one micro-batch of every bucket (the uniform-over-buckets sampling of DoReMi).
    The data order is the tokenmill loader's: seeded, stateless, every document of a bucket seen
    once per epoch (shuffle 'epoch')."""

    def __init__(self, store: TokenStore, buckets: list[str], seq_len: int, rows: int, steps: int, seed: int):
        self.buckets = buckets
        self.loaders = {
            b: Loader(store, MixtureConfig(weights={b: 1.0}, shuffle="epoch", prefetch=0), seq_len, rows, 1, steps, seed)
            for b in buckets
        }

    def batches(self, step: int):
        return [(b, self.loaders[b].batch(step, 0)) for b in self.buckets]


def proxy_train_config(tc: TrainConfig, steps: int) -> TrainConfig:
    """The recipe of `tc` (lr, schedule, betas, decay, clip) over `steps` steps, warmup 5% of them."""
    return tc.model_copy(
        update={
            "max_steps": steps,
            "warmup_steps": max(1, round(0.05 * steps)),
            "max_tokens": None,
            "warmup_tokens": None,
            "grad_accum": 1,
        }
    )


def _bucket_nll(model: torch.nn.Module, batch, device: torch.device, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-target NLL [B, T] fp32, loss mask) of one bucket's micro-batch."""
    batch = batch.to(device)
    with autocast(device, dtype):
        nll = token_nll_batch(model, batch).float()
    return nll, batch.loss_mask


def train_proxy(
    mcfg: ModelConfig,
    tc: TrainConfig,
    data: BucketBatches,
    steps: int,
    seed: int,
    device: torch.device,
    weights: Callable[[int, np.ndarray], np.ndarray],
    reference: torch.nn.Module | None = None,
    log_every: int = 10,
    on_step: Callable[[int], None] | None = None,
) -> tuple[torch.nn.Module, ProxyHistory]:
    """Train a fresh model for `steps` steps on Σ_i w_i · L_i, one micro-batch of every bucket per
    step. `weights(step, excess)` gives w for the step from the step's per-bucket excess loss over
    `reference` (zeros without one): a constant for the reference model, DoReMi's update for the
    proxy. Returns the model and what it logged."""
    torch.manual_seed(seed)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(seed)).to(device)
    model.train()
    ptc = proxy_train_config(tc, steps)
    optimizer = build_optimizer(model, ptc, device)
    hist = ProxyHistory(buckets=list(data.buckets))
    for step in range(1, steps + 1):
        set_lr(optimizer, lr_at(step, ptc))
        losses, excess = [], []
        for _, batch in data.batches(step):
            nll, mask = _bucket_nll(model, batch, device, ptc.dtype)
            n = mask.sum().clamp(min=1)
            losses.append(nll.sum() / n)
            if reference is not None:
                with torch.no_grad():
                    ref, _ = _bucket_nll(reference, batch, device, ptc.dtype)
                excess.append(float(((nll.detach() - ref).clamp(min=0) * mask).sum() / n))
        lam = np.asarray(excess if excess else [0.0] * len(losses), dtype=np.float64)
        w = weights(step, lam)
        # sum() starts from the int 0, so its type reads Tensor | int; every bucket gave a loss tensor
        loss = cast(torch.Tensor, sum(float(wi) * li for wi, li in zip(w, losses)))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if ptc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), ptc.grad_clip)
        optimizer.step()
        if step % log_every == 0 or step == steps:
            hist.steps.append(step)
            hist.loss.append([float(x.detach()) for x in losses])
            hist.excess.append(lam.tolist() if reference is not None else [])
            hist.weights.append([float(x) for x in w])
        if on_step is not None:
            on_step(step)
    model.eval()
    return model, hist


@dataclass
class DoReMiResult:
    weights: dict[str, float]  # ᾱ, the average of α_t over the proxy's steps
    reference_weights: dict[str, float]
    reference: ProxyHistory
    proxy: ProxyHistory

    def as_dict(self) -> dict:
        return {
            "weights": self.weights,
            "reference_weights": self.reference_weights,
            "reference": self.reference.as_dict(),
            "proxy": self.proxy.as_dict(),
        }


def run_doremi(
    store: TokenStore,
    buckets: list[str],
    mcfg: ModelConfig,
    tc: TrainConfig,
    steps: int,
    rows: int,
    seq_len: int,
    seed: int,
    reference_weights: dict[str, float],
    step_size: float,
    smoothing: float,
    device: torch.device,
    log_every: int = 10,
    on_step: Callable[[str, int], None] | None = None,
) -> DoReMiResult:
    """Train the reference model on `reference_weights`, then the DRO proxy; return ᾱ."""
    data = BucketBatches(store, buckets, seq_len, rows, steps, seed)
    ref_w = np.asarray([reference_weights[b] for b in buckets], dtype=np.float64)
    ref_w /= ref_w.sum()
    ref_model, ref_hist = train_proxy(
        mcfg,
        tc,
        data,
        steps,
        seed,
        device,
        lambda s, lam: ref_w,
        log_every=log_every,
        on_step=(lambda s: on_step("reference", s)) if on_step else None,
    )
    for p in ref_model.parameters():
        p.requires_grad_(False)
    state: dict[str, Any] = {"alpha": np.full(len(buckets), 1.0 / len(buckets)), "sum": np.zeros(len(buckets)), "n": 0}

    def dro(step: int, lam: np.ndarray) -> np.ndarray:
        state["alpha"] = update_weights(state["alpha"], lam, step_size, smoothing)
        state["sum"] += state["alpha"]
        state["n"] += 1
        return state["alpha"]

    _, proxy_hist = train_proxy(
        mcfg,
        tc,
        data,
        steps,
        seed + 1,
        device,
        dro,
        reference=ref_model,
        log_every=log_every,
        on_step=(lambda s: on_step("proxy", s)) if on_step else None,
    )
    avg = state["sum"] / max(state["n"], 1)
    if not all(math.isfinite(x) for x in avg):
        raise ValueError(f"DoReMi weights are not finite: {avg}")
    return DoReMiResult(
        weights={b: float(a) for b, a in zip(buckets, avg)},
        reference_weights={b: float(a) for b, a in zip(buckets, ref_w)},
        reference=ref_hist,
        proxy=proxy_hist,
    )
