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

Training state S_t (DESIGN "Training state", seed 002 §5.6) and where each part lives:
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
import math
import os
import random
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn
from rich.markup import escape

from tokenmill.config import RunConfig
from tokenmill.model.config import ModelConfig
from tokenmill.model.rope import ROPE_FIELDS, phase_model_configs, rope_warnings
from tokenmill.errors import UserError
from tokenmill.mixture.collapse_guard import guard_mixture
from tokenmill.mixture.loader import Loader
from tokenmill.model.objectives import counted_targets, token_nll_batch
from tokenmill.model.transformer import Transformer
from tokenmill.runs import RunDir
from tokenmill.scaling.flops import flops_per_token, peak_flops_source
from tokenmill.tokens.store import TokenStore
from tokenmill.train.checkpoint import CheckpointError, list_checkpoints, read_state, verify_checkpoint
from tokenmill.train.restore import load_checkpoint
from tokenmill.train.activation_stats import ActivationProbe
from tokenmill.train.bucket_alert import BucketLossAlert
from tokenmill.train.bucket_loss import BucketLoss
from tokenmill.train.budget import resolve_budget
from tokenmill.train.collapse_alert import CollapseAlert
from tokenmill.train.drift import GradDrift
from tokenmill.train.clipping import clip_gradients
from tokenmill.train.pipeline_parallel import Pipeline, build_pipeline, stage_layers
from tokenmill.train.compilation import compile_cache_dir, compile_decision, compile_model
from tokenmill.train.device import autocast, enable_tf32, resolve_dtype
from tokenmill.train.dist_checkpoint import agreed_latest_checkpoint, load_full_into_stage, save_train_checkpoint
from tokenmill.train.distributed import (
    DistContext,
    RankMismatch,
    all_reduce_sum,
    cross_rank_check,
    evaluation_model,
    event_log,
    init_distributed,
    reduce_step_stats,
    set_grad_sync,
    wrap_model,
)
from tokenmill.train.faults import (
    collapse_embedding,
    collapsing_embedding,
    corrupt_batch,
    lr_factor,
    poison_loss,
    poison_rows,
    process_fault,
    slow_read,
)
from tokenmill.train.guard import StabilityGuard
from tokenmill.train.sharding import sharding_report
from tokenmill.train.metrics import UpdateRatio, embedding_spectrum, grad_norms_by_group, memory_bytes
from tokenmill.train.noise_scale import NoiseProbe, NoiseScale, unavailable_reason
from tokenmill.train.optimizer import build_optimizer, lr_at, set_lr
from tokenmill.train.rank_times import RankClock, SlowRanks, rank_hosts, step_end_agreement
from tokenmill.train.spike_kinds import SpikeHistory, documents, is_severe, magnitude
from tokenmill.train.stop_signals import INTERRUPTED_EXIT, NONE, PREEMPT, PREEMPTED_EXIT, StopRequests
from tokenmill.train.time_budget import TimeBudget
from tokenmill.train.watchdog import Watchdog, job_store, restart_attempt

STAGE = "train"
EvalHook = Callable[[int, nn.Module], None]


class TrainError(UserError, RuntimeError):
    """Training cannot start or continue; the message says why and what to do."""


class TrainingDiverged(TrainError):
    """The loss or gradient norm became NaN/inf."""


class TrainingInterrupted(KeyboardInterrupt):
    """Raised after a first Ctrl-C once the current step finished and a checkpoint was saved."""

    exit_code = INTERRUPTED_EXIT
    what = "interrupted"

    def __init__(self, step: int, checkpoint: Path):
        self.step = step
        self.checkpoint = checkpoint
        # How to continue depends on the caller (`train --resume`, or `run`/`demo` again): the CLI says it.
        super().__init__(f"{self.what} at step {step}; checkpoint saved to {checkpoint}")

    def __str__(self) -> str:
        return str(self.args[0])


class TrainingPreempted(TrainingInterrupted):
    """Raised after a SIGTERM (preemption) once every rank finished the step and the checkpoint is written."""

    exit_code = PREEMPTED_EXIT
    what = "preempted"


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


def _check_fingerprint(state: dict[str, Any], fingerprint: str, cfg: RunConfig, ckpt: Path) -> None:
    if state.get("train_fingerprint") == fingerprint:
        return
    changes = _diff(state.get("config", {}), _train_sections(cfg))
    detail = ("; changed: " + ", ".join(changes)) if changes else " (the upstream data changed)"
    raise TrainError(
        f"{ckpt} was written by a different training setup{detail}. Resuming would not "
        f"continue the same run: restore the config, or delete {ckpt.parent} to start over"
    )


@contextlib.contextmanager
def _progress(enabled: bool, total: int, completed: int) -> Iterator[tuple[Any, Any, Any]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True)
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


