"""`tokenmill replay RUN --step N`: which documents were in the global batch of step N, and
that batch's loss recomputed from the checkpoint before it (replay the abnormal
batch: docs/training.md).

The loader is a pure function of (seed, step), so the batch is rebuilt exactly; the weights
θ_{N-1} come from the newest checkpoint at or before step N-1 (or, when none is kept, from the
initialization, which is itself a function of the seed), rolled forward through the same update
code the trainer runs (data order, LR schedule and RNG all restored), so the recomputed loss
equals the logged one on the same hardware and thread count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch

from tokenmill.config import RunConfig
from tokenmill.mixture.loader import Loader
from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.model.rope import phase_model_configs
from tokenmill.runs import RunDir, read_events
from tokenmill.tokens.store import TokenStore
from tokenmill.train.checkpoint import list_checkpoints, read_state, verify_checkpoint
from tokenmill.train.restore import load_checkpoint
from tokenmill.train.budget import resolve_budget
from tokenmill.train.config import TrainConfig
from tokenmill.train.device import resolve_device, resolve_dtype, torch_threads
from tokenmill.train.guard import StabilityGuard
from tokenmill.train.init_from import init_from
from tokenmill.train.loss_scale import LossScaler, after_step, build_scaler
from tokenmill.train.optimizer import build_optimizer
from tokenmill.train.trainer import TrainError, compute_update, draw_seed, resolve_model_config, step_loss


def _loader(run: RunDir, store: TokenStore) -> Loader:
    cfg, tc = run.config, resolve_budget(run.config.train)
    return Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, cfg.train_seed)


def _curated_rows(curated: Path, ids: set[str]) -> dict[str, dict[str, Any]]:
    """source / url / bucket of the wanted curated ids (reads only those columns)."""
    found: dict[str, dict[str, Any]] = {}
    for part in sorted(curated.glob("*/part-*.parquet")):
        if part.parent.name.startswith("_"):
            continue
        for row in pq.read_table(part, columns=["id", "source", "url", "bucket"]).to_pylist():
            if row["id"] in ids:
                found[row["id"]] = row
    return found


def batch_documents(run: RunDir, step: int) -> list[dict[str, Any]]:
    """Every document span of the global batch of `step`, in batch order."""
    return documents_of_steps(run, [step])[step]


def documents_of_steps(run: RunDir, steps: list[int]) -> dict[int, list[dict[str, Any]]]:
    """`batch_documents` of several steps, reading the curated metadata once (the report names the
    documents behind every warning)."""
    loader = _loader(run, TokenStore(run.sub("tokens")))
    samples = {step: loader.global_provenance(step) for step in steps}
    ids = {span.doc_id for batch in samples.values() for s in batch for span in s.spans}
    rows = _curated_rows(run.sub("curated"), ids)
    out: dict[int, list[dict[str, Any]]] = {}
    for step, batch in samples.items():
        out[step] = []
        for s in batch:
            for span in s.spans:
                meta = rows.get(span.doc_id, {})
                out[step].append(
                    {
                        "rank": s.rank,
                        "micro": s.micro,
                        "row": s.row,
                        "phase": s.phase,
                        "bucket": span.bucket,
                        "doc_id": span.doc_id,
                        "source": meta.get("source"),
                        "url": meta.get("url"),
                        "shard": span.shard,
                        "doc": span.doc,
                        "token_start": span.start,
                        "token_end": span.end,
                        "row_start": span.row_start,
                        "epoch": span.epoch,
                    }
                )
    return out


def replay_loss(run: RunDir, step: int) -> dict[str, Any]:
    """Loss of the global batch of `step` under θ_{step-1}, from the newest checkpoint before it."""
    with torch_threads(run.config.train.threads):  # training's count: CPU sums are then bitwise equal
        return _replay_loss(run, step)


def _initial_model(cfg: RunConfig, tc: TrainConfig, base: ModelConfig, ckpt: Path | None, device: torch.device) -> Transformer:
    """The model in the checkpoint's shape (else the run's, from its seed's init or its init_from
    weights), on `device`, in train mode; the checkpoint's weights are loaded later, with the optimizer."""
    mcfg = base if ckpt is None else type(cfg.model).model_validate(read_state(ckpt)["model_config"])
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.train_seed))
    if ckpt is None and tc.init_from:  # the run started from these weights, not from its seed's init
        init_from(model, tc.init_from)
    model = model.to(device)
    model.train()
    return model


def _restore(ckpt: Path, model: Transformer, optimizer: torch.optim.Optimizer, loader: Loader) -> None:
    """θ, the optimizer state and the RNG of `ckpt`, verified first; refused if its data cursor was for other data."""
    verify_checkpoint(ckpt)
    load_checkpoint(ckpt, model, optimizer, restore_rng=True, verify=False)
    saved = (read_state(ckpt).get("data_cursor") or {}).get("fingerprint")
    if saved is not None:
        loader.check_fingerprint(saved, str(ckpt))


