"""The parallel layout of a torchrun job: world size = dp · tp · pp, and what each axis needs.

Checked twice, both times before any collective: against the model when the config loads (a
layout that cannot split this model is a config error on every rank, and `tokenmill train
--nproc K` refuses it before it starts torchrun), and against the world size when the process
group is made. Mesh order is (pp, dp, tp), tp innermost: the ranks of one tensor-parallel group
are neighbours (on GPUs: the same node, on NVLink), as Megatron and torchtitan order them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tokenmill.errors import UserError


class LayoutError(UserError, ValueError):
    """The requested dp × tp × pp layout cannot run this model or this world size."""


@dataclass(frozen=True)
class LayoutSizes:
    """The resolved sizes of the three axes; dp · tp · pp = world size."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1  # context parallelism: each row split over cp ranks (train/context_parallel.py)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def model_parallel(self) -> bool:
        return self.tp > 1 or self.pp > 1

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp, dp, tp) index of `rank` in the row-major (pp, dp, tp) mesh."""
        return rank // (self.dp * self.tp), (rank // self.tp) % self.dp, rank % self.tp

    def describe(self) -> str:
        return f"dp={self.dp} × tp={self.tp} × pp={self.pp}" + (f" × cp={self.cp}" if self.cp > 1 else "")


def layout_problems(model: Any, train: Any, phase_lengths: Sequence[int] = ()) -> list[str]:
    """Why `train.parallel` cannot split `model` (empty: it can). World size is not known here.
    `phase_lengths`: the curriculum phases' own seq_len values (mixture.phases[].seq_len)."""
    par = train.parallel
    out: list[str] = []
    if par.tp > 1:
        # imported here, only when needed: it imports torch (~1 s), which curate/tokenize never load otherwise
        from tokenmill.model.transformer import resolve_ffn_hidden

        kv = model.n_kv_heads or model.n_heads
        for what, n in (
            ("model.n_heads", model.n_heads),
            ("model.n_kv_heads", kv),
            ("the FFN hidden size", resolve_ffn_hidden(model)),
        ):
            if n % par.tp:
                out.append(f"tp={par.tp} does not divide {what} ({n}): each rank must hold whole heads and equal FFN columns")
        if model.n_experts > 0:
            out.append(
                f"tp={par.tp} with model.n_experts={model.n_experts}: mixture-of-experts layers are not tensor-parallel "
                f"here (use data parallelism for MoE models)"
            )
    if par.pp > 1:
        if model.n_layers % par.pp:
            out.append(
                f"pp={par.pp} does not divide model.n_layers ({model.n_layers}): stages are cut at block "
                f"boundaries into equal stages"
            )
        if train.grad_accum < par.pp and train.global_batch_tokens is None:
            out.append(
                f"pp={par.pp} needs at least pp micro-batches per step to fill the pipeline, but "
                f"train.grad_accum={train.grad_accum}: raise train.grad_accum (the micro-batches are pipelined)"
            )
        if train.objective != "clm" or model.z_loss > 0 or model.n_experts > 0:
            out.append(
                "pp > 1 trains the causal-LM objective without z-loss or MoE (those losses are not carried "
                "through the pipeline schedule)"
            )
    if par.dp is not None and par.dp < 1:
        out.append(f"dp={par.dp} must be >= 1")
    out += _cp_problems(model, train)
    odd = [n for n in (train.seq_len, *phase_lengths) if n % par.tp]
    if par.tp > 1 and par.sequence_parallel and odd:
        where = "train.seq_len" if odd[0] == train.seq_len else "a mixture.phases[].seq_len"
        out.append(
            f"train.parallel.sequence_parallel splits each row over tp={par.tp}, but {where}={odd[0]} "
            f"is not a multiple of {par.tp} (set train.parallel.sequence_parallel: false or change seq_len)"
        )
    return out


def _cp_problems(model: Any, train: Any) -> list[str]:
    """Why train.parallel.cp cannot split this run's rows (each phase's seq_len: cp_phase_problems)."""
    cp = train.parallel.cp
    if cp == 1:
        return []
    out: list[str] = []
    if train.parallel.tp > 1 or train.parallel.pp > 1:
        out.append(
            f"cp={cp} with tp={train.parallel.tp}, pp={train.parallel.pp}: context parallelism runs with tp = pp = 1 only (dp × cp)"
        )
    if train.parallel.zero is not None:
        out.append(
            f"cp={cp} with train.parallel.zero={train.parallel.zero}: under cp the gradients are reduced over dp × cp by "
            "train.distributed (ddp or fsdp); ZeRO-1/2 over that group are not implemented"
        )
    if train.seq_len % (2 * cp):
        out.append(
            f"cp={cp} needs train.seq_len ({train.seq_len}) divisible by 2·cp = {2 * cp}: each rank keeps two equal chunks of every row"
        )
    if train.objective != "clm" or model.z_loss > 0 or model.n_experts > 0:
        out.append(f"cp={cp} trains the causal-LM objective without z-loss or MoE (their terms are not split over the row)")
    return out