class _Regularizers:
    """z-loss on the output log-partition and the MoE auxiliary losses, when the model has them.

    The logits are caught with a forward hook, so the objectives stay plain NLL functions; with
    both coefficients at 0 nothing is registered and the step is exactly the unregularized one."""

    def __init__(self, model: nn.Module):
        cfg = getattr(model, "config", None)
        self.model = model
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
            z = self.model.z_loss(self.logits, keep)
            self.z_sum += float(z.detach()) / grad_accum
            total = total + z
        if self.moe:
            aux = self.model.aux_loss()
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


def step_loss(
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
) -> tuple[float, float]:
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
    differs from the step after a rewinding rollback."""
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
            t0 = time.perf_counter()
            batch = loader.batch(step, micro)
            if faults is not None and faults.slow:
                slow_read(loader.rank, faults)
            data_wait += time.perf_counter() - t0
            r_pad += batch.r_pad
            set_grad_sync(model, not backward or micro == grad_accum - 1)  # reduce once per step (DDP/FSDP)
            if faults is not None and fs in faults.corrupt_steps:
                batch = corrupt_batch(batch, fs, micro, faults, loader.store.vocab_size, seed)
            if faults is not None and faults.poison_bucket is not None:
                batch = poison_rows(batch, loader.row_buckets(step, micro), fs, micro, faults, loader.store.vocab_size, seed)
            batch = batch.to(device, non_blocking=True)
            with autocast(device, dtype), torch.set_grad_enabled(backward), forward:
                if objective == "clm":
                    nll = token_nll_batch(model, batch)
                    loss = nll.sum() / n_targets
                    if buckets is not None:
                        buckets.add(nll, batch.loss_mask, loader.row_buckets(step, micro))
                else:
                    from tokenmill.model.objectives import objective_loss

                    # a mean over every micro-batch of every rank (ranks' gradients are summed)
                    loss = objective_loss(model, batch, tc, seed, step, micro) / (grad_accum * loader.world_size)
                extra = reg.term(getattr(batch, "loss_mask", None), grad_accum * loader.world_size) if reg.active else None
                if faults is not None:
                    loss = poison_loss(loss, fs, faults)
            if backward:
                (loss + extra if extra is not None else loss).backward()
                if probe is not None and micro == 0 and objective == "clm":
                    probe.measure(model.parameters(), counted_targets(batch), n_targets)
            total += loss.detach()
    finally:
        reg.close()
    if extras is not None:
        extras["data_wait_s"] = data_wait
        extras["forward_s"] = forward.seconds()
    if extras is not None and reg.active:
        extras.update({"z_loss": reg.z_sum} if reg.z > 0 else {})
        if reg.moe:
            extras.update({"moe_aux": reg.aux_sum, **model.moe_stats()})
    return total.item(), r_pad / grad_accum


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
    instead of `step`; `fault_step` where injected faults are looked up (default `step`).
    The trainer and `tokenmill replay` share it, so a replayed step is the same computation."""
    at = step if schedule_step is None else schedule_step
    lr = lr_at(at, tc, anneal) * lr_scale * lr_factor(step if fault_step is None else fault_step, tc.faults)
    set_lr(optimizer, lr)
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
        )
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
    loss, r_pad = reduce_step_stats(loss, r_pad, extras, loader.world_size, ctx.dp_group if ctx else None)
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
    tc = resolve_budget(cfg.train, world_size=ctx.dp_size)  # token-denominated knobs -> steps, once
    if tc.grad_accum < 1 or tc.max_steps < 1 or tc.micro_batch < 1 or tc.seq_len < 1:
        raise TrainError("train.grad_accum, max_steps, micro_batch and seq_len must all be >= 1")
    if ctx.sizes is not None and tc.grad_accum < ctx.sizes.pp:
        raise TrainError(
            f"pp={ctx.sizes.pp} needs at least {ctx.sizes.pp} micro-batches per step on each of the "
            f"{ctx.sizes.dp} data-parallel replica(s), but train.global_batch_tokens gives "
            f"grad_accum={tc.grad_accum}: raise the global batch or lower train.micro_batch"
        )
    store = TokenStore(run.path / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    device = ctx.device  # train.device, or this rank's GPU under torchrun
    enable_tf32(device)
    dtype = resolve_dtype(device, tc.dtype)
    prev_threads = torch.get_num_threads()
    if tc.threads:
        torch.set_num_threads(tc.threads)
    try:
        return _train(run, tc, store, mcfg, device, dtype, resume, on_eval, progress, ctx)
    finally:
        torch.set_num_threads(prev_threads)


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
    cfg, events = run.config, event_log(run.events, ctx)  # one timeline: rank 0 writes it
    ckpt_root = run.path / "checkpoints"
    fingerprint = run.fingerprint(STAGE)
    existing = list_checkpoints(ckpt_root)
    if existing and not resume:
        raise TrainError(
            f"{ckpt_root} already holds checkpoints (newest: step_{existing[-1][0]}); pass "
            f"--resume to continue this run, or delete {ckpt_root} to start over"
        )

    seed_everything(cfg.train_seed)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.train_seed))
    inherited = None
    if tc.init_from and not existing:  # a resumed run restores its own weights below
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
    model = model.to(device)
    model.activation_checkpointing = tc.activation_checkpointing
    model.train()
    params, non_embedding = model.num_params(), model.num_params(exclude_embeddings=True)  # the whole model
    pipeline = None
    if ctx.sizes is not None and ctx.sizes.pp > 1:  # this rank keeps its stage's part of the model only
        pipeline = build_pipeline(model, ctx.mesh, ctx.sizes, ctx.rank, tc.parallel.pp_schedule, device, dtype)
    train_model = wrap_model(model, ctx, tc)  # DDP wrapper, or `model` itself sharded in place (FSDP, TP)
    optimizer = build_optimizer(model, tc, device)
    if inherited is not None and tc.init_optimizer:
        if ctx.model_parallel or (ctx.distributed and tc.distributed == "fsdp"):
            raise TrainError(
                "train.init_optimizer loads a one-process optimizer state: not with FSDP, tensor "
                "or pipeline parallelism (DDP and one process are fine)"
            )
        from tokenmill.train.init_from import init_optimizer

        init_optimizer(optimizer, inherited)
    guard = StabilityGuard(tc.guard, judge_after=tc.warmup_steps)
    loader = Loader(
        store,
        cfg.mixture,
        tc.seq_len,
        tc.micro_batch,
        tc.grad_accum,
        tc.max_steps,
        cfg.train_seed,
        world_size=ctx.dp_size,
        rank=ctx.dp_rank,
        pin_memory=device.type == "cuda",
    )
    guard_mixture(run.path, store, loader.phases, cfg.mixture.synthetic, events)  # refused before any step
    draws: dict[int, Loader] = {0: loader}

    def data_of(step: int) -> Loader:
        """The loader of step `step`'s batch: draw k > 0 (a step a rewinding rollback took back k
        times) is the loader under another seed, so its batches are fresh, and as exactly
        reproducible on resume as draw 0 (the guard state names the draws)."""
        k = guard.draw(step)
        if k not in draws:
            draws[k] = Loader(
                store,
                cfg.mixture,
                tc.seq_len,
                tc.micro_batch,
                tc.grad_accum,
                tc.max_steps,
                draw_seed(cfg.train_seed, k),
                world_size=ctx.dp_size,
                rank=ctx.dp_rank,
                pin_memory=device.type == "cuda",
            )
        return draws[k]

    phase_models = _phase_models(mcfg, loader, ctx)
    for warning in rope_warnings(mcfg, [(p.name, p.seq_len, m) for p, m in zip(loader.phases, phase_models)]):
        events.write(STAGE, "rope_warning", message=warning)
        if ctx.is_main:
            print(f"warning: {warning}", file=sys.stderr)
    anneal = next((p.start_step for p in loader.phases if p.anneal), None)
    clock = TimeBudget(tc.max_seconds, tc.max_steps)
    if clock.enabled and len(loader.phases) > 1:
        raise TrainError(
            f"train.max_seconds={tc.max_seconds} runs the LR schedule on elapsed time, but the "
            f"curriculum's {len(loader.phases)} phases are placed by step: use one phase "
            f"(mixture.phases: []) or a step budget (train.max_steps)"
        )
    noise = NoiseScale(tc.noise_scale_ema)
    noise_off = unavailable_reason(
        tc.grad_accum, tc.objective, ctx.model_parallel, ctx.distributed and tc.distributed == "fsdp", tc.noise_scale_every
    )
    drift = GradDrift(tc.health.drift_window, tc.health.drift_ratio, start_after=tc.warmup_steps)
    collapse = CollapseAlert(tc.health.collapse_ratio)
    bucket_alert = BucketLossAlert(tc.health.bucket_alert_ratio, tc.health.bucket_alert_patience, tc.health.bucket_alert_window)

    start_step, last_loss, resumed_from = 0, None, None
    resumed_spikes: dict[str, Any] | None = None
    if resume:
        ckpt = agreed_latest_checkpoint(ckpt_root, events, ctx)  # rank 0 decides for every rank
        if ckpt is None and existing:
            raise TrainError(
                f"no checkpoint under {ckpt_root} verifies (see checkpoint_corrupt events); delete {ckpt_root} to start over"
            )
        if ckpt is not None:
            state = read_state(ckpt)
            _check_fingerprint(state, fingerprint, cfg, ckpt)
            full_format = pipeline is not None and state.get("kind") != "dcp"
            saved = (state.get("data_cursor") or {}).get("fingerprint")
            if saved is not None:
                loader.check_fingerprint(saved, str(ckpt))  # refuses to resume on changed data
            if full_format:  # a one-process/DDP checkpoint: this stage's part of it
                whole, order = _whole_model_order(mcfg, tc)
                load_full_into_stage(ckpt, state, model, optimizer, whole, order)
            else:
                _load_training_state(ckpt, model, optimizer, restore_rng=True)
            guard.load_state_dict(state.get("guard") or {})
            noise.load_state_dict(state.get("noise_scale") or {})
            drift.load_state_dict((state.get("health") or {}).get("grad_drift"))
            collapse.load_state_dict((state.get("health") or {}).get("embedding_collapse"))
            bucket_alert.load_state_dict((state.get("health") or {}).get("bucket_loss"))
            resumed_spikes = state.get("spike_history")
            clock.load_state_dict(state.get("time_budget"))
            start_step, last_loss, resumed_from = int(state["step"]), state.get("loss"), str(ckpt)
            inherited = state.get("init_from") or inherited  # the source the run started from, kept across resumes
            events.write(STAGE, "resumed", step=start_step, checkpoint=str(ckpt))
    if restart_attempt() > 0:  # torchrun --max-restarts started this group again after a rank failed
        events.write(
            STAGE,
            "restart",
            attempt=restart_attempt(),
            by="torchrun",
            restarts=int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0),
            resume_from=resumed_from,
            resume_step=start_step,
        )

    tokens_per_step = loader.tokens_per_step  # the global batch, all ranks
    fpt = flops_per_token(mcfg, tc.seq_len)
    peak, peak_source = peak_flops_source(device, dtype, tc.peak_tflops)
    peak *= ctx.world_size  # the job's peak: tokens/s and MFU count the global batch over every rank's device
    pipe_info = (
        None
        if pipeline is None
        else {
            "stages": pipeline.n_stages,
            "schedule": pipeline.schedule_kind,
            "layers": [list(stage_layers(mcfg.n_layers, pipeline.n_stages, s)) for s in range(pipeline.n_stages)],
            "micro_batches": tc.grad_accum,
            "bubble": pipeline.bubble(tc.grad_accum),
        }
    )
    events.write(
        STAGE,
        "train_start",
        step=start_step,
        max_steps=tc.max_steps,
        params=params,
        non_embedding_params=non_embedding,
        flops_per_token=fpt,
        pipeline=pipe_info,
        tokens_per_step=tokens_per_step,
        device=str(device),
        dtype=str(dtype).replace("torch.", ""),
        threads=torch.get_num_threads(),
        peak_flops=peak,
        peak_source=peak_source,
        buckets=loader.weights,
        plan=loader.plan(),
        resumed_from=resumed_from,
        world_size=ctx.world_size,
        parallel=ctx.mode,
        init_from=(inherited or {}).get("from"),
        noise_scale={
            "measured": noise_off is None,
            "why_not": noise_off,
            "ema": tc.noise_scale_ema,
            "every": tc.noise_scale_every,
        },
        layout=(ctx.sizes.describe() if ctx.sizes is not None else None),
        sharding=sharding_report(model, device) if ctx.distributed else None,
    )

    def state_fields(step: int, loss: float | None) -> dict[str, Any]:
        return {
            "model_config": model.config.model_dump(mode="json"),  # with the current phase's RoPE
            "train_fingerprint": fingerprint,
            "config": _train_sections(cfg),
            "scheduler": {
                "kind": tc.schedule,
                "step": step,
                "schedule_step": at_of.get(step, step),
                "lr": lr_at(at_of.get(step, step), tc, anneal) * guard.lr_scale,
            },
            "time_budget": clock.state_dict(),
            "data_cursor": loader.cursor(step),
            "grad_accum": {"micro": 0, "of": tc.grad_accum},
            "guard": guard.state_dict(),
            "noise_scale": noise.state_dict(),
            "health": {
                "grad_drift": drift.state_dict(),
                "embedding_collapse": collapse.state_dict(),
                "bucket_loss": bucket_alert.state_dict(),
            },
            "spike_history": spike_history.state_dict(),
            "loss": loss,
            "tokens": step * tokens_per_step,
            # which model this one continues (export and `replay` read it from any checkpoint)
            "init_from": None if inherited is None else {k: v for k, v in inherited.items() if k != "model_config"},
        }

    last_ckpt: dict[str, Any] = {"step": start_step, "t": time.perf_counter(), "seconds": None}
    at_of: dict[int, float] = {}  # the step being taken -> where its LR was read (one entry; differs under a time budget)
    # No step finished for hang_timeout_s: every rank dumps its stacks and exits (train/watchdog.py).
    watchdog = (
        Watchdog(
            tc.hang_timeout_s,
            run.path / "hangs",
            ctx.rank,
            store=job_store(),
            on_hang=lambda info: run.events.write(STAGE, "hang", **info),
        )
        if tc.hang_timeout_s
        else None
    )
    unwatched = watchdog.paused if watchdog is not None else contextlib.nullcontext

    def checkpoint(step: int, loss: float | None) -> Path:
        t0 = time.perf_counter()
        last_ckpt.update(step=step, t=t0)
        with unwatched():
            path = save_train_checkpoint(
                ckpt_root,
                step,
                model,
                optimizer,
                state_fields(step, loss),
                ctx,
                keep=tc.keep_checkpoints,
                keep_every=tc.keep_every,
            )  # every rank takes part
        last_ckpt["seconds"] = time.perf_counter() - t0
        events.write(
            STAGE,
            "checkpoint",
            step=step,
            path=str(path),
            seconds=round(last_ckpt["seconds"], 4),
            bytes=sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if ctx.is_main else None,
        )
        return path

    spike_history = SpikeHistory()
    spike_history.load_state_dict(resumed_spikes)
    kept_episode: dict[str, Any] = {}

    def keep_spike_state(step: int) -> Path:
        """θ_{step-1} and its optimizer state (the spiking step is not applied), kept for diagnosis:
        `tokenmill replay --step <step>` starts from it. Not a resume or rollback target."""
        with unwatched():
            return save_train_checkpoint(
                ckpt_root / "spikes",
                step - 1,
                model,
                optimizer,
                state_fields(step - 1, None),
                ctx,
                keep=tc.guard.keep_spike_states,
            )

    def evaluate(step: int) -> None:
        if on_eval is None:
            return
        with unwatched():  # rank 0 evaluates while the others wait in the barrier: longer than a step
            eval_model = evaluation_model(model, ctx)  # rank 0 only (FSDP: a gathered full copy)
            if eval_model is not None:
                eval_model.eval()
                try:
                    on_eval(step, eval_model)
                finally:
                    eval_model.train()
            ctx.barrier()  # the other ranks wait for rank 0's evaluation

    def eval_due(step: int, last: bool = False) -> bool:
        return (tc.eval_every > 0 and step % tc.eval_every == 0) or step == tc.max_steps or last

    step = start_step
    t_start = time.perf_counter()
    if resumed_from and eval_due(start_step, clock.spent()):
        # The previous process may have died (or been interrupted) before or during this
        # evaluation; evaluating never changes training, so run it (again).
        evaluate(start_step)
    if start_step >= tc.max_steps or clock.spent():
        events.write(STAGE, "train_done", step=start_step, loss=last_loss, note="already finished")
        return _summary(start_step, last_loss, tokens_per_step, 0.0, params, resumed_from)

    stops = StopRequests()  # SIGINT (Ctrl-C) and SIGTERM (preemption): stop at a step end, checkpointed
    stops.install()
    hosts = rank_hosts(ctx) if tc.rank_stats_every > 0 and ctx.distributed else []
    slow_ranks, rank_clock = SlowRanks(tc.slow_rank_margin, tc.slow_rank_patience, hosts), RankClock()
    grace_warned = False
    if watchdog is not None:
        watchdog.start()
    loader.start_prefetch(start_step + 1)
    use_compile, why = compile_decision(tc, tc.max_steps - start_step, model_parallel=ctx.model_parallel)
    events.write(STAGE, "compile", enabled=use_compile, reason=why, cache_dir=str(compile_cache_dir()) if use_compile else None)
    compiled = compile_model(train_model) if use_compile else train_model  # checkpoints and evals use `model`
    update_ratio = UpdateRatio(
        model,
        keep_buffer=tc.metrics_every == 1,
        across=pipeline.group if pipeline is not None else None,
        skip=pipeline.tied_duplicate() if pipeline is not None else None,
    )
    embed_weight = model.embed_tokens.weight if model.embed_tokens is not None else None
    buckets = BucketLoss(list(store.buckets)) if tc.health.bucket_loss and tc.objective == "clm" and pipeline is None else None
    act_every = tc.health.activation_stats_every if not ctx.model_parallel else 0  # bare model: one process, DDP, FSDP
    act_probe = ActivationProbe(model, tc.health.activation_rows, tc.health.attn_logit_queries) if act_every else None
    spectrum_steps = tc.spectrum_every or tc.eval_every  # the spectrum's steps (spectrum_every 0: the evaluations')
    if resumed_from and embed_weight is not None and spectrum_steps > 0 and start_step % spectrum_steps == 0:
        collapse.check(start_step, embedding_spectrum(embed_weight))  # its check came after its checkpoint: replay it, silently
    try:
        with _progress(progress and ctx.is_main, tc.max_steps, start_step) as (prog, task, console):
            console.quiet = not ctx.is_main
            saved_step = start_step if resumed_from else -1
            phase = loader.phase_at(max(start_step, 1)).name
            model.set_rope(phase_models[loader.phase_at(max(start_step, 1)).index])
            if inherited is not None and start_step == 0:
                evaluate(0)  # the inherited model on this run's held-out slices: "before", to measure forgetting
            step = start_step
            while step < tc.max_steps:
                step += 1
                t0 = time.perf_counter()
                if tc.faults.kill or tc.faults.hang:
                    process_fault(step, ctx.rank, tc.faults, run.path)
                if loader.phase_at(step).name != phase:
                    phase = loader.phase_at(step).name
                    guard.reset_baseline()  # new data, new loss level
                    drift.reset()
                    bucket_alert.reset()
                    if phase_models[loader.phase_at(step).index] != model.config:  # a longer context
                        model.set_rope(phase_models[loader.phase_at(step).index])
                        events.write(
                            STAGE,
                            "rope_changed",
                            step=step,
                            phase=phase,
                            **{k: getattr(model.config, k) for k in ("max_seq_len", *ROPE_FIELDS)},
                        )
                extras: dict[str, Any] = {}
                # The per-group norms and the update ratio cost a pass over the gradients and a copy
                # of the parameters: every step by default, every metrics_every steps on big runs.
                measure = tc.metrics_every > 0 and step % tc.metrics_every == 0
                if measure:
                    update_ratio.before()
                probe = NoiseProbe() if noise_off is None and step % tc.noise_scale_every == 0 else None
                at = clock.schedule_step(step) if clock.enabled else None
                at_of.clear()
                at_of[step] = at if at is not None else float(step)
                data, attempt = data_of(step), guard.attempt(step)
                if attempt != step:  # after a rewinding rollback: which attempt, on which draw of the data
                    extras.update(attempt=attempt, draw=guard.draw(step))
                lr, last_loss, grad_norm, r_pad = compute_update(
                    compiled,
                    optimizer,
                    data,
                    step,
                    tc,
                    device,
                    dtype,
                    anneal,
                    extras,
                    lr_scale=guard.lr_scale,
                    group_norms=measure,
                    ctx=ctx,
                    pipeline=pipeline,
                    probe=probe,
                    schedule_step=at,
                    buckets=buckets,
                    fault_step=attempt,
                )
                if buckets is not None:
                    extras["bucket_loss"] = buckets.result(ctx.dp_group, ctx.distributed)
                if probe is not None and probe.small is not None:
                    extras.update(noise.update(probe.small, grad_norm * grad_norm, probe.b_big))
                if ctx.distributed and tc.checksum_every > 0 and step % tc.checksum_every == 0:
                    cross_rank_check(step, model, ctx, events, loss=last_loss, grad_norm=grad_norm, lr=lr)
                verdict = guard.check(step, last_loss, grad_norm)
                if not tc.guard.enabled and not (math.isfinite(last_loss) and math.isfinite(grad_norm)):
                    events.write(STAGE, "diverged", step=step, loss=last_loss, grad_norm=grad_norm)
                    raise TrainingDiverged(
                        f"training diverged at step {step}: loss={last_loss}, grad_norm={grad_norm}; the "
                        f"optimizer step was not applied (train.guard.enabled is false, so nothing skips it). "
                        f"Lower train.lr or raise train.warmup_steps, and resume from the last checkpoint"
                    )
                for kind, info in verdict.events:
                    if kind == "spike":
                        info["lineage"] = _lineage(data, step)
                    if kind in ("spike", "skip"):  # one-off, periodic or increasing (train/spike_kinds.py)
                        episode = (guard.spike or {}).get("start")
                        info.update(spike_history.classify(step, magnitude(info), documents(info.get("lineage")), episode))
                        if tc.guard.keep_spike_states > 0 and is_severe(info, tc.guard) and kept_episode.get("start") != episode:
                            kept_episode["start"] = episode  # the first severe step of an episode
                            info["state_kept"] = str(keep_spike_state(step))
                    events.write(STAGE, kind, **info)
                for info in drift.update(step, extras.get("grad_norms") if verdict.action == "apply" else None):
                    events.write(STAGE, "grad_drift", **info)
                for info in bucket_alert.update(step, extras.get("bucket_loss") or {}):
                    events.write(STAGE, "bucket_loss_warning", **info)
                ratio = None
                collapsing = embed_weight is not None and collapsing_embedding(attempt, tc.faults)
                if collapsing:
                    embed_weight.grad = None  # the injected fault: no gradient reaches the table (AdamW skips it)
                if verdict.action == "apply":
                    optimizer.step()
                    ratio = update_ratio.after() if measure else None
                optimizer.zero_grad(set_to_none=True)
                if collapsing:
                    collapse_embedding(embed_weight, tc.faults.collapse_rate)
                rewind_to = None
                if verdict.action == "rollback":
                    to_step, target = _rollback(step, guard, model, optimizer, ckpt_root, events, last_loss, grad_norm)
                    if tc.guard.rollback_rewind:
                        # The checkpoints after to_step belong to the abandoned attempt: a resume must
                        # never pick them. Dropped first, so a kill in between resumes from the old
                        # to_step checkpoint and replays this very rollback.
                        if ctx.is_main:
                            for s, p in list_checkpoints(ckpt_root):
                                if s > to_step:
                                    shutil.rmtree(p, ignore_errors=True)
                        ctx.barrier()
                        at_of[to_step] = float(to_step)
                        checkpoint(to_step, read_state(target).get("loss"))  # same weights, the rewound guard state
                        rewind_to = saved_step = to_step
                    else:
                        checkpoint(step, last_loss)  # the rolled-back state, so a resume goes on from here
                        saved_step = step
                if act_probe is not None and step % act_every == 0:  # after the update: a no-grad look, timed in the step
                    with autocast(device, dtype):
                        extras.update(act_probe.measure(data.rebuild(step, 0).to(device)))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                dt = time.perf_counter() - t0
                if clock.enabled:
                    # every rank must stop at the same step on the same LR: rank 0's clock decides
                    extras["schedule_step"] = at
                    clock.add(ctx.broadcast(dt) if ctx.distributed else dt)
                    extras["elapsed_s"] = clock.elapsed
                last = (step == tc.max_steps and rewind_to is None) or clock.spent()
                tps = tokens_per_step / dt
                mem = memory_bytes(device)
                events.write(
                    STAGE,
                    "train_step",
                    step=step,
                    loss=last_loss,
                    lr=lr,
                    grad_norm=grad_norm,
                    update_ratio=ratio,
                    action=verdict.action,
                    tokens_per_s=tps,
                    mfu=fpt * tps / peak,
                    tokens=step * tokens_per_step,
                    seconds=dt,
                    r_pad=r_pad,
                    phase=phase,
                    memory_peak=mem["peak"],
                    ckpt_age_steps=step - last_ckpt["step"],
                    ckpt_age_s=round(t0 - last_ckpt["t"], 3),
                    **extras,
                )
                info = f"loss {last_loss:.4f} lr {lr:.2e} {tps:,.0f} tok/s"
                prog.update(task, completed=step, info=info)
                if tc.log_every > 0 and (step % tc.log_every == 0 or last):
                    console.print(
                        f"step {step}/{tc.max_steps} loss {last_loss:.4f} lr {lr:.3e} "
                        f"grad_norm {grad_norm:.3f} {tps:,.0f} tok/s mfu {fpt * tps / peak:.1%}",
                        highlight=False,
                    )

                if rewind_to is not None:  # the next step is rewind_to + 1 (its checkpoint is written)
                    step = rewind_to
                    continue
                # No periodic checkpoint while a spike is open: the newest checkpoint stays the
                # last good one, the rollback target.
                periodic = tc.ckpt_every > 0 and step % tc.ckpt_every == 0 and guard.spike is None
                if (periodic or last) and saved_step != step:
                    checkpoint(step, last_loss)
                    saved_step = step
                # One all-reduce: every rank stops at the same step, whichever saw the signal; every
                # rank_stats_every steps each rank's read and forward seconds ride along.
                rank_clock.add(extras.get("data_wait_s", 0.0), extras.get("forward_s", 0.0))
                gather = tc.rank_stats_every > 0 and step % tc.rank_stats_every == 0
                stop, per_rank = step_end_agreement(ctx, stops.code, rank_clock if gather else None)
                for kind, info in slow_ranks.judge(step, per_rank) if per_rank is not None else []:
                    events.write(STAGE, kind, **info)
                    if kind == "slow_rank":
                        console.print(
                            f"[yellow]slow rank[/]: rank {info['rank']} ({escape(str(info['host']))}) spends "
                            f"{info['ratio']:.2f}× the median rank's time reading and in forward "
                            f"passes ({info['cause']}) for {info['intervals']} intervals in a row"
                        )
                if stop != NONE:
                    path = ckpt_root / f"step_{step}"
                    if saved_step != step:
                        path = checkpoint(step, last_loss)
                    if stop == PREEMPT:
                        since = stops.seconds_since_preempt()
                        events.write(
                            STAGE,
                            "preempted",
                            step=step,
                            checkpoint=str(path),
                            grace_s=tc.preempt_grace_s,
                            seconds_since_signal=since,
                            within_grace=None if since is None else since <= tc.preempt_grace_s,
                        )
                        raise TrainingPreempted(step, path)
                    events.write(STAGE, "interrupted", step=step, checkpoint=str(path))
                    raise TrainingInterrupted(step, path)
                if watchdog is not None:
                    watchdog.beat(step)
                if not grace_warned and last_ckpt["seconds"] is not None and dt + last_ckpt["seconds"] > tc.preempt_grace_s:
                    grace_warned = True  # a SIGTERM now would likely be followed by SIGKILL before the save ends
                    events.write(
                        STAGE,
                        "preempt_warning",
                        step=step,
                        step_s=dt,
                        checkpoint_s=last_ckpt["seconds"],
                        grace_s=tc.preempt_grace_s,
                    )
                if embed_weight is not None and (
                    (tc.spectrum_every > 0 and step % tc.spectrum_every == 0) or (tc.spectrum_every == 0 and eval_due(step, last))
                ):
                    spectrum = embedding_spectrum(embed_weight)
                    events.write(STAGE, "embedding_spectrum", step=step, **spectrum)
                    if (alert := collapse.check(step, spectrum)) is not None:
                        events.write(STAGE, "embedding_collapse", **alert)
                if eval_due(step, last):
                    evaluate(step)
                if last:
                    break
    finally:
        if watchdog is not None:
            watchdog.stop()
        stops.uninstall()
        for each in draws.values():
            each.close()

    seconds = time.perf_counter() - t_start
    events.write(
        STAGE,
        "train_done",
        step=step,
        loss=last_loss,
        seconds=seconds,
        stopped_by="time" if clock.spent() else "steps",
        **({"elapsed_s": clock.elapsed, "max_seconds": clock.max_seconds} if clock.enabled else {}),
    )
    return _summary(step, last_loss, tokens_per_step, seconds, params, resumed_from)


