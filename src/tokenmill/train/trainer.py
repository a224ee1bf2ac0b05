"""The training loop: one process (CPU or one GPU) or K data-parallel ranks under torchrun
(DDP or FSDP2, train/distributed.py), exactly resumable, guarded against instability.

    for step in max(resumed, 0)+1 .. max_steps:                      (optimizer steps, 1-based)
        lr = lr_at(step) · guard backoff
        for micro in 0 .. grad_accum-1:
            nll = token_nll_batch(model, loader.batch(step, micro)).sum() / n_targets(step); nll.backward()
        clip global grad norm (the pre-clip norm is logged)
        guard verdict: apply (AdamW step) | skip (NaN/Inf, spike) | rollback (train/guard.py)
        event train_step; checkpoint every ckpt_every (not inside a spike) and at the end; on_eval
        every eval_every and after the last step; a first Ctrl-C stops here with a checkpoint

Training state S_t (docs/architecture.md) and where each part lives:
  θ, Adam m/v/step        model.safetensors, optim.pt (FSDP: dcp/ shards)
  RNG states              rng.safetensors + state.json (python, numpy, torch CPU/CUDA); the
                          loop itself draws from no global generator: init uses a generator
                          seeded from the run seed, batches come from the stateless mixture Loader
  data cursor             loader.cursor(step): batches are a pure function of (seed, step,
                          micro), plus the store + mixture fingerprint (resume refuses other data)
  scheduler               lr_at(step): a pure function of the step, times guard.lr_scale (with
                          train.max_seconds, of the logged elapsed share instead: time_budget.py,
                          elapsed seconds in state.json "time_budget")
  accumulation position   always 0: checkpoints are taken between optimizer steps only
  guard state             state.json "guard": running medians, open spike, LR backoff, skips, rollbacks
So a resumed run repeats the uninterrupted run's losses bit for bit on the same hardware and
thread count (CPU); on CUDA up to kernel non-determinism.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
import traceback
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterator, Protocol, cast

import numpy as np
import torch
from torch import nn
from rich.markup import escape

from tokenmill.config import RunConfig
from tokenmill.model.config import ModelConfig
from tokenmill.model.rope import ROPE_FIELDS, phase_model_configs, rope_warnings
from tokenmill.mixture.collapse_guard import guard_mixture
from tokenmill.mixture.loader import Loader
from tokenmill.model.objectives import counted_targets, token_nll_batch
from tokenmill.model.transformer import Transformer
from tokenmill.runs import NOT_FINGERPRINTED, RunDir
from tokenmill.scaling.flops import flops_per_token, peak_of
from tokenmill.tokens.store import TokenStore
from tokenmill.train.checkpoint import list_checkpoints, read_state
from tokenmill.train.checkpoint_policy import CheckpointPolicy, Checkpointer, GraceWarning

# TrainError, TrainingDiverged, TrainingInterrupted, TrainingPreempted and draw_seed live in the loop's
# collaborators; callers (the CLI, replay, tests) import them from here, as before.
from tokenmill.train.errors import STAGE, TrainError, TrainingDiverged, already_trained  # noqa: F401
from tokenmill.train.eval_schedule import EvalHook, EvalSchedule, Evaluator
from tokenmill.train.health_signals import HealthSignals
from tokenmill.train.loop_state import LoopState
from tokenmill.train.restore import load_training_state
from tokenmill.train.rollback import DataDraws, draw_seed, drop_checkpoints_after, roll_back
from tokenmill.train.verdicts import VerdictReporter, stop_if_unguarded_divergence
from tokenmill.train.activation_stats import ActivationProbe
from tokenmill.train.bucket_loss import BucketLoss
from tokenmill.train.budget import resolve_budget
from tokenmill.train.clipping import clip_gradients, clip_on_device
from tokenmill.train.pipeline_parallel import Pipeline, build_pipeline, stage_layers
from tokenmill.train.compilation import compile_cache_dir, compile_decision, compile_model
from tokenmill.train.fp8 import convert_to_fp8, fp8_launch_problem
from tokenmill.train.device import autocast, enable_tf32, resolve_dtype, torch_threads
from tokenmill.train.staging import prebuild_mask
from tokenmill.train.loss_scale import LossScaler, after_step, build_scaler, is_overflow
from tokenmill.train.dist_checkpoint import agreed_latest_checkpoint, load_full_into_stage
from tokenmill.train.distributed import (
    DistContext,
    RankMismatch,
    all_reduce_sum,
    cross_rank_check,
    event_log,
    init_distributed,
    reduce_step_stats,
    set_grad_sync,
    wrap_model,
)
from tokenmill.train.faults import (
    EmbeddingCollapseFault,
    corrupt_batch,
    lr_factor,
    poison_loss,
    poison_rows,
    process_fault,
    slow_read,
)
from tokenmill.train.guard import StabilityGuard, Verdict
from tokenmill.train.host_reads import PackedRead, apply_unless, device_skip, resolve_host_reads
from tokenmill.train.sharding import sharding_report
from tokenmill.train.zero import broadcast_updates, grad_bytes, is_partitioned, owned_state_bytes, partition_optimizer
from tokenmill.train.metrics import UpdateRatio, grad_norms_by_group, grad_sq_norms, group_sums, memory_bytes
from tokenmill.train.mfu import MfuPeak
from tokenmill.train.noise_scale import NoiseProbe, NoiseScale, unavailable_reason
from tokenmill.train.optimizer import build_optimizer, lr_at, set_lr
from tokenmill.train.rank_times import RankClock, SlowRanks, rank_hosts, step_end_agreement
from tokenmill.train.spike_kinds import SpikeHistory
from tokenmill.train.multinode import agree_on_resume, check_shared_run_dir, job_attempt
from tokenmill.train.stop_signals import NONE, StopRequests, TrainingInterrupted, TrainingPreempted, stop_now  # noqa: F401
from tokenmill.train.time_budget import TimeBudget
from tokenmill.train.watchdog import Watchdog, job_store, restart_attempt


# --------------------------------------------------------------------------- helpers
def resolve_model_config(model_cfg: ModelConfig, store: TokenStore, seq_len: int) -> ModelConfig:
    """The model config with vocab_size taken from the token store when None, checked against it."""
    vocab = model_cfg.vocab_size if model_cfg.vocab_size is not None else store.vocab_size
    if vocab < store.vocab_size:
        raise TrainError(
            f"model.vocab_size={vocab} is smaller than the token store's vocabulary "
            f"({store.vocab_size}, {store.root / '_meta.json'})"
        )
    if seq_len > model_cfg.max_seq_len:
        raise TrainError(
            f"train.seq_len={seq_len} exceeds model.max_seq_len={model_cfg.max_seq_len}; "
            f"raise model.max_seq_len or lower train.seq_len"
        )
    return model_cfg.model_copy(update={"vocab_size": int(vocab)})


def _phase_models(mcfg: ModelConfig, loader: Loader, ctx: DistContext) -> list[ModelConfig]:
    """The model each curriculum phase trains (its RoPE and table length, model/rope.py)."""
    try:
        models = phase_model_configs(mcfg, [(p.seq_len, p.rope) for p in loader.phases])
    except ValueError as exc:
        raise TrainError(str(exc)) from exc
    if ctx.model_parallel and any(m != mcfg for m in models):
        raise TrainError(
            "a phase that changes RoPE (mixture.phases[].rope, or seq_len past model.max_seq_len) is "
            "not supported with pipeline or tensor parallelism: set model.max_seq_len and RoPE "
            "in `model:` for the whole run, or train the extension as a run of its own "
            "(train.init_from)"
        )
    return models


def seed_everything(seed: int) -> None:
    """Seed the global python, numpy and torch generators (for anything that still uses them)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _train_sections(cfg: RunConfig) -> dict[str, Any]:
    return {"seed": cfg.seed, **{s: getattr(cfg, s).model_dump(mode="json") for s in ("mixture", "model", "train")}}


