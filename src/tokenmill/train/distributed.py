"""Data parallelism under torchrun: DDP or FSDP2 (`fully_shard`), gloo on CPU, NCCL on CUDA.

    torchrun --nproc-per-node K -m tokenmill train CONFIG

Every rank runs the same trainer; the Loader gives rank r its contiguous slice of the step's
global batch, so the data of a step does not depend on the world size (with
train.global_batch_tokens set, grad_accum = global / (micro · seq · K) keeps the global batch fixed).

Gradient scale. The trainer's loss on a rank is Σ NLL over *this rank's* targets divided by the
number of targets of the *global* batch (`Loader.n_targets(step)`), so the gradient of the global
loss is the SUM of the ranks' gradients, not their mean. DDP and FSDP average by default (they
assume each rank's loss is already a mean over its own share), which would shrink the update by
K and make the run depend on the world size. So DDP gets a communication hook that all-reduces
with SUM and divides by nothing, and FSDP2 gets gradient_divide_factor 1 with sum-only
collectives. Summing also keeps the arithmetic of one process: a single process accumulating
micro-batches g1 + g2 and two ranks reducing g1 + g2 add the same two fp32 tensors.
Gradients are reduced in fp32 (parameters are fp32 master weights; bf16 is only autocast's).

Only rank 0 writes events, progress, evaluations and the checkpoint metadata; every rank takes
part in the collectives (checkpoint save/load, metrics that gather DTensor shards, the checks).

Silent data corruption (Dixit et al. 2021, "Silent Data Corruptions at Scale"): every train.checksum_every steps `check_replicas` compares,
across ranks, a checksum of what must be identical on every rank — under DDP every gradient
(after the reduction) and every parameter, bit for bit; under FSDP, whose parameters and
gradients are sharded (nothing to compare a shard with), the replicated scalars each rank
computed for itself: the all-reduced loss, the global gradient norm and the learning rate.
A disagreement raises `RankMismatch` on every rank, naming the step and the ranks that differ.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, Sequence, cast

import torch
import torch.distributed as dist
import xxhash
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from tokenmill.errors import UserError
from tokenmill.train.layout import LayoutSizes, resolve_sizes, zero_stage

Mode = Literal["single", "ddp", "fsdp"]
# A collective waits this long for the other ranks (rank 0 evaluating while the others wait at a
# barrier counts): long enough for an in-training evaluation, short enough that a dead peer
# ends the job within the hour rather than never.
TIMEOUT = timedelta(minutes=60)


class DistributedError(UserError, RuntimeError):
    """The torchrun environment or the distributed setup cannot work; the message says why."""


class RankMismatch(DistributedError):
    """Ranks hold different values for state that must be identical (silent data corruption)."""

    def __init__(self, step: int, ranks: Sequence[int], what: str):
        self.step, self.ranks, self.what = step, list(ranks), what
        super().__init__(
            f"cross-rank check at step {step}: rank(s) {', '.join(map(str, self.ranks))} disagree with "
            f"rank 0 on {what}. A device or link is corrupting data silently; training stopped. Check the "
            f"hardware of those ranks, then resume from the last checkpoint (`tokenmill train CONFIG --resume`)"
        )


@dataclass
class DistContext:
    """Who this process is in the job. `mode` is "single" when no process group is in use."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    mode: Mode = "single"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False
    sizes: LayoutSizes | None = None  # dp × tp × pp; None: pure data parallelism over the world
    mesh: Any = None  # DeviceMesh ("pp", "dp", "tp") when tp or pp > 1
    cp_group: Any = None  # the context-parallel peers of this rank (cp > 1): they read the same rows
    zero: int = 0  # ZeRO stage over the dp axis (layout.zero_stage): 1 optimizer state, 2 + gradients, 3 + parameters

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def model_parallel(self) -> bool:
        return self.sizes is not None and self.sizes.model_parallel

    @property
    def cp_size(self) -> int:
        return self.sizes.cp if self.sizes is not None else 1

    @property
    def dp_size(self) -> int:
        """Ranks that read different data (the loader's world): tp, pp and cp ranks share a batch."""
        return self.sizes.dp if self.model_parallel or self.cp_size > 1 else self.world_size  # type: ignore[union-attr]

    @property
    def dp_rank(self) -> int:
        if self.cp_size > 1:  # rank = dp index · cp + cp index (the (dp, cp) mesh)
            return self.rank // self.cp_size
        return self.sizes.coords(self.rank)[1] if self.model_parallel else self.rank  # type: ignore[union-attr]

    @property
    def dp_group(self) -> Any:
        """Process group of this rank's data-parallel peers (None: the default group, all ranks)."""
        return self.mesh["dp"].get_group() if self.model_parallel else None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """`obj` of rank `src` on every rank (a picklable python object; rank 0 decides, all follow)."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def any(self, flag: bool) -> bool:
        """True on every rank when `flag` is true on any rank (e.g. a Ctrl-C seen by one rank)."""
        if not self.distributed:
            return bool(flag)
        t = torch.tensor([1.0 if flag else 0.0], device=_comm_device(self))
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def close(self, synchronize: bool = False) -> None:
        """Destroy the process group this context created (a borrowed one is left alone).

        synchronize=True (every rank is closing at the same point: the run finished, or all ranks
        raised the same error) first waits for every rank: a rank that tears its group down while a
        peer's last collective is still in flight makes gloo abort the process at exit (seen with
        FSDP2's final reduce-scatter on CPU). Never after an error on one rank alone: the others are
        blocked in some other collective, and a barrier would hang instead of letting torchrun end
        the job."""
        if self.owns_group and dist.is_initialized():
            if synchronize:
                dist.barrier()
            gc.collect()  # free finished collectives' work objects while their group still exists
            dist.destroy_process_group()
        self.owns_group = False


def env_world() -> tuple[int, int, int]:
    """(world_size, rank, local_rank) from torchrun's environment; (1, 0, 0) outside torchrun."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise DistributedError(f"WORLD_SIZE/RANK/LOCAL_RANK must be integers: {exc}") from exc
    return world, rank, local


