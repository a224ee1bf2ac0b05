"""Pipeline parallelism with torch.distributed.pipelining: the blocks cut into pp equal stages, the
step's micro-batches (train.grad_accum of them) run through a 1F1B or GPipe schedule.

Every rank builds the whole model with the run's seed (so stage s holds exactly the weights
blocks [s·L/pp, (s+1)·L/pp) have in one process), then `prune_to_stage` drops what its stage does
not run: the embedding on all but the first stage, the final norm and the head on all but the
last. The blocks stay under `layers.<i>` with their original indices, so parameter names, and
with them checkpoints (DCP, keyed by name), are those of the unsplit model: a checkpoint saved
at pp=2 resumes in one process or at tp=2, and the other way round.

The stage's forward is the model's own pieces (`embed`, `block_inputs`, `run_block`, `output`)
under autocast; positions, document segments and targets reach every stage as keyword inputs
split into micro-batches with the tokens, and the last stage returns the fused per-token NLL, so
the logits never exist. The loss of a micro-batch is its NLL sum / the global batch's target
count, the trainer's loss, with the schedule's own gradient scaling off.

Tied embeddings: the first stage's embedding and the last stage's head are one tensor in one
process. Here each of the two stages holds a copy (same name, `embed_tokens.weight`), their
gradients are summed between the two before clipping, and the two copies, starting equal and
taking the same update, stay equal. Clipping sums the squared norms over the stages (the tied
copy counted once).

Data parallelism around the pipeline: under ZeRO 0/1 each stage is replicated over the dp ranks
that hold it (every replica reads its own share of the step's batch) and its gradients are summed
over them after the schedule, before clipping, in one flat all-reduce (ZeRO-1 then shards only the
optimizer state, train/zero.py). Under ZeRO 2/3 the stage is FSDP2-sharded over those ranks
(`shard_over_dp`): the reduce-scatter happens in the last micro-batch's backward.

Bubble: with p stages and m micro-batches a stage idles (p-1)/(m+p-1) of the step in both
schedules (1F1B only keeps fewer micro-batches' activations alive: at most p instead of m), when
every stage takes the same time and transfers are free. What each stage really idled is measured:
its forwards and its backwards (from the gradient reaching the stage's output to it reaching its
input, two identity autograd nodes noting the time) against the schedule step's wall-clock; every
`train_step` event carries `pipeline_idle`, one share per stage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tokenmill.mixture.loader import Loader
from tokenmill.model.transformer import Transformer, held
from tokenmill.model.objectives import IGNORE, _batch_field, _shift
from tokenmill.scaling.parallel import bubble_fraction
from tokenmill.train.device import autocast


def stage_layers(n_layers: int, pp: int, stage: int) -> range:
    """Indices of the blocks stage `stage` of `pp` runs (equal stages; the layout check makes pp | L)."""
    per = n_layers // pp
    return range(stage * per, (stage + 1) * per)


def prune_to_stage(model: Transformer, pp: int, stage: int) -> Transformer:
    """Drop from `model` (in place) every part stage `stage` does not run; returns it."""
    blocks = model.layers
    if not isinstance(blocks, nn.ModuleList):
        raise ValueError("prune_to_stage takes a whole model; this one is already a pipeline stage")
    keep = stage_layers(len(blocks), pp, stage)
    model.layers = nn.ModuleDict({str(i): blocks[i] for i in keep})
    first, last = stage == 0, stage == pp - 1
    tied = bool(model.config.tie_embeddings)
    if not first:
        model.embed_positions = None
        if not (last and tied):  # the last stage keeps the tied table: it is its head
            model.embed_tokens = None
    if not last:
        model.norm = None
        model.lm_head = None
    return model


class _Clock(torch.autograd.Function):
    """Identity that notes the time its gradient passes (the ends of a stage's backward)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, times: list[float]) -> torch.Tensor:
        ctx.times = times
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.times.append(time.perf_counter())
        return grad, None


@dataclass
class BusyClock:
    """Seconds this stage computed (forwards, and backwards from the gradient reaching its output
    to it reaching its input) during one schedule step: the rest of the step is bubble + transfers."""

    forward: float = 0.0
    starts: list[float] = field(default_factory=list)  # gradient reached the stage's output
    ends: list[float] = field(default_factory=list)  # ... and its input

    @property
    def busy(self) -> float:
        return self.forward + sum(e - s for s, e in zip(self.starts, self.ends))

    def reset(self) -> None:
        self.forward, self.starts, self.ends = 0.0, [], []


class StageForward(nn.Module):
    """What a PipelineStage runs: this stage's part of the model, under autocast, timed."""

    def __init__(self, model: Transformer, first: bool, last: bool, device: torch.device, dtype: torch.dtype, clock: BusyClock):
        super().__init__()
        self.model, self.first, self.last = model, first, last
        self.device, self.dtype, self.clock = device, dtype, clock

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        targets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        m = self.model
        t0 = time.perf_counter()
        with autocast(self.device, self.dtype):
            if self.first:
                x = m.embed(x, positions)
            x = _Clock.apply(x, self.clock.ends)
            # Each stage builds its micro-batch's mask once, on its own device, for all its
            # blocks (checkpointing recomputes from it; the backward never rebuilds it): the
            # schedule splits keyword inputs by rows, which a BlockMask cannot be, so the
            # trainer's prebuilt mask (train/staging.py) does not travel here.
            cos, sin, mask = m.block_inputs(x.shape[1], x.device, positions, segments)
            for layer in m.blocks():
                x = m.run_block(layer, x, cos, sin, mask)
            if self.last:
                x = m.output(x, targets)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.clock.forward += time.perf_counter() - t0
        return _Clock.apply(x, self.clock.starts)


@dataclass
class Pipeline:
    """This rank's stage of the job's pipeline and the schedules that drive it."""

    model: Transformer  # the pruned model (what the optimizer and checkpoints see)
    stage: int
    n_stages: int
    group: Any  # the pp process group of this rank
    schedule_kind: str
    device: torch.device
    dtype: torch.dtype
    tie_group: Any = None  # first + last stage of this rank's (dp, tp) column, when embeddings are tied
    dp_group: Any = None  # this stage's data-parallel replicas (dp > 1)
    n_targets: int = 1
    clock: BusyClock = field(default_factory=BusyClock)
    idle: float = 0.0  # share of the last step this stage did not compute (bubble + transfers)
    sharded: bool = False  # the stage is FSDP2-sharded over dp (zero 2/3): FSDP reduces its gradients
    _schedules: dict[tuple[int, ...], Any] = field(default_factory=dict)
    _forward: StageForward | None = None

    @property
    def stage_module(self) -> StageForward:
        """The one module every schedule runs (FSDP2's root when the stage is sharded over dp)."""
        if self._forward is None:
            self._forward = StageForward(self.model, self.first, self.last, self.device, self.dtype, self.clock)
        return self._forward

    def shard_over_dp(self, mesh: Any, zero: int) -> None:
        """FSDP2 inside the stage over its dp ranks (`mesh`: the dp axis): every block, then the stage's
        forward as the root (its embedding and head are used there, not in the model's forward), so
        torch's PipelineStage sees an FSDP module and reduces gradients at the last micro-batch only."""
        from tokenmill.train.distributed import fully_shard_blocks

        fully_shard_blocks(self.model, mesh, reshard=zero >= 3, root=self.stage_module)
        self.sharded, self.dp_group = True, None

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.n_stages - 1

    def bubble(self, micro_batches: int) -> float:
        return bubble_fraction(self.n_stages, micro_batches)

    def _loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return output.sum() / self.n_targets

    def schedule(self, micro_batches: int, shape: tuple[int, ...]) -> Any:
        """The schedule for `micro_batches` micro-batches of token shape `shape` (one per shape:
        a stage's receive buffers are sized at its first step)."""
        key = (micro_batches, *shape)
        if key not in self._schedules:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

            stage = PipelineStage(
                self.stage_module,
                self.stage,
                self.n_stages,
                self.device,
                group=self.group,
            )
            cls = Schedule1F1B if self.schedule_kind == "1f1b" else ScheduleGPipe
            self._schedules[key] = cls(stage, micro_batches, loss_fn=self._loss, scale_grads=False)
        return self._schedules[key]

    def step_loss(self, loader: Loader, step: int, grad_accum: int) -> tuple[float, float, float]:
        """Forward + backward of this rank's share of step `step` through the pipeline; returns
        (loss on the last stage, 0 elsewhere; mean r_pad; seconds waiting for data)."""
        t0 = time.perf_counter()
        batches = [loader.batch(step, micro) for micro in range(grad_accum)]
        data_wait = time.perf_counter() - t0
        r_pad = sum(b.r_pad for b in batches) / grad_accum
        self.n_targets = max(loader.n_targets(step), 1)
        inputs, kwargs = _stack(batches, self.device)
        losses: list[torch.Tensor] = []
        schedule = self.schedule(grad_accum, tuple(inputs.shape[1:]) + (inputs.shape[0] // grad_accum,))
        target = kwargs["targets"] if self.last else None
        self.clock.reset()
        # one window for every stage, start and end aligned: the first stage's wait for the last
        # backwards and the last stage's wait for the first forwards both count as idle
        dist.barrier(group=self.group)
        t1 = time.perf_counter()
        if self.first:
            schedule.step(inputs, target=target, losses=losses, **kwargs)
        else:
            schedule.step(target=target, losses=losses, **kwargs)
        dist.barrier(group=self.group)
        span = time.perf_counter() - t1
        self.idle = max(0.0, 1.0 - self.clock.busy / span) if span > 0 else 0.0
        loss = float(torch.stack([x.detach().float() for x in losses]).sum()) if self.last else 0.0
        return loss, r_pad, data_wait

    def idle_by_stage(self) -> list[float]:
        """Every stage's idle share of the last step (a collective over the pipeline group)."""
        shares: list[Any] = [None] * self.n_stages
        dist.all_gather_object(shares, round(self.idle, 4), group=self.group)
        return shares

    def sync_tied_grads(self) -> None:
        """Σ the gradients of the tied embedding/head copies of the first and last stage."""
        if self.tie_group is None or not (self.first or self.last):
            return
        w = held(self.model.embed_tokens, "embed_tokens").weight
        grad = w.grad if w.grad is not None else torch.zeros_like(w)
        # FSDP inside the stages: both copies are the same dp shard of the table (same dp index)
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        dist.all_reduce(local, op=dist.ReduceOp.SUM, group=self.tie_group)
        w.grad = grad

    def reduce_over_dp(self) -> None:
        """Σ every gradient over the stage's data-parallel replicas (one flat all-reduce: DDP's
        arithmetic without its overlap), so every replica applies the update of the global batch."""
        if self.dp_group is None:
            return
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        grads = [
            (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad) for p in self.model.parameters() if p.grad is not None
        ]
        if not grads:
            return
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.dp_group)
        for g, reduced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(reduced)

    def tied_duplicate(self) -> set[int]:
        """ids of the parameters whose norm another stage already counts (the last stage's tied copy)."""
        if self.tie_group is not None and self.last and not self.first:
            return {id(held(self.model.embed_tokens, "embed_tokens").weight)}
        return set()


def _stack(batches: list[Any], device: torch.device) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The step's micro-batches as one batch (rows in micro-batch order, so the schedule's split
    gives back the same micro-batches): token inputs, and positions/segments/targets keywords."""
    inputs, kwargs_list = [], []
    for batch in batches:
        x, targets = _shift(batch.tokens)
        kw = {name: value for name in ("positions", "segments") if (value := _batch_field(batch, name, x.shape)) is not None}
        loss_mask = _batch_field(batch, "loss_mask", targets.shape)
        if loss_mask is not None:
            targets = targets.masked_fill(~loss_mask, IGNORE)
        kw["targets"] = targets
        inputs.append(x)
        kwargs_list.append(kw)
    kwargs = {k: torch.cat([kw[k] for kw in kwargs_list]).to(device) for k in kwargs_list[0]}
    return torch.cat(inputs).to(device), kwargs


def build_pipeline(
    model: Transformer, mesh: Any, sizes: Any, rank: int, schedule: str, device: torch.device, dtype: torch.dtype
) -> Pipeline:
    """Prune `model` to this rank's stage and set up its groups (every rank calls it: making the
    tied-embedding groups is a collective)."""
    stage = sizes.coords(rank)[0]
    prune_to_stage(model, sizes.pp, stage)
    tie_group = None
    if model.config.tie_embeddings:
        # one group per (dp, tp) column: its first and last stage; every rank creates all of them
        for d in range(sizes.dp):
            for t in range(sizes.tp):
                ranks = [d * sizes.tp + t, (sizes.pp - 1) * sizes.dp * sizes.tp + d * sizes.tp + t]
                group = dist.new_group(ranks)
                if rank in ranks:
                    tie_group = group
    return Pipeline(
        model=model,
        stage=stage,
        n_stages=sizes.pp,
        group=mesh["pp"].get_group(),
        schedule_kind=schedule,
        device=device,
        dtype=dtype,
        tie_group=tie_group,
        dp_group=mesh["dp"].get_group() if sizes.dp > 1 else None,
    )