def _diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            out += _diff(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if old == new else [f"{prefix}: {old!r} -> {new!r}"]


def setup_changes(state: dict[str, Any], cfg: RunConfig) -> list[str]:
    """The training settings ("section.key: old -> new") that differ from those a checkpoint's
    state.json was written under, leaving out the knobs that never change what training computes."""
    changes = _diff(state.get("config", {}), _train_sections(cfg))
    return [c for c in changes if not _unfingerprinted(c)]


def _unfingerprinted(change: str) -> bool:
    """A change of a knob that never changes what training computes (runs.NOT_FINGERPRINTED)."""
    section, _, key = change.split(":", 1)[0].partition(".")
    return key.split(".")[0] in NOT_FINGERPRINTED.get(section, ())


def check_same_setup(state: dict[str, Any], fingerprint: str, cfg: RunConfig, ckpt: Path) -> None:
    """Refuse to resume from a checkpoint another training setup (config or data) wrote."""
    if state.get("train_fingerprint") == fingerprint:
        return
    changes = setup_changes(state, cfg)
    detail = ("; changed: " + ", ".join(changes)) if changes else " (the upstream data changed)"
    raise TrainError(
        f"{ckpt} was written by a different training setup{detail}. Resuming would not "
        f"continue the same run: restore the config, or run `tokenmill run CONFIG` with this one, which moves "
        f"{ckpt.parent} aside (never deletes it) and starts over"
    )


@contextlib.contextmanager
def _progress(enabled: bool, total: int, completed: int) -> Iterator[tuple[Any, Any, Any]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True, soft_wrap=True)  # lines are never cut at 80 columns (paths, sentences)
    prog = Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not (enabled and console.is_terminal),
    )
    with prog:
        task = prog.add_task("train", total=total, completed=completed, info="")
        yield prog, task, console


class _RegularizedModel(Protocol):
    """The regularizer terms of a Transformer (model/transformer.py)."""

    def z_loss(self, logits: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor: ...
    def aux_loss(self) -> torch.Tensor: ...
    def moe_stats(self) -> dict[str, Any]: ...


class _Regularizers:
    """z-loss on the output log-partition and the MoE auxiliary losses, when the model has them.

    The logits are caught with a forward hook, so the objectives stay plain NLL functions; with
    both coefficients at 0 nothing is registered and the step is exactly the unregularized one."""

    def __init__(self, model: nn.Module):
        cfg = getattr(model, "config", None)
        self.model = model
        # read only when the config asks for z-loss or MoE: a Transformer, or DataParallel
        # (train/distributed.py) passing attribute lookups through to one; nn.Module's type cannot say so
        self.terms = cast(_RegularizedModel, model)
        self.z = float(getattr(cfg, "z_loss", 0.0) or 0.0)
        self.moe = int(getattr(cfg, "n_experts", 0) or 0) > 0
        self.active = self.z > 0 or self.moe
        self.logits: torch.Tensor | None = None
        self.z_sum = 0.0
        self.aux_sum = 0.0
        self._hook = model.register_forward_hook(self._catch) if self.z > 0 else None

    def _catch(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        self.logits = output

    def term(self, keep: torch.Tensor | None, grad_accum: int) -> torch.Tensor:
        """This micro-batch's regularizer, already divided by the number of micro-batches."""
        total = torch.zeros((), device=next(self.model.parameters()).device)
        if self.z > 0 and self.logits is not None:
            z = self.terms.z_loss(self.logits, keep)
            self.z_sum += float(z.detach()) / grad_accum
            total = total + z
        if self.moe:
            aux = self.terms.aux_loss()
            self.aux_sum += float(aux.detach()) / grad_accum
            total = total + aux
        self.logits = None
        return total / grad_accum

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()


class _ForwardClock:
    """Seconds spent in forward passes (a context entered once per micro-batch): wall time on
    CPU, CUDA events on a GPU (read once, after the step's backward has synchronized them)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.total = 0.0
        self.pairs: list[tuple[Any, Any]] = []
        self._t0 = 0.0

    def __enter__(self) -> None:
        if self.cuda:
            self.pairs.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            self.pairs[-1][0].record()
        else:
            self._t0 = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            self.pairs[-1][1].record()
        else:
            self.total += time.perf_counter() - self._t0

    def seconds(self) -> float:
        if self.cuda:
            for start, end in self.pairs:
                end.synchronize()
                self.total += start.elapsed_time(end) / 1000.0
            self.pairs.clear()
        return self.total


def step_loss(*args: Any, **kwargs: Any) -> tuple[float, float]:
    """`step_loss_tensor` with the loss read on the host (its arguments, its description)."""
    total, r_pad = step_loss_tensor(*args, **kwargs)
    return total.item(), r_pad


def step_loss_tensor(
    model: nn.Module,
    loader: Loader,
    step: int,
    grad_accum: int,
    device: torch.device,
    dtype: torch.dtype,
    backward: bool,
    tc: Any = None,
    seed: int = 0,
    extras: dict[str, float] | None = None,
    probe: NoiseProbe | None = None,
    buckets: BucketLoss | None = None,
    fault_step: int | None = None,
    clocks: list[_ForwardClock] | None = None,
    scaler: LossScaler | None = None,
) -> tuple[torch.Tensor, float]:
    """(loss, r_pad) of the global batch of `step`: Σ NLL over its counted targets / their number,
    so every target weighs the same whatever micro-batch (or rank) it falls in; with
    backward=True the gradients of that loss (plus z-loss / MoE aux when configured; reported
    in `extras`, not in the loss) are accumulated.

    `tc` (a TrainConfig) with objective != "clm" routes each micro-batch through
    `objective_loss` (corruption seeded by (seed, step, micro)); there the loss is the mean of the
    micro-batch means, since the scored count of a corrupted batch is only known once built.
    tc=None or objective "clm" is the causal path. `probe` (causal path, grad_accum >= 2) measures
    the first micro-batch's gradient for the noise scale (train/noise_scale.py). `buckets` (causal
    path) accumulates each row's detached NLL by data bucket (train/bucket_loss.py). `fault_step`
    (default `step`) is where injected faults are looked up: the run's attempt number, which
    differs from the step after a rewinding rollback. The loss is a device scalar (`step_loss`
    reads it); `clocks` (train.host_reads deferred) takes the forward clock unread, so measuring
    the forward seconds does not wait for the GPU inside the step. `scaler` (fp16): backward runs
    on the loss times its scale; the gradients stay scaled until `compute_update` unscales them."""
    fs = step if fault_step is None else fault_step
    objective = "clm" if tc is None else getattr(tc, "objective", "clm")
    faults = getattr(tc, "faults", None)
    reg = _Regularizers(model)
    n_targets = max(loader.n_targets(step), 1) if objective == "clm" else 0
    total = torch.zeros((), device=device)
    r_pad = 0.0
    data_wait = 0.0
    forward = _ForwardClock(device)
    try:
        for micro in range(grad_accum):
            # staged (copied, its mask built) once the previous micro-batch's backward is queued
            # and its batch dropped (`del` below): one mask alive at a time (train/staging.py)
            batch, waited, pad = _staged_micro_batch(model, loader, step, micro, fs, faults, seed, device, dtype, objective)
            data_wait += waited
            r_pad += pad
            set_grad_sync(model, not backward or micro == grad_accum - 1)  # reduce once per step (DDP/FSDP)
            rows = buckets.indices(loader.row_buckets(step, micro), device) if buckets is not None else None
            with autocast(device, dtype), torch.set_grad_enabled(backward), forward:
                if objective == "clm":
                    loss = _causal_micro_loss(model, batch, n_targets, buckets, rows)
                else:
                    from tokenmill.model.objectives import objective_loss

                    # a mean over every micro-batch of every rank (ranks' gradients are summed)
                    loss = objective_loss(model, batch, tc, seed, step, micro) / (grad_accum * loader.world_size)
                extra = reg.term(getattr(batch, "loss_mask", None), grad_accum * loader.world_size) if reg.active else None
                if faults is not None:
                    loss = poison_loss(loss, fs, faults)
            if backward:
                objective_total = loss + extra if extra is not None else loss
                (scaler.scaled(objective_total) if scaler is not None else objective_total).backward()
                if probe is not None and micro == 0 and objective == "clm":
                    probe.measure(model.parameters(), counted_targets(batch), n_targets)
            total += loss.detach()
            del batch
    finally:
        reg.close()
    if extras is not None:
        _report_extras(extras, data_wait, forward, clocks, reg)
    return total, r_pad / grad_accum


def _causal_micro_loss(
    model: nn.Module, batch: Any, n_targets: int, buckets: BucketLoss | None, rows: torch.Tensor | None
) -> torch.Tensor:
    """One micro-batch's Σ NLL / the step's counted targets; each row's NLL into its data bucket."""
    nll = token_nll_batch(model, batch)
    # the forward has taken what it keeps of the mask (autograd's saved tensors, checkpoint's
    # arguments): the batch lets go, so the step holds what scaling/memory.py counts, as when the
    # model built the mask itself
    if getattr(batch, "prebuilt_mask", None) is not None:
        batch.prebuilt_mask = None
    if buckets is not None and rows is not None:
        buckets.add(nll, batch.loss_mask, rows)
    return nll.sum() / n_targets


def _staged_micro_batch(
    model: nn.Module, loader: Loader, step: int, micro: int, fs: int, faults: Any, seed: int,
    device: torch.device, dtype: torch.dtype, objective: str,
) -> tuple[Any, float, float]:  # fmt: skip
    """`_micro_batch` copied to `device`, with its document mask prebuilt there on the causal path
    (the other objectives build their own masks from a corrupted batch)."""
    batch, waited, pad = _micro_batch(loader, step, micro, fs, faults, seed)
    batch = batch.to(device, non_blocking=True)
    return (prebuild_mask(model, batch, dtype) if objective == "clm" else batch), waited, pad


def _micro_batch(loader: Loader, step: int, micro: int, fs: int, faults: Any, seed: int) -> tuple[Any, float, float]:
    """Micro-batch `micro` of `step` on the host, with the faults configured for attempt `fs`
    injected, the seconds its read took (data wait) and its padding share as read."""
    t0 = time.perf_counter()
    batch = loader.batch(step, micro)
    if faults is not None and faults.slow:
        slow_read(loader.rank, faults)
    waited, pad = time.perf_counter() - t0, batch.r_pad
    if faults is not None and fs in faults.corrupt_steps:
        batch = corrupt_batch(batch, fs, micro, faults, loader.store.vocab_size, seed)
    if faults is not None and faults.poison_bucket is not None:
        batch = poison_rows(batch, loader.row_buckets(step, micro), fs, micro, faults, loader.store.vocab_size, seed)
    return batch, waited, pad


def _report_extras(
    extras: dict[str, float], data_wait: float, forward: _ForwardClock, clocks: list[_ForwardClock] | None, reg: _Regularizers
) -> None:
    """The step's data wait, its forward clock (read now, or handed over unread when the host
    reads are deferred) and the regularizers' terms."""
    extras["data_wait_s"] = data_wait
    if clocks is not None:
        clocks.append(forward)
    else:
        extras["forward_s"] = forward.seconds()
    if reg.active:
        extras.update({"z_loss": reg.z_sum} if reg.z > 0 else {})
        if reg.moe:
            extras.update({"moe_aux": reg.aux_sum, **reg.terms.moe_stats()})


def _set_step_lr(
    optimizer: torch.optim.Optimizer, step: int, tc: Any, anneal: int | None, lr_scale: float,
    fault_step: int | None, schedule_step: float | None,
) -> float:  # fmt: skip
    """The step's LR (the schedule's, times the guard's backoff and an injected fault's factor), set."""
    at = step if schedule_step is None else schedule_step
    lr = lr_at(at, tc, anneal) * lr_scale * lr_factor(step if fault_step is None else fault_step, tc.faults)
    set_lr(optimizer, lr)
    return lr


def compute_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: Loader,
    step: int,
    tc: Any,
    device: torch.device,
    dtype: torch.dtype,
    anneal: int | None,
    extras: dict[str, Any] | None = None,
    lr_scale: float = 1.0,
    group_norms: bool = False,
    ctx: DistContext | None = None,
    pipeline: Pipeline | None = None,
    probe: NoiseProbe | None = None,
    schedule_step: float | None = None,
    buckets: BucketLoss | None = None,
    fault_step: int | None = None,
    scaler: LossScaler | None = None,
) -> tuple[float, float, float, float]:
    """Everything of optimizer step `step` before `optimizer.step()`: set the LR (the schedule's,
    times the guard's backoff `lr_scale`, times an injected fault's factor), accumulate the
    gradients of the global batch, clip. Returns (lr, loss, pre-clip grad norm, r_pad); with
    group_norms=True, `extras["grad_norms"]` gets the pre-clip norm of every layer group.
    `ctx` (a torchrun job's context) names the data-parallel group the loss is summed over and
    whether the gradients are split over tensor-parallel ranks; `pipeline` (pp > 1) runs the
    step's micro-batches through this rank's pipeline stage instead of one after another;
    `probe` catches the first micro-batch's gradient norm (averaged over the data-parallel ranks).
    `schedule_step` (a time-budgeted run, train/time_budget.py) is where the LR schedule is read
    instead of `step`; `fault_step` where injected faults are looked up (default `step`);
    `scaler` (fp16) scales the backward and unscales the gradients before the norms and the clip.
    The trainer and `tokenmill replay` share it, so a replayed step is the same computation."""
    lr = _set_step_lr(optimizer, step, tc, anneal, lr_scale, fault_step, schedule_step)
    if pipeline is None:
        loss, r_pad = step_loss(
            model,
            loader,
            step,
            tc.grad_accum,
            device,
            dtype,
            backward=True,
            tc=tc,
            seed=loader.seed,
            extras=extras,
            probe=probe,
            buckets=buckets,
            fault_step=fault_step,
            scaler=scaler,
        )
        if scaler is not None:  # everything below (norms, clip, guard, optimizer) sees true gradients
            scaler.unscale(model.parameters())
    else:
        loss, r_pad, data_wait = pipeline.step_loss(loader, step, tc.grad_accum)
        if extras is not None:
            extras["data_wait_s"] = data_wait
        assert ctx is not None, "a pipeline runs under torchrun"
        loss = all_reduce_sum(loss, ctx, torch.float32, pipeline.group)  # the last stage's, on every stage
        pipeline.sync_tied_grads()
        pipeline.reduce_over_dp()
        if extras is not None:
            extras["pipeline_idle"] = pipeline.idle_by_stage()
    # this rank's share -> the global batch's (over the data-parallel ranks: tp ranks share a batch)
    # (cp ranks hold shares of the same rows: the loss sums over dp × cp, r_pad is the mean over them)
    loss_ranks = loader.world_size * (ctx.cp_size if ctx else 1)
    loss, r_pad = reduce_step_stats(loss, r_pad, extras, loss_ranks, ctx.dp_group if ctx else None)
    if probe is not None and ctx is not None and ctx.distributed:
        probe.average_over(lambda v: all_reduce_sum(v, ctx, group=ctx.dp_group), loader.world_size)
    across = pipeline.group if pipeline is not None else None
    if group_norms and extras is not None:
        extras["grad_norms"] = grad_norms_by_group(model, across=across)
    grad_norm = clip_gradients(
        model.parameters(),
        tc.grad_clip if tc.grad_clip > 0 else float("inf"),
        mixed=bool(ctx and ctx.model_parallel),
        across=across,
        counted_elsewhere=pipeline.tied_duplicate() if pipeline is not None else None,
    )
    return lr, loss, grad_norm, r_pad