def is_main_process() -> bool:
    """Rank 0 of a torchrun job, or a process outside torchrun (before any group exists)."""
    return env_world()[1] == 0


def check_torchrun_stage(run: Any, stage: str) -> None:
    """Under torchrun only `train` runs, and only on finished data stages: every rank raises the
    same clear error otherwise (the data stages are single-machine jobs with their own process
    pools; running them inside a torchrun job would hold every rank idle, or race K copies of
    them on the same files)."""
    steps = (
        "`tokenmill curate CONFIG`, `tokenmill tokenizer train CONFIG` and `tokenmill tokenize "
        "CONFIG` (with the same --set/--run-dir options)"
    )
    if stage != "train":
        raise DistributedError(
            f"`tokenmill {stage}` does not run under torchrun: only `train` is data-parallel. Run the data "
            f"stages in one process first ({steps}), then `torchrun --nproc-per-node K -m tokenmill train CONFIG`, "
            f"then `tokenmill eval CONFIG` / `tokenmill report CONFIG` in one process"
        )
    if not run.is_fresh("tokenize"):
        raise DistributedError(
            f"{run.path / 'tokens'} is missing or stale for this config: the tokenize stage has not finished with "
            f"these curate/tokenizer/tokenize settings. Under torchrun the data stages must be done first: run "
            f"{steps} in one process, then start torchrun again"
        )


def _restart_attempt() -> int:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def _fresh_store(world: int, rank: int) -> Any:
    """The job's store under a prefix of its own for this torchrun restart. torchrun keeps one
    store across restarts, and the ranks of a restarted group find the previous group's gloo/NCCL
    addresses under the same keys: a rank that reads a dead peer's address before the new peer
    overwrote it fails with "connection refused" (pytorch/pytorch#167288, seen here one restart
    in two)."""
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=not agent and rank == 0,
        timeout=TIMEOUT,
        multi_tenant=not agent,
    )
    return dist.PrefixStore(f"tokenmill/attempt{_restart_attempt()}/", store)