def _guard_at(tc: TrainConfig, ckpt: Path | None) -> StabilityGuard:
    """The stability guard as it stood at `ckpt`: the trainer's skip decisions are replayed, not assumed."""
    guard = StabilityGuard(tc.guard, judge_after=tc.warmup_steps)
    if ckpt is not None:
        guard.load_state_dict(read_state(ckpt).get("guard") or {})
    return guard


def _scaler_at(tc: TrainConfig, dtype: torch.dtype, device: torch.device, ckpt: Path | None) -> LossScaler | None:
    """An fp16 run's loss scaler as it stood at `ckpt` (the rolled-forward steps scale as the run did)."""
    scaler = build_scaler(dtype, tc.loss_scale, device)
    if scaler is not None and ckpt is not None:
        scaler.load_state_dict(read_state(ckpt).get("loss_scale"))
    return scaler


def _logged(run: RunDir, start: int, step: int) -> tuple[dict[int, float], float | None]:
    """The logged schedule step of each step after `start` up to `step`, and the logged loss of `step`.
    A time-budgeted run read its LR schedule at a logged, clock-dependent step (train/time_budget.py);
    one streamed pass keeps only the steps rolled forward here and the replayed step's loss."""
    schedule: dict[int, float] = {}
    logged_loss = None
    for e in read_events(run.sub("events.jsonl")):
        if e.get("kind") != "train_step" or not start < e.get("step", 0) <= step:
            continue
        if "schedule_step" in e:
            schedule[e["step"]] = e["schedule_step"]
        if e["step"] == step:
            logged_loss = e["loss"]  # the last logged: a step run again after a resume logs the same loss
    return schedule, logged_loss


def _replay_loss(run: RunDir, step: int) -> dict[str, Any]:
    cfg, tc = run.config, resolve_budget(run.config.train)
    if not 1 <= step <= tc.max_steps:
        raise TrainError(f"--step {step}: steps of this run are 1..{tc.max_steps}")
    # the periodic checkpoints, and the states kept before severe spikes (checkpoints/spikes/)
    found = list_checkpoints(run.sub("checkpoints")) + list_checkpoints(run.sub("checkpoints") / "spikes")
    ckpts = sorted((s, p) for s, p in found if s <= step - 1)
    store = TokenStore(run.sub("tokens"))
    device = resolve_device(tc.device)
    dtype = resolve_dtype(device, tc.dtype)
    start, ckpt = ckpts[-1] if ckpts else (0, None)
    base = resolve_model_config(cfg.model, store, tc.seq_len)
    model = _initial_model(cfg, tc, base, ckpt, device)
    optimizer = build_optimizer(model, tc, device)
    loader = _loader(run, store)
    phase_models = phase_model_configs(base, [(p.seq_len, p.rope) for p in loader.phases])  # RoPE per phase
    if ckpt is not None:
        _restore(ckpt, model, optimizer, loader)
    anneal = next((p.start_step for p in loader.phases if p.anneal), None)
    guard, scaler = _guard_at(tc, ckpt), _scaler_at(tc, dtype, device, ckpt)
    draws = {0: loader}

    def data_of(s: int) -> Loader:  # after a rewinding rollback: the draw of the data step s trained on
        k = guard.draw(s)
        if k not in draws:
            draws[k] = Loader(
                store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, draw_seed(cfg.train_seed, k)
            )
        return draws[k]

    phase = loader.phase_at(max(start, 1)).name
    model.set_rope(phase_models[loader.phase_at(max(start, 1)).index])
    schedule, logged_loss = _logged(run, start, step)
    for s in range(start + 1, step):  # roll θ forward to step-1 with the trainer's own update
        if loader.phase_at(s).name != phase:
            phase = loader.phase_at(s).name
            guard.reset_baseline()
            model.set_rope(phase_models[loader.phase_at(s).index])
        _, loss, grad_norm, _ = compute_update(
            model,
            optimizer,
            data_of(s),
            s,
            tc,
            device,
            dtype,
            anneal,
            lr_scale=guard.lr_scale,
            schedule_step=schedule.get(s),
            fault_step=guard.attempt(s),
            scaler=scaler,
        )
        action = guard.check(s, loss, grad_norm, after_step(scaler, loss, grad_norm)).action
        if action == "rollback":
            raise TrainError(
                f"the stability guard rolled back at step {s}, between the checkpoint of step "
                f"{start} and step {step}; replay a step after {s}"
            )
        if action == "apply":
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.set_rope(phase_models[loader.phase_at(step).index])
    with torch.no_grad():
        data = data_of(step)
        loss, r_pad = step_loss(
            model, data, step, tc.grad_accum, device, dtype, backward=False, tc=tc, seed=data.seed, fault_step=guard.attempt(step)
        )
    return {
        "step": step,
        "from_checkpoint": str(ckpt) if ckpt else None,
        "rolled_forward_steps": step - 1 - start,
        "init_from": tc.init_from if ckpt is None else None,
        "loss": loss,
        "logged_loss": logged_loss,
        "r_pad": r_pad,
        "matches_log": None if logged_loss is None else loss == logged_loss,
    }