@dataclass
class DeviceUpdate:
    """`compute_update`'s results left on the device (train.host_reads deferred)."""

    lr: float
    loss: torch.Tensor
    grad_norm: torch.Tensor
    r_pad: float
    grad_sq: tuple[list[str], torch.Tensor] | None  # per-parameter Σ g² (group_norms)
    clocks: list[_ForwardClock]


def launch_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: Loader,
    step: int,
    tc: Any,
    device: torch.device,
    dtype: torch.dtype,
    anneal: int | None,
    extras: dict[str, Any],
    lr_scale: float = 1.0,
    group_norms: bool = False,
    probe: NoiseProbe | None = None,
    buckets: BucketLoss | None = None,
    fault_step: int | None = None,
    schedule_step: float | None = None,
    scaler: LossScaler | None = None,
) -> DeviceUpdate:
    """`compute_update` of a one-process run with no host read: the same LR, gradients and
    clipping, its loss, pre-clip norm and per-parameter squares left on the device."""
    lr = _set_step_lr(optimizer, step, tc, anneal, lr_scale, fault_step, schedule_step)
    clocks: list[_ForwardClock] = []
    loss, r_pad = step_loss_tensor(
        model, loader, step, tc.grad_accum, device, dtype, backward=True, tc=tc, seed=loader.seed,
        extras=extras, probe=probe, buckets=buckets, fault_step=fault_step, clocks=clocks, scaler=scaler,
    )  # fmt: skip
    if scaler is not None:  # on the device: the scale is never read here
        scaler.unscale(model.parameters())
    grad_sq = grad_sq_norms(model) if group_norms else None
    grad_norm = clip_on_device(model.parameters(), tc.grad_clip if tc.grad_clip > 0 else float("inf"))
    return DeviceUpdate(lr, loss, grad_norm, r_pad, grad_sq, clocks)