def init_distributed(tc: Any) -> DistContext:
    """The process's DistContext: a process group when WORLD_SIZE > 1 (torchrun), else single.

    gloo on CPU, NCCL on CUDA with this rank on cuda:LOCAL_RANK. A process group that already
    exists (a test, or a launcher that made it) is used as it is and not destroyed by close()."""
    world, rank, local = env_world()
    if dist.is_initialized():
        world, rank, owns = dist.get_world_size(), dist.get_rank(), False
    else:
        owns = world > 1
    from tokenmill.train.device import resolve_device

    device = resolve_device(tc.device)
    if world <= 1:
        return DistContext(device=device)
    if device.type not in ("cpu", "cuda"):
        raise DistributedError(f"train.device={tc.device!r}: distributed training runs on CPU (gloo) or CUDA (NCCL)")
    if device.type == "cuda":
        if local >= torch.cuda.device_count():
            raise DistributedError(
                f"LOCAL_RANK {local} but only {torch.cuda.device_count()} CUDA device(s) here; "
                f"use --nproc-per-node <= {torch.cuda.device_count()}"
            )
        device = torch.device("cuda", local)  # one GPU per rank, whatever train.device names
        torch.cuda.set_device(device)
    sizes = resolve_sizes(tc, world)  # before any collective: every rank refuses a wrong layout alike
    if owns:
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
        if _restart_attempt() > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
            # a shared agent store outlives restarts (one node); a multi-node job's agents make a
            # fresh store every round, and their restart counts differ (a node started again is at 0)
            kwargs.update(store=_fresh_store(world, rank), rank=rank, world_size=world)
        dist.init_process_group(backend=backend, timeout=TIMEOUT, **kwargs)
    mesh = None
    if sizes.model_parallel:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (sizes.pp, sizes.dp, sizes.tp), mesh_dim_names=("pp", "dp", "tp"))
    zero = zero_stage(tc, sizes)
    # zero 2/3 is FSDP2 over dp (composed with tp's DTensors, or inside each pipeline stage);
    # zero 0/1 keeps parameters and gradients replicated (DDP, or a stage's flat all-reduce)
    mode: Mode = "single" if sizes.dp == 1 else "fsdp" if zero >= 2 else "ddp"
    cp_group = None
    if sizes.cp > 1:  # gradients are summed over dp × cp = the whole world: DDP / FSDP2 as for data parallelism
        from torch.distributed.device_mesh import init_device_mesh

        mode, zero = tc.distributed, 3 if tc.distributed == "fsdp" else 0
        cp_group = init_device_mesh(device.type, (sizes.dp, sizes.cp), mesh_dim_names=("dp", "cp"))["cp"].get_group()
    return DistContext(
        world_size=world,
        rank=rank,
        local_rank=local,
        mode=mode,
        device=device,
        owns_group=owns,
        sizes=sizes,
        mesh=mesh,
        cp_group=cp_group,
        zero=zero,
    )


def _comm_device(ctx: DistContext) -> torch.device:
    """Where tensors for a collective live: the rank's GPU under NCCL, CPU under gloo."""
    return ctx.device if dist.get_backend() == "nccl" else torch.device("cpu")


def reduce_step_stats(
    loss: float, r_pad: float, extras: dict[str, Any] | None, world_size: int, group: Any = None
) -> tuple[float, float]:
    """The step's loss and r_pad over the global batch from this rank's shares: the loss is Σ
    over the `world_size` data-parallel ranks of `group` (None: all ranks; each rank's share is
    already divided by the global target count), summed in fp32 like one process sums its
    micro-batch losses; r_pad is the mean over them. The regularizer sums in `extras` (z_loss,
    moe_aux) are Σ over them too. One data-parallel rank: unchanged."""
    if world_size <= 1 or not dist.is_initialized():
        return loss, r_pad
    ctx = DistContext(world_size=world_size, rank=dist.get_rank(), device=_default_comm_device())
    keys = [k for k in ("z_loss", "moe_aux") if extras is not None and k in extras]
    for k in keys:
        extras[k] = all_reduce_sum(extras[k], ctx, group=group)  # type: ignore[index]
    return all_reduce_sum(loss, ctx, torch.float32, group), all_reduce_sum(r_pad, ctx, group=group) / world_size