def cp_phase_problems(train: Any, phases: Any) -> list[str]:
    """Every phase's seq_len (context extension: a 32 k phase) must split into 2·cp equal chunks too."""
    cp = train.parallel.cp
    return [
        f"cp={cp} needs mixture.phases[{i}].seq_len ({p.seq_len}) divisible by 2·cp = {2 * cp}"
        for i, p in enumerate(phases or [])
        if cp > 1 and p.seq_len is not None and p.seq_len % (2 * cp)
    ]


def zero_stage(train: Any, sizes: LayoutSizes) -> int:
    """The ZeRO stage the job runs over its dp axis: train.parallel.zero, else what
    train.distributed meant before zero existed (ddp 0, fsdp 3; tp without pp always FSDP2, 3).
    One data-parallel rank has nothing to shard: 0."""
    if sizes.dp <= 1:
        return 0
    zero = train.parallel.zero
    if zero is None:
        zero = 3 if train.distributed == "fsdp" or (sizes.tp > 1 and sizes.pp == 1) else 0
    return int(zero)


def resolve_sizes(train: Any, world_size: int) -> LayoutSizes:
    """dp, tp, pp for a job of `world_size` ranks; LayoutError when they do not multiply to it."""
    par = train.parallel
    mp = par.tp * par.pp * par.cp
    axes, factors = ("tp · pp · cp", f"{par.tp} · {par.pp} · {par.cp}") if par.cp > 1 else ("tp · pp", f"{par.tp} · {par.pp}")
    if world_size % mp:
        raise LayoutError(
            f"world size {world_size} is not divisible by {axes} = {factors} = {mp}: "
            f"start torchrun with a multiple of {mp} processes"
        )
    dp = par.dp if par.dp is not None else world_size // mp
    if dp * mp != world_size:
        raise LayoutError(
            f"train.parallel dp={dp} × tp={par.tp} × pp={par.pp}{f' × cp={par.cp}' if par.cp > 1 else ''} = {dp * mp} ranks, but the job has "
            f"{world_size}: set train.parallel.dp to {world_size // mp} or leave it unset"
        )
    sizes = LayoutSizes(dp=dp, tp=par.tp, pp=par.pp, cp=par.cp)
    _check_zero(par.zero, sizes)
    return sizes


def _check_zero(zero: int | None, sizes: LayoutSizes) -> None:
    """What train.parallel.zero cannot do with these sizes (one line naming the field)."""
    if zero is None:
        return
    if zero > 0 and sizes.dp == 1:
        raise LayoutError(
            f"train.parallel.zero={zero} needs dp > 1 (it shards over the data-parallel ranks), but {sizes.describe()}"
        )
    if zero <= 1 and sizes.tp > 1 and sizes.pp == 1 and sizes.dp > 1:
        raise LayoutError(
            f"train.parallel.zero={zero} with tp > 1 and pp = 1: the data axis around tensor parallelism is FSDP2 "
            f"here (use zero 2 or 3, or pipeline stages, pp > 1, whose dp replicas take zero 0 or 1)"
        )


def check_launch(model: Any, train: Any, nproc: int) -> LayoutSizes:
    """Everything a launch of `nproc` ranks can be refused for, before any process starts."""
    from tokenmill.train.budget import resolve_budget

    problems = layout_problems(model, train)
    if problems:
        raise LayoutError("train.parallel does not fit this model: " + "; ".join(problems))
    sizes = resolve_sizes(train, nproc)
    accum = resolve_budget(train, world_size=sizes.dp).grad_accum  # the global batch over dp replicas
    if accum < sizes.pp:
        raise LayoutError(
            f"pp={sizes.pp} needs at least {sizes.pp} micro-batches per step on each of the {sizes.dp} "
            f"data-parallel replica(s), but the global batch gives grad_accum={accum}: raise "
            f"train.global_batch_tokens or lower train.micro_batch"
        )
    return sizes