# --------------------------------------------------------------------------- entry point
def run_train(run: RunDir, resume: bool = False, on_eval: EvalHook | None = None, progress: bool = True) -> dict[str, Any]:
    """Train the run's model on its token store; return {steps, final_loss, tokens, seconds, params}.

    resume=True continues from the newest valid checkpoint (fresh start when there is none);
    resume=False refuses to touch a run that already has checkpoints. `on_eval(step, model)` is
    called every train.eval_every steps and after the final step, with the model in eval mode
    (training draws from no global RNG, so evaluation cannot change it). An evaluation due at the
    step a run resumes from is run again, since the stopped process may not have finished it; a
    first Ctrl-C skips the evaluation of the step it stops at (the resume then runs it).
    """
    cfg = run.config
    ctx = init_distributed(cfg.train)  # torchrun: this rank's process group; else one process
    together = False  # did every rank get here at the same point?
    try:
        summary = _run_train(run, ctx, resume, on_eval, progress)
        together = True
        return summary
    except (TrainingInterrupted, TrainError, RankMismatch) as exc:
        together = True  # decided on values every rank shares: all ranks raise it at the same step
        traceback.clear_frames(exc.__traceback__)  # free the model (and its collectives) before the group
        raise
    finally:
        ctx.close(synchronize=together)


def _run_train(run: RunDir, ctx: DistContext, resume: bool, on_eval: EvalHook | None, progress: bool) -> dict[str, Any]:
    cfg = run.config
    check_shared_run_dir(run.path, ctx)  # several nodes: one run directory, or no start
    resume = agree_on_resume(ctx, resume)  # a node started again joins ranks that resume
    tc = resolve_budget(cfg.train, world_size=ctx.dp_size)  # token-denominated knobs -> steps, once
    if tc.grad_accum < 1 or tc.max_steps < 1 or tc.micro_batch < 1 or tc.seq_len < 1:
        raise TrainError("train.grad_accum, max_steps, micro_batch and seq_len must all be >= 1")
    if ctx.sizes is not None and tc.grad_accum < ctx.sizes.pp:
        raise TrainError(
            f"pp={ctx.sizes.pp} needs at least {ctx.sizes.pp} micro-batches per step on each of the "
            f"{ctx.sizes.dp} data-parallel replica(s), but train.global_batch_tokens gives "
            f"grad_accum={tc.grad_accum}: raise the global batch or lower train.micro_batch"
        )
    device = ctx.device  # train.device, or this rank's GPU under torchrun
    dtype = resolve_dtype(device, tc.dtype)
    fp8_problem = fp8_launch_problem(device, dtype) if tc.fp8 else None
    if fp8_problem:
        raise TrainError(fp8_problem)
    store = TokenStore(run.path / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    enable_tf32(device)
    with torch_threads(tc.threads):
        return _train(run, tc, store, mcfg, device, dtype, resume, on_eval, progress, ctx)


def _train(
    run: RunDir,
    tc: Any,
    store: TokenStore,
    mcfg: ModelConfig,
    device: torch.device,
    dtype: torch.dtype,
    resume: bool,
    on_eval: EvalHook | None,
    progress: bool,
    ctx: DistContext | None = None,
) -> dict[str, Any]:
    ctx = ctx or DistContext(device=device)
    events = event_log(run.events, ctx)  # one timeline: rank 0 writes it
    ckpt_root = run.path / "checkpoints"
    existing = list_checkpoints(ckpt_root)
    if existing and not resume:
        raise TrainError(already_trained(ckpt_root, existing[-1][0]))
    loop = _TrainLoop(run, tc, store, mcfg, device, dtype, ctx, events, inherit=not existing)
    if resume:
        loop.resume(existing)
    loop.announce()
    return loop.train(on_eval, progress)


def _build_model(
    run: RunDir, tc: Any, store: TokenStore, mcfg: ModelConfig, ctx: DistContext, events: Any, inherit: bool
) -> tuple[Transformer, dict[str, Any] | None]:
    """The model from the run seed, or from train.init_from on a fresh run (a resumed run restores
    its own weights); returns it on the device and what it inherited."""
    cfg = run.config
    seed_everything(cfg.train_seed)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.train_seed))
    inherited = None
    if tc.init_from and inherit:
        from tokenmill.train.init_from import check_store_tokenizer, init_from

        inherited = init_from(model, tc.init_from)
        unchecked = check_store_tokenizer(tc.init_from, store.tokenizer_sha256, store.root)
        inherited["inherited"] = [
            "weights",
            *(["optimizer state"] if tc.init_optimizer else []),
            *(["tokenizer"] if unchecked is None else []),
        ]
        events.write(STAGE, "init_from", **{k: v for k, v in inherited.items() if k != "model_config"})
        if unchecked:
            events.write(STAGE, "init_from_warning", message=unchecked)
    model = model.to(ctx.device)
    if tc.fp8:  # before FSDP and torch.compile wrap it (train/fp8.py); names and weights unchanged
        events.write(STAGE, "fp8", recipe="tensorwise", converted=convert_to_fp8(model))
    model.activation_checkpointing = tc.activation_checkpointing
    model.train()
    return model, inherited