def _default_comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(value: float | torch.Tensor, ctx: DistContext, dtype: torch.dtype = torch.float64, group: Any = None) -> float:
    """Σ over the ranks of `group` (None: all) of a number, computed in `dtype`; the value itself
    outside a process group.

    Pass dtype=float32 for a loss that a single process would have summed in fp32: the sum of two
    fp32 micro-batch losses is then the same number on one process and on two ranks."""
    if not ctx.distributed:
        return float(value)
    t = torch.as_tensor(value, dtype=dtype).detach().reshape(1).to(_comm_device(ctx), dtype)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return float(t.item())


# --------------------------------------------------------------------------- wrapping
class DataParallel(DistributedDataParallel):
    """DDP whose attribute lookups fall through to the wrapped model (`config`, `z_loss`,
    `aux_loss`...), so code written for the bare Transformer also runs on the wrapper."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            return getattr(self.module, name)


def _sum_allreduce_hook(state, bucket):
    """DDP communication hook: Σ over ranks, no division (see the module docstring).

    (Unannotated: DDP checks the annotation object itself, which postponed annotations make a string.)"""
    fut = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def wrap_model(model: nn.Module, ctx: DistContext, tc: Any = None) -> nn.Module:
    """The module the training step runs: `model` itself (single), a DataParallel wrapper (DDP),
    or `model` sharded in place with fully_shard on every block, then the root (FSDP2).

    Build the optimizer on `unwrap(result)` *after* this call (FSDP replaces the parameters with
    DTensor shards). Master weights and gradient reduction stay fp32; bf16 is the trainer's
    autocast around the forward.

    Tensor parallelism (tp > 1) shards the blocks over the mesh's "tp" axis first, then FSDP2
    shards over its "dp" axis when dp > 1 (2-D parameters: Shard over dp of a Shard over tp). A
    pipeline stage is left replicated over dp (its gradients are summed over the dp group after
    the schedule, `Pipeline.reduce_over_dp`) under zero 0/1; under zero 2/3 the trainer shards the
    stage over dp (`Pipeline.shard_over_dp`). zero 2 keeps the gathered parameters from the forward
    to the backward (reshard_after_forward=False): one all-gather per step instead of two."""
    if ctx.model_parallel:
        return _wrap_model_parallel(model, ctx, tc)
    if ctx.cp_group is not None:
        from tokenmill.model.transformer import Transformer
        from tokenmill.train.context_parallel import attach

        if not isinstance(model, Transformer):
            raise DistributedError(f"train.parallel.cp needs tokenmill's Transformer, got {type(model).__name__}")
        attach(model, ctx.cp_group)
    if ctx.mode == "single" or not ctx.distributed:
        return model
    if ctx.mode == "ddp":
        moe = int(getattr(getattr(model, "config", None), "n_experts", 0) or 0) > 0
        ddp = DataParallel(
            model,
            device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            forward_sync_buffers=False,  # the only buffers are constant RoPE tables
            find_unused_parameters=moe,
        )  # an expert may see no token in a micro-batch
        ddp.register_comm_hook(None, _sum_allreduce_hook)
        return ddp
    if ctx.mode == "fsdp":
        return fully_shard_blocks(model, reshard=ctx.zero != 2)
    raise DistributedError(f"train.distributed={ctx.mode!r}: expected 'ddp' or 'fsdp'")


def _wrap_model_parallel(model: nn.Module, ctx: DistContext, tc: Any = None) -> nn.Module:
    assert ctx.sizes is not None and ctx.mesh is not None
    if ctx.sizes.tp > 1:
        from tokenmill.train.tensor_parallel import apply_tensor_parallel

        sequence_parallel = bool(getattr(getattr(tc, "parallel", None), "sequence_parallel", False))
        apply_tensor_parallel(model, ctx.mesh["tp"], sequence_parallel)
    if ctx.sizes.dp > 1 and ctx.sizes.pp == 1:
        fully_shard_blocks(model, ctx.mesh["dp"], reshard=ctx.zero != 2)
    return model


def fully_shard_blocks(model: nn.Module, mesh: Any = None, reshard: bool = True, root: nn.Module | None = None) -> nn.Module:
    """FSDP2 on every block of `model`, then on `root` (default: the model itself), over `mesh`
    (None: the whole world), with Σ-reduction. reshard=False (ZeRO-2) keeps each block's gathered
    parameters from its forward until its backward. `root` is a pipeline stage's wrapper, whose
    forward (not the model's) runs the embedding and head."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=None, reduce_dtype=torch.float32)
    blocks = getattr(model, "layers", None)
    if blocks is None:
        raise DistributedError(f"FSDP needs a model with a `layers` list of blocks, got {type(model).__name__}")
    for block in blocks.values() if isinstance(blocks, nn.ModuleDict) else blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    root = model if root is None else root
    fully_shard(root, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    model = root
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)  # Σ over ranks, see the module docstring
            m.set_force_sum_reduction_for_comms(True)  # plain SUM collectives (gloo has no PREMUL_SUM)
    return model


def is_sharded(model: nn.Module) -> bool:
    """Whether any parameter is a DTensor (FSDP2, tensor parallel): its state needs DCP."""
    return is_fsdp(model) or any(hasattr(p, "full_tensor") for p in unwrap(model).parameters())


def unwrap(model: nn.Module) -> nn.Module:
    """The model under a DDP or torch.compile wrapper (an FSDP2 model is its own module)."""
    while True:
        inner = model.__dict__.get("_orig_mod") or (model.module if isinstance(model, DistributedDataParallel) else None)
        if inner is None:
            return model
        model = inner


def is_fsdp(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(unwrap(model), FSDPModule)


def set_grad_sync(model: nn.Module, enabled: bool) -> None:
    """Whether the next forward + backward reduces gradients across ranks. Called before every
    micro-batch with enabled = (last micro-batch of the step): an accumulated step is reduced
    once, not once per micro-batch (DDP's `no_sync`, FSDP2's `set_requires_gradient_sync`).
    A no-op for a single process."""
    m = model
    while True:
        if isinstance(m, DistributedDataParallel):
            m.require_backward_grad_sync = enabled  # what DDP.no_sync() toggles
            return
        inner = m.__dict__.get("_orig_mod")  # torch.compile's wrapper
        if inner is None:
            break
        m = inner
    if is_fsdp(m):
        m.set_requires_gradient_sync(enabled)  # type: ignore[operator]


def evaluation_model(model: nn.Module, ctx: DistContext) -> nn.Module | None:
    """A plain (unwrapped, unsharded) model to evaluate on rank 0; None on the other ranks.

    Under FSDP the full parameters are gathered into a fresh copy on rank 0 (every rank must call
    this: it is a collective), so the evaluator runs a normal forward alone while the others wait."""
    inner = unwrap(model)
    if ctx.sizes is not None and ctx.sizes.pp > 1:
        return _gather_pipeline_model(inner, ctx)
    if not is_sharded(inner):
        return inner if ctx.is_main else None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(inner, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not ctx.is_main:
        return None
    copy = _plain_copy(inner)
    copy.load_state_dict(full)
    return copy.to(ctx.device)


def _gather_pipeline_model(model: nn.Module, ctx: DistContext) -> nn.Module | None:
    """The whole model on rank 0 from every stage's part (tp shards gathered first)."""
    local = {name: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu() for name, t in model.state_dict().items()}
    parts: list[Any] = [None] * ctx.world_size if ctx.is_main else []
    dist.gather_object(local, parts if ctx.is_main else None, dst=0)
    if not ctx.is_main:
        return None
    full: dict[str, torch.Tensor] = {}
    for part in parts:
        for name, t in part.items():
            full.setdefault(name, t)
    copy = _plain_copy(model)
    copy.load_state_dict(full)
    return copy.to(ctx.device)


def _plain_copy(model: nn.Module) -> nn.Module:
    """A fresh, unsharded instance of the model's own class (the class FSDP2 subclassed)."""
    from torch.distributed.fsdp import FSDPModule

    # the MRO holds plain `type`s; the first one below FSDP2's subclass is the model's nn.Module class
    cls = cast("type[nn.Module]", next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule)))
    return cls(model.config, generator=torch.Generator().manual_seed(0))  # init is overwritten; global RNG untouched


# --------------------------------------------------------------------------- cross-rank checks
def _tensor_checksum(tensors: Sequence[torch.Tensor]) -> tuple[float, float, str]:
    """(float64 Σ, float64 Σ², xxh64 of the bytes): the sums locate a gross difference, the
    hash catches a single flipped bit."""
    total = torch.zeros((), dtype=torch.float64)
    sq = torch.zeros((), dtype=torch.float64)
    h = xxhash.xxh64()
    for t in tensors:
        local = t.detach()
        local = local.to_local() if hasattr(local, "to_local") else local
        local = local.to("cpu").contiguous()
        total += local.double().sum()
        sq += local.double().pow(2).sum()
        h.update(local.view(torch.uint8).numpy().tobytes() if local.numel() else b"")
    return float(total), float(sq), h.hexdigest()


def replica_payload(model: nn.Module, ctx: DistContext, scalars: dict[str, float]) -> dict[str, Any]:
    """What this rank believes every rank holds: scalars always; under DDP (and one process)
    also checksums of all gradients and all parameters, which DDP keeps identical."""
    payload: dict[str, Any] = {k: float(v) for k, v in sorted(scalars.items())}
    if not is_sharded(model) and not ctx.model_parallel:  # pipeline stages hold different layers
        params = [p for p in unwrap(model).parameters()]
        payload["grads"] = _tensor_checksum([p.grad for p in params if p.grad is not None])
        payload["params"] = _tensor_checksum(params)
    return payload


def _differs(a: Any, b: Any) -> bool:
    """Bitwise inequality of payload values (NaN equals NaN here: both ranks saw the same NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return a != b and not (a != a and b != b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    return a != b


def compare_payloads(step: int, payloads: Sequence[dict[str, Any]]) -> None:
    """Raise RankMismatch naming the ranks whose payload differs from rank 0's and on what."""
    ref = payloads[0]
    bad, what = [], set()
    for rank, p in enumerate(payloads[1:], 1):
        keys = [k for k in sorted(set(ref) | set(p)) if _differs(ref.get(k), p.get(k))]
        if keys:
            bad.append(rank)
            what.update(keys)
    if bad:
        raise RankMismatch(step, bad, ", ".join(sorted(what)))


def check_replicas(step: int, model: nn.Module, ctx: DistContext, **scalars: float) -> dict[str, Any]:
    """Gather every rank's `replica_payload` and compare (a collective: call it on every rank,
    after the gradient reduction and before the optimizer step). Returns rank 0's payload."""
    payload = replica_payload(model, ctx, scalars)
    if not ctx.distributed:
        return payload
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, payload)
    compare_payloads(step, gathered)
    return gathered[0]


def cross_rank_check(step: int, model: nn.Module, ctx: DistContext, events: Any, **scalars: float) -> None:
    """`check_replicas`, with a `rank_mismatch` event (rank 0's log) before RankMismatch halts the run."""
    try:
        check_replicas(step, model, ctx, **scalars)
    except RankMismatch as exc:
        events.write("train", "rank_mismatch", step=step, ranks=exc.ranks, what=exc.what, message=str(exc))
        raise


class NullEvents:
    """The event log of a rank that is not rank 0: accepts writes, records nothing."""

    def write(self, stage: str, kind: str, **fields: Any) -> dict[str, Any]:
        return {"stage": stage, "kind": kind, **fields}

    def read(self) -> list[dict[str, Any]]:
        return []


def event_log(events: Any, ctx: DistContext) -> Any:
    """`events` on rank 0, a NullEvents elsewhere: one timeline per job, not one per rank."""
    return events if ctx.is_main else NullEvents()