def _whole_model_order(mcfg: ModelConfig, tc: Any) -> tuple[nn.Module, list[str]]:
    """The unsplit model (on the meta device: no memory, no init) and its parameter names in the
    order its optimizer holds them, which is the order of a one-process checkpoint's optim.pt."""
    with torch.device("meta"):
        whole = Transformer(mcfg)
    names = {id(p): n for n, p in whole.named_parameters()}
    return whole, [names[id(p)] for g in build_optimizer(whole, tc).param_groups for p in g["params"]]


def _load_training_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, restore_rng: bool) -> None:
    """Weights and optimizer state from a verified checkpoint, keeping this machine's kernel flags."""
    kernel_flags = [{k: g.get(k) for k in ("foreach", "fused")} for g in optimizer.param_groups]
    load_checkpoint(path, model, optimizer, restore_rng=restore_rng, verify=False)
    for g, flags in zip(optimizer.param_groups, kernel_flags):
        g.update(flags)  # the kernel choice belongs to this machine, not the checkpoint's


def _lineage(loader: Loader, step: int, limit: int = 32) -> list[dict[str, Any]]:
    """The documents of the global batch of `step` (first `limit` spans): what a spike came from."""
    out: list[dict[str, Any]] = []
    for src in loader.global_provenance(step):
        for span in src.spans:
            out.append(
                {
                    "bucket": span.bucket,
                    "doc_id": span.doc_id,
                    "shard": span.shard,
                    "doc": span.doc,
                    "tokens": [span.start, span.end],
                    "row": src.row,
                    "micro": src.micro,
                    "rank": src.rank,
                }
            )
            if len(out) >= limit:
                return out
    return out