class _TrainLoop:
    """One training run: built (model, optimizer, data, guard, signals), optionally resumed, then
    `train()`: the loop, which reads top-down as the recipe and hands each concern to a
    collaborator (the guard and its reporter, rollback.py, checkpoint_policy.py, eval_schedule.py,
    health_signals.py, stop_signals.py, faults.py), in the way torchtitan's Trainer holds its
    checkpointer, validator and metrics as components."""

    def __init__(
        self,
        run: RunDir,
        tc: Any,
        store: TokenStore,
        mcfg: ModelConfig,
        device: torch.device,
        dtype: torch.dtype,
        ctx: DistContext,
        events: Any,
        inherit: bool,
    ):
        self.run, self.tc, self.store, self.mcfg, self.device, self.dtype = run, tc, store, mcfg, device, dtype
        self.ctx, self.events, self.cfg = ctx, events, run.config
        self.ckpt_root, self.fingerprint = run.path / "checkpoints", run.fingerprint(STAGE)
        self.model, self.inherited = _build_model(run, tc, store, mcfg, ctx, events, inherit)
        model = self.model
        self.params, self.non_embedding = model.num_params(), model.num_params(exclude_embeddings=True)  # the whole model
        self.pipeline: Pipeline | None = None
        if ctx.sizes is not None and ctx.sizes.pp > 1:  # this rank keeps its stage's part of the model only
            self.pipeline = build_pipeline(model, ctx.mesh, ctx.sizes, ctx.rank, tc.parallel.pp_schedule, device, dtype)
        self.train_model = wrap_model(model, ctx, tc)  # DDP wrapper, or `model` itself sharded in place (FSDP, TP)
        if self.pipeline is not None and ctx.zero >= 2:
            self.pipeline.shard_over_dp(ctx.mesh["dp"], ctx.zero)  # FSDP2 inside the stage, after tp
        self.optimizer = build_optimizer(model, tc, device)
        if ctx.zero == 1:  # ZeRO-1: this rank keeps (and steps) the optimizer state of its own parameters
            partition_optimizer(self.optimizer, model, ctx.dp_group, ctx.dp_rank, ctx.dp_size)
        self.grad_bytes = 0  # gradients held at the last update (the ZeRO memory check)
        if self.inherited is not None and tc.init_optimizer:
            if ctx.model_parallel or ctx.zero > 0:
                raise TrainError(
                    "train.init_optimizer loads a one-process optimizer state: not with train.parallel.zero >= 1 "
                    "(FSDP), tensor or pipeline parallelism (DDP and one process are fine)"
                )
            from tokenmill.train.init_from import init_optimizer

            init_optimizer(self.optimizer, self.inherited)
        self.guard = StabilityGuard(tc.guard, judge_after=tc.warmup_steps)
        self.scaler = build_scaler(dtype, tc.loss_scale, device)  # fp16 only (train/loss_scale.py)
        self.host_reads = resolve_host_reads(tc.host_reads, device, ctx.distributed)  # train/host_reads.py
        self._build_data()
        self.noise = NoiseScale(tc.noise_scale_ema)
        self.noise_off = unavailable_reason(
            tc.grad_accum,
            tc.objective,
            ctx.model_parallel or ctx.cp_size > 1,
            ctx.mode == "fsdp",
            tc.noise_scale_every,
        )
        if self.scaler is not None and self.noise_off is None:
            self.noise_off = "under train.dtype=float16 the first micro-batch's gradient is still loss-scaled when measured"
        self.health = HealthSignals(tc.health, tc.warmup_steps)
        self.spike_history = SpikeHistory()
        self.state = LoopState(step=0, last_loss=None)
        self.resumed_from: str | None = None

    def _loader(self, draw: int) -> Loader:
        tc, ctx = self.tc, self.ctx
        return Loader(
            self.store,
            self.cfg.mixture,
            tc.seq_len,
            tc.micro_batch,
            tc.grad_accum,
            tc.max_steps,
            draw_seed(self.cfg.train_seed, draw),
            world_size=ctx.dp_size,
            rank=ctx.dp_rank,
            pin_memory=self.device.type == "cuda",
        )

    def _build_data(self) -> None:
        """The loader (refused on a collapsed mixture before any step), its rewound draws, each
        phase's model (RoPE), the anneal start and the time budget."""
        tc, mcfg = self.tc, self.mcfg
        self.loader = loader = self._loader(0)
        guard_mixture(self.run.path, self.store, loader.phases, self.cfg.mixture.synthetic, self.events)
        self.draws = DataDraws(loader, self.guard, self._loader)
        self.phase_models = _phase_models(mcfg, loader, self.ctx)
        for warning in rope_warnings(mcfg, [(p.name, p.seq_len, m) for p, m in zip(loader.phases, self.phase_models)]):
            self.events.write(STAGE, "rope_warning", message=warning)
            if self.ctx.is_main:
                print(f"warning: {warning}", file=sys.stderr)
        self.anneal = next((p.start_step for p in loader.phases if p.anneal), None)
        self.clock = TimeBudget(tc.max_seconds, tc.max_steps)
        if self.clock.enabled and len(loader.phases) > 1:
            raise TrainError(
                f"train.max_seconds={tc.max_seconds} runs the LR schedule on elapsed time, but the "
                f"curriculum's {len(loader.phases)} phases are placed by step: use one phase "
                f"(mixture.phases: []) or a step budget (train.max_steps)"
            )

    def resume(self, existing: list[tuple[int, Path]]) -> None:
        """The newest valid checkpoint's training state (rank 0 decides for every rank), if any."""
        ckpt = agreed_latest_checkpoint(self.ckpt_root, self.events, self.ctx)
        if ckpt is None and existing:
            raise TrainError(
                f"no checkpoint under {self.ckpt_root} verifies (see checkpoint_corrupt events); "
                f"move {self.ckpt_root} aside to start over"
            )
        if ckpt is None:
            return
        state = read_state(ckpt)
        check_same_setup(state, self.fingerprint, self.cfg, ckpt)
        saved = (state.get("data_cursor") or {}).get("fingerprint")
        if saved is not None:
            self.loader.check_fingerprint(saved, str(ckpt))  # refuses to resume on changed data
        if (self.pipeline is not None or is_partitioned(self.optimizer)) and state.get("kind") != "dcp":
            # a one-process/DDP checkpoint: this stage's part, or (ZeRO-1) this rank's optimizer share
            whole, order = _whole_model_order(self.mcfg, self.tc)
            load_full_into_stage(ckpt, state, self.model, self.optimizer, whole, order)
        else:
            load_training_state(ckpt, self.model, self.optimizer, restore_rng=True)
        self.guard.load_state_dict(state.get("guard") or {})
        if self.scaler is not None:
            self.scaler.load_state_dict(state.get("loss_scale"))
        self.noise.load_state_dict(state.get("noise_scale") or {})
        self.health.load_state_dict(state.get("health"))
        self.spike_history.load_state_dict(state.get("spike_history"))
        self.clock.load_state_dict(state.get("time_budget"))
        self.state = LoopState(step=int(state["step"]), last_loss=state.get("loss"))
        self.resumed_from = str(ckpt)
        self.inherited = state.get("init_from") or self.inherited  # the run's source, kept across resumes
        self.events.write(STAGE, "resumed", step=self.state.step, checkpoint=str(ckpt))

    def announce(self) -> None:
        """A torchrun restart, then train_start: what runs, on what, from where."""
        tc, ctx, start_step = self.tc, self.ctx, self.state.step
        attempt = job_attempt(ctx, restart_attempt())  # the highest of every node's agent's count
        if attempt > 0:  # torchrun --max-restarts started this group again after a rank failed
            self.events.write(
                STAGE,
                "restart",
                attempt=attempt,
                by="torchrun",
                restarts=int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0),
                resume_from=self.resumed_from,
                resume_step=start_step,
            )
        self.tokens_per_step = self.loader.tokens_per_step  # the global batch, all ranks
        self.fpt = flops_per_token(self.mcfg, tc.seq_len)
        self.peak = MfuPeak.of(peak_of(self.device, self.dtype, tc.peak_tflops), ctx.world_size)
        self.events.write(
            STAGE,
            "train_start",
            step=start_step,
            max_steps=tc.max_steps,
            params=self.params,
            non_embedding_params=self.non_embedding,
            flops_per_token=self.fpt,
            pipeline=_pipeline_info(self.pipeline, self.mcfg, tc.grad_accum),
            tokens_per_step=self.tokens_per_step,
            device=str(self.device),
            dtype=str(self.dtype).replace("torch.", ""),
            threads=torch.get_num_threads(),
            peak_flops=self.peak.flops,
            peak_source=self.peak.kind,
            peak_origin=self.peak.origin,
            buckets=self.loader.weights,
            plan=self.loader.plan(),
            resumed_from=self.resumed_from,
            world_size=ctx.world_size,
            parallel=ctx.mode,
            init_from=(self.inherited or {}).get("from"),
            noise_scale={
                "measured": self.noise_off is None,
                "why_not": self.noise_off,
                "ema": tc.noise_scale_ema,
                "every": tc.noise_scale_every,
            },
            layout=(ctx.sizes.describe() if ctx.sizes is not None else None),
            sharding=sharding_report(self.model, self.device) if ctx.distributed else None,
        )

    def state_fields(self, step: int, loss: float | None) -> dict[str, Any]:
        """state.json's fields of a checkpoint of `step` (docs/training.md, resume)."""
        tc, inherited = self.tc, self.inherited
        at = self.state.schedule_step(step)
        return {
            "model_config": self.model.config.model_dump(mode="json"),  # with the current phase's RoPE
            "train_fingerprint": self.fingerprint,
            "config": _train_sections(self.cfg),
            "scheduler": {
                "kind": tc.schedule,
                "step": step,
                "schedule_step": at,
                "lr": lr_at(at, tc, self.anneal) * self.guard.lr_scale,
            },
            "time_budget": self.clock.state_dict(),
            "data_cursor": self.loader.cursor(step),
            "grad_accum": {"micro": 0, "of": tc.grad_accum},
            "guard": self.guard.state_dict(),
            "noise_scale": self.noise.state_dict(),
            "health": self.health.state_dict(),
            "spike_history": self.spike_history.state_dict(),
            "loss": loss,
            "tokens": step * self.tokens_per_step,
            # which model this one continues (export and `replay` read it from any checkpoint)
            "init_from": None if inherited is None else {k: v for k, v in inherited.items() if k != "model_config"},
            **({"loss_scale": self.scaler.state_dict()} if self.scaler is not None else {}),
        }

    def train(self, on_eval: EvalHook | None, progress: bool) -> dict[str, Any]:
        """Evaluate a resumed step if due, then run the loop to max_steps (or the time budget)."""
        tc, ctx, start_step = self.tc, self.ctx, self.state.step
        self.watchdog = _watchdog(self.run, tc, ctx)
        unwatched = self.watchdog.paused if self.watchdog is not None else contextlib.nullcontext
        keep = (tc.keep_checkpoints, tc.keep_every)
        self.ckpt = Checkpointer(
            self.ckpt_root, self.model, self.optimizer, ctx, self.events, self.state_fields, keep, start_step,
            resumed=self.resumed_from is not None, unwatched=unwatched,
        )  # fmt: skip
        self.ckpt_policy, self.grace = CheckpointPolicy(tc.ckpt_every), GraceWarning(tc.preempt_grace_s)
        self.verdicts = VerdictReporter(
            tc.guard, self.spike_history, lambda s: self.ckpt.keep_spike_state(s, tc.guard.keep_spike_states)
        )
        self.schedule, self.evaluate = (
            EvalSchedule(self.run.config.eval.in_training_every(tc.eval_every), tc.max_steps, tc.spectrum_every),
            Evaluator(on_eval, self.model, ctx, unwatched),
        )
        t_start = time.perf_counter()
        if self.resumed_from and self.schedule.due(start_step, self.clock.spent()):
            # The previous process may have died (or been interrupted) before or during this
            # evaluation; evaluating never changes training, so run it (again).
            self.evaluate(start_step)
        if start_step >= tc.max_steps or self.clock.spent():
            self.events.write(STAGE, "train_done", step=start_step, loss=self.state.last_loss, note="already finished")
            return _summary(start_step, self.state.last_loss, self.tokens_per_step, 0.0, self.params, self.resumed_from)
        self.stops = StopRequests()  # SIGINT (Ctrl-C) and SIGTERM (preemption): stop at a step end, checkpointed
        self.stops.install()
        try:
            self._prepare_steps()
            with _progress(progress and ctx.is_main, tc.max_steps, start_step) as (prog, task, console):
                console.quiet = not ctx.is_main
                self.prog, self.task, self.console = prog, task, console
                console.print(f"mfu against a peak of {self.peak.flops / 1e12:.3g} TFLOP/s: {self.peak.origin}", highlight=False)
                self._loop_deferred() if self.host_reads == "deferred" else self._loop()
        finally:
            if self.watchdog is not None:
                self.watchdog.stop()
            self.stops.uninstall()
            self.draws.close()
        seconds = time.perf_counter() - t_start
        step, loss, clock = self.state.step, self.state.last_loss, self.clock
        self.events.write(
            STAGE,
            "train_done",
            step=step,
            loss=loss,
            seconds=seconds,
            stopped_by="time" if clock.spent() else "steps",
            **({"elapsed_s": clock.elapsed, "max_seconds": clock.max_seconds} if clock.enabled else {}),
            **({"zero": self._zero_bytes()} if ctx.distributed else {}),
        )
        return _summary(step, loss, self.tokens_per_step, seconds, self.params, self.resumed_from)

    def _zero_bytes(self) -> dict[str, Any]:
        """The ZeRO stage and every rank's optimizer-state and gradient bytes, measured from the
        tensors it holds (a collective): what the memory model's `optimizer` and `grads` predict."""
        mine = [owned_state_bytes(self.optimizer), self.grad_bytes]
        every: list[Any] = [None] * self.ctx.world_size
        torch.distributed.all_gather_object(every, mine)
        return {"stage": self.ctx.zero, "optimizer_bytes": [e[0] for e in every], "grad_bytes": [e[1] for e in every]}

    def _prepare_steps(self) -> None:
        """What the steps need once: rank clocks, the watchdog, prefetch, compilation, the probes."""
        tc, ctx, model, start_step = self.tc, self.ctx, self.model, self.state.step
        hosts = rank_hosts(ctx) if tc.rank_stats_every > 0 and ctx.distributed else []
        self.slow_ranks, self.rank_clock = SlowRanks(tc.slow_rank_margin, tc.slow_rank_patience, hosts), RankClock()
        if self.watchdog is not None:
            self.watchdog.start()
        self.loader.start_prefetch(start_step + 1)
        use_compile, why = compile_decision(tc, tc.max_steps - start_step, model_parallel=ctx.model_parallel or ctx.cp_size > 1)
        self.events.write(
            STAGE, "compile", enabled=use_compile, reason=why, cache_dir=str(compile_cache_dir()) if use_compile else None
        )
        self.compiled = compile_model(self.train_model) if use_compile else self.train_model  # checkpoints and evals use `model`
        pipeline = self.pipeline
        self.update_ratio = UpdateRatio(
            model,
            keep_buffer=tc.metrics_every == 1,
            across=pipeline.group if pipeline is not None else None,
            skip=pipeline.tied_duplicate() if pipeline is not None else None,
        )
        self.embed_weight = model.embed_tokens.weight if model.embed_tokens is not None else None
        self.collapse_fault = EmbeddingCollapseFault(self.embed_weight, tc.faults)
        bucketed = tc.health.bucket_loss and tc.objective == "clm" and pipeline is None and ctx.cp_size == 1
        self.buckets = BucketLoss(list(self.store.buckets)) if bucketed else None
        self.act_every = tc.health.activation_stats_every if not ctx.model_parallel and ctx.cp_size == 1 else 0  # bare model
        self.act_probe = (
            ActivationProbe(model, tc.health.activation_rows, tc.health.attn_logit_queries) if self.act_every else None
        )
        if self.resumed_from and self.embed_weight is not None and self.schedule.spectrum_checked_at(start_step):
            self.health.replay_spectrum(start_step, self.embed_weight)  # its check came after its checkpoint

    def _loop(self) -> None:
        """The recipe: draw a batch and step, let the guard decide, log, checkpoint, stop if asked,
        look at health, evaluate. A rewinding rollback sends the loop back to its checkpoint's step."""
        tc, state, start_step = self.tc, self.state, self.state.step
        self._enter_phase(max(start_step, 1), announce=False)
        if self.inherited is not None and start_step == 0:
            self.evaluate(0)  # the inherited model on this run's held-out slices: "before", to measure forgetting
        while state.step < tc.max_steps:
            state.step += 1
            step, t0 = state.step, time.perf_counter()
            if tc.faults.kill or tc.faults.hang:
                process_fault(step, self.ctx.rank, tc.faults, self.run.path)
            self._enter_phase(step)
            done = self._step(step)  # compute, decide, update
            rewind_to, last = self._conclude(step, t0, done)
            if rewind_to is not None:  # the next step is rewind_to + 1 (its checkpoint is written)
                state.step = rewind_to
                continue
            if last:
                break

    def _conclude(self, step: int, t0: float, done: _StepResult, dt: float | None = None) -> tuple[int | None, bool]:
        """Everything after the update: a rollback, the step's time and event, the checkpoint, a
        requested stop, the watchdog, the spectrum, evaluation. Returns (the step a rollback
        rewinds to, whether this was the run's last step). `dt`: measured already (CUDA events)."""
        rewind_to = self._after_verdict(step, done)  # rollback: restored, maybe rewound
        dt, last = self._timing(step, t0, done, rewind_to, dt)
        self._log_step(step, t0, dt, last, done)
        if rewind_to is not None:
            return rewind_to, False
        if self.ckpt_policy.due(step, last, self.guard.spike is not None, self.ckpt.saved_step):
            self.ckpt.save(step, self.state.last_loss)
        self._stop_if_asked(step, done.extras)
        if self.watchdog is not None:
            self.watchdog.beat(step)
        if (warning := self.grace.check(step, dt, self.ckpt.last_seconds)) is not None:
            self.events.write(STAGE, "preempt_warning", **warning)
        if self.embed_weight is not None and self.schedule.spectrum_due(step, last):
            self._write(self.health.spectrum(step, self.embed_weight))
        if self.schedule.due(step, last):
            self.evaluate(step)
        return None, last

    def _loop_deferred(self) -> None:
        """`_loop` with train.host_reads deferred: step k+1's forward and backward are queued before
        the host reads and judges step k (one packed read), and its update is applied after, with
        the skip decided on the device. A step the run does not take after all (a rollback, the
        last step, a stop) is discarded unapplied, so the run takes exactly `_loop`'s steps."""
        tc, state = self.tc, self.state
        self._enter_phase(max(state.step, 1), announce=False)
        if self.inherited is not None and state.step == 0:
            self.evaluate(0)
        pending: _Launch | None = None
        while pending is not None or state.step < tc.max_steps:
            if pending is None:
                pending = self._apply(self._launch(state.step + 1))
            ahead = pending.step + 1
            queued = self._launch(ahead) if ahead <= tc.max_steps and not self._drain_before(ahead) else None
            state.step = pending.step
            done, dt = self._settle(pending)
            rewind_to, last = self._conclude(pending.step, pending.t0, done, dt)
            if rewind_to is not None or last or done.action == "rollback":
                if queued is not None:
                    self._discard(queued)
                state.step = rewind_to if rewind_to is not None else pending.step
                pending = None
                if last:
                    break
                continue
            pending = self._apply(queued) if queued is not None else None

    def _drain_before(self, step: int) -> bool:
        """Finish the pending step before launching `step`: a new curriculum phase (its reset of
        the guard's levels must follow the pending verdict), a process fault (the pending step's
        checkpoint comes first), or a time budget (the schedule reads the pending step's seconds)."""
        faults = self.tc.faults
        return self.loader.phase_at(step).name != self.state.phase or faults.kill or faults.hang or self.clock.enabled

    def _launch(self, step: int) -> _Launch:
        """Queue step `step`'s forward, backward and clipping; nothing is read on the host."""
        tc, guard = self.tc, self.guard
        t0, timer = time.perf_counter(), _StepTimer(self.device)
        if tc.faults.kill or tc.faults.hang:
            process_fault(step, self.ctx.rank, tc.faults, self.run.path)
        self._enter_phase(step)
        extras: dict[str, Any] = {}
        measure = tc.metrics_every > 0 and step % tc.metrics_every == 0
        if measure:
            self.update_ratio.before()
        probe = NoiseProbe(on_device=True) if self.noise_off is None and step % tc.noise_scale_every == 0 else None
        at = self.clock.schedule_step(step) if self.clock.enabled else None
        self.state.read_schedule_at(step, at if at is not None else float(step))
        data, attempt = self.draws.of(step), guard.attempt(step)
        if attempt != step:
            extras.update(attempt=attempt, draw=guard.draw(step))
        update = launch_update(
            self.compiled, self.optimizer, data, step, tc, self.device, self.dtype, self.anneal, extras,
            lr_scale=guard.lr_scale, group_norms=measure, probe=probe, buckets=self.buckets,
            fault_step=attempt, schedule_step=at, scaler=self.scaler,
        )  # fmt: skip
        return _Launch(step, t0, timer, extras, data, at, attempt, measure, probe, update)

    def _apply(self, ln: _Launch) -> _Launch:
        """Apply the launched step unless the guard's rule skips it, decided on the device from the
        guard's thresholds as they stand after the previous step's verdict; pack what the host reads."""
        update = ln.update
        skip = device_skip(update.loss, update.grad_norm, self.guard.skip_limits(ln.step))
        collapsing = self.collapse_fault.before_update(ln.attempt)
        apply_unless(self.optimizer, skip)
        broadcast_updates(self.optimizer)  # ZeRO-1: every owner's parameters to the other dp ranks
        parts = {"loss": update.loss, "grad_norm": update.grad_norm, "skip": skip}
        if self.scaler is not None:  # the scale this step ran at, then its update: on the device
            parts["loss_scale"] = self.scaler.scale.clone()
            self.scaler.update(~torch.isfinite(update.grad_norm))
        if ln.measure:
            parts["ratio"] = self.update_ratio.sums()
        if update.grad_sq is not None:
            parts["grad_sq"] = update.grad_sq[1]
        if self.buckets is not None:
            parts["buckets"] = self.buckets.take()
        if ln.probe is not None and ln.probe.pending is not None:
            parts["noise"] = ln.probe.pending
        self.grad_bytes = grad_bytes(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        self.collapse_fault.after_update(collapsing)
        ln.timer.stop()
        ln.packed = PackedRead(parts)
        return ln

    def _discard(self, ln: _Launch) -> None:
        """Drop a launched step the run does not take: its gradients and its bucket sums."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.buckets is not None:
            self.buckets.take()

    def _settle(self, ln: _Launch) -> tuple[_StepResult, float]:
        """The step's one host read, then the host's verdict on it (the same rule the device
        applied: a disagreement is a bug, never a silent difference) and its seconds."""
        assert ln.packed is not None
        vals, extras, update = ln.packed.read(), ln.extras, ln.update
        loss, grad_norm = vals["loss"][0], vals["grad_norm"][0]
        extras["forward_s"] = sum(c.seconds() for c in update.clocks)
        if update.grad_sq is not None:
            extras["grad_norms"] = {g: v**0.5 for g, v in group_sums(update.grad_sq[0], vals["grad_sq"]).items()}
        if self.buckets is not None:
            extras["bucket_loss"] = self.buckets.means(vals["buckets"])
        if ln.probe is not None and "noise" in vals:
            ln.probe.settle(vals["noise"][0])
        overflow = is_overflow(self.scaler, loss, grad_norm)
        if self.scaler is not None:
            extras["loss_scale"] = vals["loss_scale"][0]
        verdict = self._judge(ln.step, loss, grad_norm, extras, ln.probe, ln.data, overflow)
        if self.scaler is not None:
            self.scaler.note(ln.step, overflow, extras["loss_scale"])
        skipped = vals["skip"][0] != 0.0
        if verdict.action != "rollback" and skipped != (verdict.action == "skip"):
            raise RuntimeError(f"step {ln.step}: the device skipped={skipped} but the guard says {verdict.action}")
        ratio = UpdateRatio.ratio(*vals["ratio"]) if ln.measure and verdict.action == "apply" else None
        done = _StepResult(update.lr, loss, grad_norm, update.r_pad, ratio, verdict.action, extras, ln.data, ln.at)
        return done, ln.timer.seconds()

    def _enter_phase(self, step: int, announce: bool = True) -> None:
        """The curriculum phase of `step`: a new one resets the guard's and the detectors' levels
        (new data, new loss level) and, for a longer context, rebuilds the RoPE tables. At the
        loop's start (announce=False) the phase's RoPE is set without resets or events."""
        phase = self.loader.phase_at(step)
        phase_model = self.phase_models[phase.index]
        if not announce:
            self.state.phase = phase.name
            self.model.set_rope(phase_model)
            return
        if phase.name == self.state.phase:
            return
        self.state.phase = phase.name
        self.guard.reset_baseline()
        self.health.reset()
        if phase_model != self.model.config:  # a longer context
            self.model.set_rope(phase_model)
            fields = {k: getattr(self.model.config, k) for k in ("max_seq_len", *ROPE_FIELDS)}
            self.events.write(STAGE, "rope_changed", step=step, phase=phase.name, **fields)

    def _step(self, step: int) -> _StepResult:
        """Draw the step's batch, compute its gradients, let the guard judge, apply (or not)."""
        tc, ctx, guard = self.tc, self.ctx, self.guard
        extras: dict[str, Any] = {}
        # The per-group norms and the update ratio cost a pass over the gradients and a copy of
        # the parameters: every step by default, every metrics_every steps on big runs.
        measure = tc.metrics_every > 0 and step % tc.metrics_every == 0
        if measure:
            self.update_ratio.before()
        probe = NoiseProbe() if self.noise_off is None and step % tc.noise_scale_every == 0 else None
        at = self.clock.schedule_step(step) if self.clock.enabled else None
        self.state.read_schedule_at(step, at if at is not None else float(step))
        data, attempt = self.draws.of(step), guard.attempt(step)
        if attempt != step:  # after a rewinding rollback: which attempt, on which draw of the data
            extras.update(attempt=attempt, draw=guard.draw(step))
        lr, loss, grad_norm, r_pad = compute_update(
            self.compiled, self.optimizer, data, step, tc, self.device, self.dtype, self.anneal, extras,
            lr_scale=guard.lr_scale, group_norms=measure, ctx=ctx, pipeline=self.pipeline, probe=probe,
            schedule_step=at, buckets=self.buckets, fault_step=attempt, scaler=self.scaler,
        )  # fmt: skip
        if self.buckets is not None:
            extras["bucket_loss"] = self.buckets.result(ctx.dp_group, ctx.distributed)
        if ctx.distributed and tc.checksum_every > 0 and step % tc.checksum_every == 0:
            cross_rank_check(step, self.model, ctx, self.events, loss=loss, grad_norm=grad_norm, lr=lr)
        overflow = self._scale_step(step, loss, grad_norm, extras)
        verdict = self._judge(step, loss, grad_norm, extras, probe, data, overflow)
        if self.scaler is not None:
            self.scaler.note(step, overflow, extras["loss_scale"])
        ratio = None
        collapsing = self.collapse_fault.before_update(attempt)
        if verdict.action == "apply":
            self.optimizer.step()
            broadcast_updates(self.optimizer)  # ZeRO-1: every owner's parameters to the other dp ranks
            ratio = self.update_ratio.after() if measure else None
        self.grad_bytes = grad_bytes(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        self.collapse_fault.after_update(collapsing)
        return _StepResult(lr, loss, grad_norm, r_pad, ratio, verdict.action, extras, data, at)

    def _scale_step(self, step: int, loss: float, grad_norm: float, extras: dict[str, Any]) -> bool:
        """fp16 (immediate host reads): log the scale step `step` ran at and update it (backed off
        on any non-finite gradient, grown after a clean interval); whether the step overflowed."""
        if self.scaler is None:
            return False
        extras["loss_scale"] = float(self.scaler.scale)
        return after_step(self.scaler, loss, grad_norm)

    def _judge(
        self, step: int, loss: float, grad_norm: float, extras: dict[str, Any], probe: NoiseProbe | None, data: Loader,
        overflow: bool = False,
    ) -> Verdict:  # fmt: skip
        """The host's part of a step's verdict: the noise scale, the guard, its events, health."""
        self.state.last_loss = loss
        if probe is not None and probe.small is not None:
            extras.update(self.noise.update(probe.small, grad_norm * grad_norm, probe.b_big))
        verdict = self.guard.check(step, loss, grad_norm, overflow)
        stop_if_unguarded_divergence(self.tc.guard, step, loss, grad_norm, self.events, overflow)
        self.verdicts.report(step, verdict, self.guard, data, self.events)
        self._write(self.health.after_step(step, extras, applied=verdict.action == "apply"))
        return verdict

    def _after_verdict(self, step: int, done: _StepResult) -> int | None:
        """Carry out a rollback verdict (rollback.py); returns the step to rewind to, if rewinding."""
        if done.action != "rollback":
            return None
        to_step, target = roll_back(
            step, self.guard, self.model, self.optimizer, self.ckpt_root, self.events, done.loss, done.grad_norm
        )
        if not self.tc.guard.rollback_rewind:
            self.ckpt.save(step, done.loss)  # the rolled-back state, so a resume goes on from here
            return None
        drop_checkpoints_after(self.ckpt_root, to_step, self.ctx)
        self.state.schedule_at[to_step] = float(to_step)
        self.ckpt.save(to_step, read_state(target).get("loss"))  # same weights, the rewound guard state
        return to_step

    def _timing(
        self, step: int, t0: float, done: _StepResult, rewind_to: int | None, dt: float | None = None
    ) -> tuple[float, bool]:
        """The step's seconds (the activation probe included) and whether it is the run's last;
        `dt` when CUDA events timed it already (train.host_reads deferred: no synchronize)."""
        if self.act_probe is not None and step % self.act_every == 0:  # after the update: a no-grad look
            with autocast(self.device, self.dtype):
                done.extras.update(self.act_probe.measure(done.data.rebuild(step, 0).to(self.device)))
        if dt is None:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            dt = time.perf_counter() - t0
        clock = self.clock
        if clock.enabled:
            # every rank must stop at the same step on the same LR: rank 0's clock decides
            done.extras["schedule_step"] = done.at
            clock.add(self.ctx.broadcast(dt) if self.ctx.distributed else dt)
            done.extras["elapsed_s"] = clock.elapsed
        return dt, (step == self.tc.max_steps and rewind_to is None) or clock.spent()

    def _log_step(self, step: int, t0: float, dt: float, last: bool, done: _StepResult) -> None:
        """The train_step event, the progress bar and, every log_every steps, a console line."""
        tc, tps = self.tc, self.tokens_per_step / dt
        mfu, raised = self.peak.mfu(self.fpt * tps, step)
        if raised is not None:  # the start peak was low (a busy machine when it was timed): this step's is the peak
            self.events.write(STAGE, "peak_raised", **raised)
            self.console.print(
                f"[yellow]peak raised[/]: step {step} achieved {raised['new_peak'] / 1e12:.3g} TFLOP/s > {raised['old_peak'] / 1e12:.3g}"
            )
        self.events.write(
            STAGE,
            "train_step",
            step=step,
            loss=done.loss,
            lr=done.lr,
            grad_norm=done.grad_norm,
            update_ratio=done.ratio,
            action=done.action,
            tokens_per_s=tps,
            mfu=mfu,
            tokens=step * self.tokens_per_step,
            seconds=dt,
            r_pad=done.r_pad,
            phase=self.state.phase,
            memory_peak=memory_bytes(self.device)["peak"],
            **self.ckpt.age(step, t0),
            **done.extras,
        )
        self.prog.update(self.task, completed=step, info=f"loss {done.loss:.4f} lr {done.lr:.2e} {tps:,.0f} tok/s")
        if tc.log_every > 0 and (step % tc.log_every == 0 or last):
            self.console.print(
                f"step {step}/{tc.max_steps} loss {done.loss:.4f} lr {done.lr:.3e} "
                f"grad_norm {done.grad_norm:.3f} {tps:,.0f} tok/s mfu {mfu:.1%}",
                highlight=False,
            )

    def _stop_if_asked(self, step: int, extras: dict[str, Any]) -> None:
        """One all-reduce: every rank stops at the same step, whichever saw the signal; every
        rank_stats_every steps each rank's read and forward seconds ride along (slow ranks)."""
        tc = self.tc
        self.rank_clock.add(extras.get("data_wait_s", 0.0), extras.get("forward_s", 0.0))
        gather = tc.rank_stats_every > 0 and step % tc.rank_stats_every == 0
        stop, per_rank = step_end_agreement(self.ctx, self.stops.code, self.rank_clock if gather else None)
        for kind, info in self.slow_ranks.judge(step, per_rank) if per_rank is not None else []:
            self.events.write(STAGE, kind, **info)
            if kind == "slow_rank":
                self.console.print(
                    f"[yellow]slow rank[/]: rank {info['rank']} ({escape(str(info['host']))}) spends "
                    f"{info['ratio']:.2f}× the median rank's time reading and in forward "
                    f"passes ({info['cause']}) for {info['intervals']} intervals in a row"
                )
        if stop != NONE:
            path = self.ckpt.path_of(step, self.state.last_loss)
            stop_now(stop, step, path, self.stops, tc.preempt_grace_s, self.events)

    def _write(self, signals: list[tuple[str, dict[str, Any]]]) -> None:
        for kind, info in signals:
            self.events.write(STAGE, kind, **info)


@dataclass
class _StepResult:
    """What one optimizer step measured and decided, for the log and the steps after it."""

    lr: float
    loss: float
    grad_norm: float
    r_pad: float
    ratio: float | None
    action: str  # the guard's verdict: apply | skip | rollback
    extras: dict[str, Any]
    data: Loader
    at: float | None  # where the LR schedule was read (a time budget), else None


class _StepTimer:
    """A step's seconds without waiting for the GPU: CUDA events (read after the step's packed
    values arrived, when both have completed), wall time elsewhere (the CPU runs synchronously)."""

    def __init__(self, device: torch.device):
        self.t0, self.t1 = time.perf_counter(), 0.0
        self.events: tuple[Any, Any] | None = None
        if device.type == "cuda":
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.events[0].record()

    def stop(self) -> None:
        self.t1 = time.perf_counter()
        if self.events is not None:
            self.events[1].record()

    def seconds(self) -> float:
        if self.events is None:
            return self.t1 - self.t0
        self.events[1].synchronize()
        return float(self.events[0].elapsed_time(self.events[1])) / 1000.0


@dataclass
class _Launch:
    """A step queued on the device (train.host_reads deferred), until the host settles it."""

    step: int
    t0: float
    timer: _StepTimer
    extras: dict[str, Any]
    data: Loader
    at: float | None
    attempt: int
    measure: bool
    probe: NoiseProbe | None
    update: DeviceUpdate
    packed: PackedRead | None = None


def _pipeline_info(pipeline: Pipeline | None, mcfg: ModelConfig, grad_accum: int) -> dict[str, Any] | None:
    if pipeline is None:
        return None
    return {
        "stages": pipeline.n_stages,
        "schedule": pipeline.schedule_kind,
        "layers": [list(stage_layers(mcfg.n_layers, pipeline.n_stages, s)) for s in range(pipeline.n_stages)],
        "micro_batches": grad_accum,
        "bubble": pipeline.bubble(grad_accum),
    }


def _watchdog(run: RunDir, tc: Any, ctx: DistContext) -> Watchdog | None:
    """No step finished for hang_timeout_s: every rank dumps its stacks and exits (train/watchdog.py)."""
    if not tc.hang_timeout_s:
        return None
    return Watchdog(
        tc.hang_timeout_s,
        run.path / "hangs",
        ctx.rank,
        store=job_store(),
        on_hang=lambda info: run.events.write(STAGE, "hang", **info),
    )


def _whole_model_order(mcfg: ModelConfig, tc: Any) -> tuple[nn.Module, list[str]]:
    """The unsplit model (on the meta device: no memory, no init) and its parameter names in the
    order its optimizer holds them, which is the order of a one-process checkpoint's optim.pt."""
    with torch.device("meta"):
        whole = Transformer(mcfg)
    names = {id(p): n for n, p in whole.named_parameters()}
    return whole, [names[id(p)] for g in build_optimizer(whole, tc).param_groups for p in g["params"]]


def _summary(
    step: int, loss: float | None, tokens_per_step: int, seconds: float, params: int, resumed_from: str | None
) -> dict[str, Any]:
    return {
        "steps": step,
        "final_loss": loss,
        "tokens": step * tokens_per_step,
        "seconds": seconds,
        "params": params,
        "resumed_from": resumed_from,
    }
