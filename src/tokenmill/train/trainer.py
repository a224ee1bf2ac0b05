"""The training loop: one process, CPU or one GPU, exactly resumable.

    for step in max(resumed, 0)+1 .. max_steps:                      (optimizer steps, 1-based)
        lr = lr_at(step)
        for micro in 0 .. grad_accum-1:
            nll = token_nll_batch(model, loader.batch(step, micro)).sum() / n_targets(step); nll.backward()
        clip global grad norm (the pre-clip norm is logged); AdamW step
        event train_step; checkpoint every ckpt_every and at the end; on_eval every eval_every
        and after the last step; a first Ctrl-C stops here with a checkpoint

Training state S_t (DESIGN "Training state", seed 002 §5.6) and where each part lives:
  θ, Adam m/v/step        model.safetensors, optim.pt
  RNG states              rng.safetensors + state.json (python, numpy, torch CPU/CUDA); the
                          loop itself draws from no global generator: init uses a generator
                          seeded from the run seed, batches come from the stateless mixture Loader
  data cursor             loader.cursor(step): batches are a pure function of (seed, step,
                          micro), plus the store + mixture fingerprint (resume refuses other data)
  scheduler               lr_at(step): a pure function of the step
  accumulation position   always 0: checkpoints are taken between optimizer steps only
  guard state             placeholder ({}) until the spike guard exists
So a resumed run repeats the uninterrupted run's losses bit for bit on the same hardware and
thread count (CPU); on CUDA up to kernel non-determinism.
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

from tokenmill.config import ModelConfig, RunConfig
from tokenmill.errors import UserError
from tokenmill.mixture.loader import Loader
from tokenmill.model.objectives import token_nll_batch
from tokenmill.model.transformer import Transformer
from tokenmill.runs import RunDir
from tokenmill.scaling.flops import flops_per_token, peak_flops
from tokenmill.tokens.store import TokenStore
from tokenmill.train.checkpoint import (latest_checkpoint, list_checkpoints, load_checkpoint, read_state,
                                        save_checkpoint)
from tokenmill.train.device import autocast, enable_tf32, resolve_device, resolve_dtype
from tokenmill.train.optimizer import build_optimizer, lr_at, set_lr

STAGE = "train"
EvalHook = Callable[[int, nn.Module], None]


class TrainError(UserError, RuntimeError):
    """Training cannot start or continue; the message says why and what to do."""


class TrainingDiverged(TrainError):
    """The loss or gradient norm became NaN/inf."""


class TrainingInterrupted(KeyboardInterrupt):
    """Raised after a first Ctrl-C once the current step finished and a checkpoint was saved."""

    def __init__(self, step: int, checkpoint: Path):
        self.step = step
        self.checkpoint = checkpoint
        # How to continue depends on the caller (`train --resume`, or `run`/`demo` again): the CLI says it.
        super().__init__(f"interrupted at step {step}; checkpoint saved to {checkpoint}")

    def __str__(self) -> str:
        return str(self.args[0])


# --------------------------------------------------------------------------- helpers
def resolve_model_config(model_cfg: ModelConfig, store: TokenStore, seq_len: int) -> ModelConfig:
    """The model config with vocab_size taken from the token store when None, checked against it."""
    vocab = model_cfg.vocab_size if model_cfg.vocab_size is not None else store.vocab_size
    if vocab < store.vocab_size:
        raise TrainError(f"model.vocab_size={vocab} is smaller than the token store's vocabulary "
                         f"({store.vocab_size}, {store.root / '_meta.json'})")
    if seq_len > model_cfg.max_seq_len:
        raise TrainError(f"train.seq_len={seq_len} exceeds model.max_seq_len={model_cfg.max_seq_len}; "
                         f"raise model.max_seq_len or lower train.seq_len")
    return model_cfg.model_copy(update={"vocab_size": int(vocab)})


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
    raise TrainError(f"{ckpt} was written by a different training setup{detail}. Resuming would not "
                     f"continue the same run: restore the config, or delete {ckpt.parent} to start over")


class _InterruptFlag:
    """First SIGINT: request a clean stop after the current step. Second: abort at once."""

    def __init__(self) -> None:
        self.requested = False
        self._prev: Any = None
        self._installed = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._prev = signal.signal(signal.SIGINT, self._handle)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._prev)
            self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt("second Ctrl-C: training aborted without saving")
        self.requested = True
        sys.stderr.write("\nCtrl-C: finishing the current step and saving a checkpoint "
                         "(press Ctrl-C again to abort without saving)\n")
        sys.stderr.flush()


@contextlib.contextmanager
def _progress(enabled: bool, total: int, completed: int) -> Iterator[tuple[Any, Any, Any]]:
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    console = Console(stderr=True)
    prog = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console, disable=not (enabled and console.is_terminal))
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


def step_loss(model: nn.Module, loader: Loader, step: int, grad_accum: int, device: torch.device,
              dtype: torch.dtype, backward: bool, tc: Any = None, seed: int = 0,
              extras: dict[str, float] | None = None) -> tuple[float, float]:
    """(loss, r_pad) of the global batch of `step`: Σ NLL over its counted targets / their number,
    so every target weighs the same whatever micro-batch (or rank) it falls in; with
    backward=True the gradients of that loss (plus z-loss / MoE aux when configured; reported
    in `extras`, not in the loss) are accumulated.

    `tc` (a TrainConfig) with objective != "clm" routes each micro-batch through
    `objective_loss` (corruption seeded by (seed, step, micro)); there the loss is the mean of the
    micro-batch means, since the scored count of a corrupted batch is only known once built.
    tc=None or objective "clm" is the causal path."""
    objective = "clm" if tc is None else getattr(tc, "objective", "clm")
    reg = _Regularizers(model)
    n_targets = max(loader.n_targets(step), 1) if objective == "clm" else 0
    total = torch.zeros((), device=device)
    r_pad = 0.0
    try:
        for micro in range(grad_accum):
            batch = loader.batch(step, micro)
            r_pad += batch.r_pad
            batch = batch.to(device, non_blocking=True)
            with autocast(device, dtype), torch.set_grad_enabled(backward):
                if objective == "clm":
                    loss = token_nll_batch(model, batch).sum() / n_targets
                else:
                    from tokenmill.model.objectives import objective_loss

                    loss = objective_loss(model, batch, tc, seed, step, micro) / grad_accum
                extra = reg.term(getattr(batch, "loss_mask", None), grad_accum) if reg.active else None
            if backward:
                (loss + extra if extra is not None else loss).backward()
            total += loss.detach()
    finally:
        reg.close()
    if extras is not None and reg.active:
        extras.update({"z_loss": reg.z_sum} if reg.z > 0 else {})
        if reg.moe:
            extras.update({"moe_aux": reg.aux_sum, **model.moe_stats()})
    return total.item(), r_pad / grad_accum


def compute_update(model: nn.Module, optimizer: torch.optim.Optimizer, loader: Loader, step: int, tc: Any,
                   device: torch.device, dtype: torch.dtype, anneal: int | None,
                   extras: dict[str, float] | None = None) -> tuple[float, float, float, float]:
    """Everything of optimizer step `step` before `optimizer.step()`: set the LR, accumulate the
    gradients of the global batch, clip. Returns (lr, loss, pre-clip grad norm, r_pad).
    The trainer and `tokenmill replay` share it, so a replayed step is the same computation."""
    lr = lr_at(step, tc, anneal)
    set_lr(optimizer, lr)
    loss, r_pad = step_loss(model, loader, step, tc.grad_accum, device, dtype, backward=True, tc=tc,
                            seed=loader.seed, extras=extras)
    grad_norm = torch.nn.utils.clip_grad_norm_(
        model.parameters(), tc.grad_clip if tc.grad_clip > 0 else float("inf")).item()
    return lr, loss, grad_norm, r_pad


# --------------------------------------------------------------------------- entry point
def run_train(run: RunDir, resume: bool = False, on_eval: EvalHook | None = None,
              progress: bool = True) -> dict[str, Any]:
    """Train the run's model on its token store; return {steps, final_loss, tokens, seconds, params}.

    resume=True continues from the newest valid checkpoint (fresh start when there is none);
    resume=False refuses to touch a run that already has checkpoints. `on_eval(step, model)` is
    called every train.eval_every steps and after the final step, with the model in eval mode
    (training draws from no global RNG, so evaluation cannot change it). An evaluation due at the
    step a run resumes from is run again, since the stopped process may not have finished it; a
    first Ctrl-C skips the evaluation of the step it stops at (the resume then runs it).
    """
    cfg = run.config
    tc = cfg.train
    if tc.grad_accum < 1 or tc.max_steps < 1 or tc.micro_batch < 1 or tc.seq_len < 1:
        raise TrainError("train.grad_accum, max_steps, micro_batch and seq_len must all be >= 1")
    store = TokenStore(run.path / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    device = resolve_device(tc.device)
    enable_tf32(device)
    dtype = resolve_dtype(device, tc.dtype)
    prev_threads = torch.get_num_threads()
    if tc.threads:
        torch.set_num_threads(tc.threads)
    try:
        return _train(run, store, mcfg, device, dtype, resume, on_eval, progress)
    finally:
        torch.set_num_threads(prev_threads)


def _train(run: RunDir, store: TokenStore, mcfg: ModelConfig, device: torch.device, dtype: torch.dtype,
           resume: bool, on_eval: EvalHook | None, progress: bool) -> dict[str, Any]:
    cfg, tc, events = run.config, run.config.train, run.events
    ckpt_root = run.path / "checkpoints"
    fingerprint = run.fingerprint(STAGE)
    existing = list_checkpoints(ckpt_root)
    if existing and not resume:
        raise TrainError(f"{ckpt_root} already holds checkpoints (newest: step_{existing[-1][0]}); pass "
                         f"--resume to continue this run, or delete {ckpt_root} to start over")

    seed_everything(cfg.seed)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.seed)).to(device)
    model.train()
    optimizer = build_optimizer(model, tc, device)
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, cfg.seed,
                    pin_memory=device.type == "cuda")
    if loader.max_seq_len > mcfg.max_seq_len:
        raise TrainError(f"a curriculum phase uses sequences of {loader.max_seq_len} tokens but "
                         f"model.max_seq_len={mcfg.max_seq_len}; raise model.max_seq_len")
    anneal = next((p.start_step for p in loader.phases if p.anneal), None)

    start_step, last_loss, resumed_from = 0, None, None
    if resume:
        ckpt = latest_checkpoint(ckpt_root, events)
        if ckpt is None and existing:
            raise TrainError(f"no checkpoint under {ckpt_root} verifies (see checkpoint_corrupt events); "
                             f"delete {ckpt_root} to start over")
        if ckpt is not None:
            state = read_state(ckpt)
            _check_fingerprint(state, fingerprint, cfg, ckpt)
            saved = (state.get("data_cursor") or {}).get("fingerprint")
            if saved is not None:
                loader.check_fingerprint(saved, str(ckpt))  # refuses to resume on changed data
            kernel_flags = [{k: g.get(k) for k in ("foreach", "fused")} for g in optimizer.param_groups]
            load_checkpoint(ckpt, model, optimizer, restore_rng=True, verify=False)  # verified above
            for g, flags in zip(optimizer.param_groups, kernel_flags):
                g.update(flags)  # the kernel choice belongs to this machine, not the checkpoint's
            start_step, last_loss, resumed_from = int(state["step"]), state.get("loss"), str(ckpt)
            events.write(STAGE, "resumed", step=start_step, checkpoint=str(ckpt))

    tokens_per_step = tc.micro_batch * tc.seq_len * tc.grad_accum
    fpt = flops_per_token(mcfg, tc.seq_len)
    peak = tc.peak_tflops * 1e12 if tc.peak_tflops else peak_flops(device, dtype)
    params = model.num_params()
    events.write(STAGE, "train_start", step=start_step, max_steps=tc.max_steps, params=params,
                 non_embedding_params=model.num_params(exclude_embeddings=True), flops_per_token=fpt,
                 tokens_per_step=tokens_per_step, device=str(device), dtype=str(dtype).replace("torch.", ""),
                 threads=torch.get_num_threads(), peak_flops=peak, buckets=loader.weights, plan=loader.plan(),
                 resumed_from=resumed_from)

    def state_fields(step: int, loss: float | None) -> dict[str, Any]:
        return {
            "model_config": mcfg.model_dump(mode="json"),
            "train_fingerprint": fingerprint,
            "config": _train_sections(cfg),
            "scheduler": {"kind": "warmup_cosine", "step": step, "lr": lr_at(step, tc)},
            "data_cursor": loader.cursor(step),
            "grad_accum": {"micro": 0, "of": tc.grad_accum},
            "guard": {},
            "loss": loss,
            "tokens": step * tokens_per_step,
        }

    def checkpoint(step: int, loss: float | None) -> Path:
        t0 = time.perf_counter()
        path = save_checkpoint(ckpt_root, step, model, optimizer, state_fields(step, loss), keep=tc.keep_checkpoints)
        events.write(STAGE, "checkpoint", step=step, path=str(path), seconds=round(time.perf_counter() - t0, 4),
                     bytes=sum(f.stat().st_size for f in path.iterdir()))
        return path

    def evaluate(step: int) -> None:
        if on_eval is None:
            return
        model.eval()
        try:
            on_eval(step, model)
        finally:
            model.train()

    def eval_due(step: int) -> bool:
        return (tc.eval_every > 0 and step % tc.eval_every == 0) or step == tc.max_steps

    step = start_step
    t_start = time.perf_counter()
    if resumed_from and eval_due(start_step):
        # The previous process may have died (or been interrupted) before or during this
        # evaluation; evaluating never changes training, so run it (again).
        evaluate(start_step)
    if start_step >= tc.max_steps:
        events.write(STAGE, "train_done", step=start_step, loss=last_loss, note="already finished")
        return _summary(start_step, last_loss, tokens_per_step, 0.0, params, resumed_from)

    flag = _InterruptFlag()
    flag.install()
    loader.start_prefetch(start_step + 1)
    try:
        with _progress(progress, tc.max_steps, start_step) as (prog, task, console):
            saved_step = start_step if resumed_from else -1
            for step in range(start_step + 1, tc.max_steps + 1):
                t0 = time.perf_counter()
                extras: dict[str, Any] = {}
                lr, last_loss, grad_norm, r_pad = compute_update(model, optimizer, loader, step, tc, device,
                                                                 dtype, anneal, extras)
                if not (math.isfinite(last_loss) and math.isfinite(grad_norm)):
                    events.write(STAGE, "diverged", step=step, loss=last_loss, grad_norm=grad_norm)
                    raise TrainingDiverged(
                        f"training diverged at step {step}: loss={last_loss}, grad_norm={grad_norm}; the "
                        f"optimizer step was not applied. Lower train.lr or raise train.warmup_steps, and "
                        f"resume from the last checkpoint")
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                dt = time.perf_counter() - t0
                tps = tokens_per_step / dt
                events.write(STAGE, "train_step", step=step, loss=last_loss, lr=lr, grad_norm=grad_norm,
                             tokens_per_s=tps, mfu=fpt * tps / peak, tokens=step * tokens_per_step,
                             seconds=dt, r_pad=r_pad, phase=loader.phase_at(step).name, **extras)
                info = f"loss {last_loss:.4f} lr {lr:.2e} {tps:,.0f} tok/s"
                prog.update(task, completed=step, info=info)
                if tc.log_every > 0 and (step % tc.log_every == 0 or step == tc.max_steps):
                    console.print(f"step {step}/{tc.max_steps} loss {last_loss:.4f} lr {lr:.3e} "
                                  f"grad_norm {grad_norm:.3f} {tps:,.0f} tok/s mfu {fpt * tps / peak:.1%}",
                                  highlight=False)

                if (tc.ckpt_every > 0 and step % tc.ckpt_every == 0) or step == tc.max_steps:
                    checkpoint(step, last_loss)
                    saved_step = step
                if flag.requested:
                    path = ckpt_root / f"step_{step}"
                    if saved_step != step:
                        path = checkpoint(step, last_loss)
                    events.write(STAGE, "interrupted", step=step, checkpoint=str(path))
                    raise TrainingInterrupted(step, path)
                if eval_due(step):
                    evaluate(step)
    finally:
        flag.uninstall()
        loader.close()

    seconds = time.perf_counter() - t_start
    events.write(STAGE, "train_done", step=step, loss=last_loss, seconds=seconds)
    return _summary(step, last_loss, tokens_per_step, seconds, params, resumed_from)


def _summary(step: int, loss: float | None, tokens_per_step: int, seconds: float, params: int,
             resumed_from: str | None) -> dict[str, Any]:
    return {"steps": step, "final_loss": loss, "tokens": step * tokens_per_step, "seconds": seconds,
            "params": params, "resumed_from": resumed_from}