def _good_checkpoint(root: Path, below: int) -> tuple[int, Path] | None:
    """The newest checkpoint of a step < `below` that verifies and was written outside a spike."""
    for step, path in reversed(list_checkpoints(root)):
        if step >= below:
            continue
        try:
            state = verify_checkpoint(path)
        except (CheckpointError, OSError, ValueError):
            continue
        if not (state.get("guard") or {}).get("spike"):
            return step, path
    return None


def draw_seed(seed: int, draw: int) -> int:
    """The loader seed of draw `draw` of the data (0: the run's own): fresh batches for the steps a
    rewinding rollback takes again."""
    return seed if draw == 0 else (int(seed) * 1_000_003 + 7919 * draw) % (2**31 - 1)


def _rollback(
    step: int,
    guard: StabilityGuard,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    ckpt_root: Path,
    events: Any,
    loss: float,
    grad_norm: float,
) -> tuple[int, Path]:
    """Carry out the guard's rollback verdict at `step`: the last good checkpoint's weights and
    optimizer state, the LR backed off, the data window since that checkpoint skipped (rewinding:
    the step counter goes back to the checkpoint's). Returns (its step, its path)."""
    spike = dict(guard.spike or {})
    target = _good_checkpoint(ckpt_root, guard.good_checkpoint_bound())
    why = (
        f"the loss did not come back within {guard.cfg.recover_steps} steps of the spike at step "
        f"{spike.get('start')} ({spike.get('reason')}; loss {loss:.4g} vs {spike.get('pre_level')} before)"
    )
    if guard.rollbacks_left <= 0 or target is None:
        reason = (
            "no checkpoint from before the spike is left to roll back to"
            if target is None
            else f"{guard.cfg.max_rollbacks} rollbacks already"
        )
        events.write(STAGE, "diverged", step=step, loss=loss, grad_norm=grad_norm, reason=reason, spike=spike)
        raise TrainingDiverged(
            f"training diverged at step {step}: {why}, and {reason}. Lower train.lr or "
            f"raise train.warmup_steps (checkpoints: {ckpt_root})"
        )
    to_step, path = target
    _load_training_state(path, model, optimizer, restore_rng=False)  # verified by _good_checkpoint
    events.write(STAGE, "rollback", checkpoint=str(path), why=why, **guard.rolled_back(step, to_step))
    return to_step, path


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
