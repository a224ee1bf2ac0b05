"""The planner's layouts as `tokenmill train` settings, and the trainer's own verdict on each.

`tokenmill plan` (scaling/plan.py) searches TP × PP × DP × ZeRO 0-3 × checkpointing with
sequence parallelism. Every layout it can print must be one `tokenmill train --nproc N` accepts,
so the search asks the trainer's checks themselves about each candidate (TrainConfig's
validators, train/layout.py's layout_problems and check_launch: what `--nproc` runs before
torchrun starts) and drops the refused ones, instead of restating the trainer's rules here where
they would drift apart.

Where the two disagreed, which side moved, and why:
- ZeRO 0/1 with tp > 1 and pp = 1 (dp > 1): the trainer composes tensor parallelism with the
  data axis through FSDP2 only (its parameters are DTensors; DDP and ZeRO-1's whole-tensor
  ownership replicate whole tensors, which a TP shard is not). The planner stops proposing it:
  in its own model ZeRO-2 on the same axes moves the same bytes per step (an all-gather and a
  reduce-scatter, an all-reduce's worth) and holds less, so the search loses no faster layout.
- sequence parallelism when seq_len is not a multiple of tp: the trainer refuses SP there; the
  candidate keeps its tp with SP off (`sequence_parallel: false`), its activations counted
  without SP, rather than the tp being dropped.
- tp not dividing n_kv_heads or the FFN hidden size, tp with MoE, fewer micro-batches than
  stages, an optimizer or dtype a layout cannot run (Muon with ZeRO >= 2, fp16 with pp): the
  trainer's refusal stands (those need model or optimizer changes, not a planner flag), so the
  candidate is not proposed.
- context parallelism: the planner searches no cp axis (the trainer runs cp only as dp × cp, for
  long phases whose rows do not fit one rank); its memory is estimate_rank_memory(cp=...).
"""

from __future__ import annotations

from typing import Any, Sequence

from tokenmill.errors import UserError
from tokenmill.model.config import ModelConfig
from tokenmill.scaling.parallel import Layout


def layout_settings(layout: Layout) -> dict[str, Any]:
    """The train config keys (dotted, as `--set` takes them) that run `layout`."""
    settings: dict[str, Any] = {
        "train.parallel.dp": layout.dp,
        "train.parallel.tp": layout.tp,
        "train.parallel.pp": layout.pp,
        "train.parallel.zero": layout.zero,
    }
    if layout.tp > 1:
        settings["train.parallel.sequence_parallel"] = layout.sequence_parallel
    # the older name of the same choice: set to agree, so a config that says fsdp cannot contradict zero 0/1
    settings["train.distributed"] = "fsdp" if layout.zero >= 2 else "ddp"
    settings.update(
        {
            "train.micro_batch": layout.micro_batch,
            "train.seq_len": layout.seq_len,
            "train.grad_accum": layout.micro_batches,  # per data-parallel replica (pipelined when pp > 1)
            "train.global_batch_tokens": None,  # else it would re-derive grad_accum from the config's own batch
            "train.activation_checkpointing": layout.checkpointing,
        }
    )
    return settings


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def config_lines(layout: Layout) -> list[str]:
    """`train.parallel.zero: 2`-style lines, one per setting."""
    return [f"{k}: {_yaml(v)}" for k, v in layout_settings(layout).items()]


def set_overrides(layout: Layout) -> list[str]:
    """The same settings as `--set key=value` overrides."""
    return [f"{k}={_yaml(v)}" for k, v in layout_settings(layout).items()]


def train_command(layout: Layout, devices_per_node: int) -> str:
    """The command line that launches `layout`: `tokenmill train --nproc` on one node, and across
    nodes the same on every node with --nnodes/--node-rank/--rdzv (one torchrun agent per node,
    c10d rendezvous: docs/parallelism.md, More than one machine)."""
    sets = " ".join(f"--set {o}" for o in set_overrides(layout))
    if layout.devices <= devices_per_node:
        return f"tokenmill train CONFIG --nproc {layout.devices} {sets}"
    nodes = -(-layout.devices // devices_per_node)
    return (
        f"tokenmill train CONFIG --nnodes {nodes} --node-rank R --rdzv HOST:PORT --nproc {devices_per_node} {sets}"
        "  (on every node R = 0..nnodes-1, after the data stages)"
    )


def trainer_problems(cfg: ModelConfig, layout: Layout, train: Any = None, phase_lengths: Sequence[int] = ()) -> list[str]:
    """Why `tokenmill train --nproc {layout.devices}` would refuse `layout` for model `cfg` (empty:
    it accepts it). `train`: the run's TrainConfig the settings apply to (None: the defaults)."""
    from pydantic import ValidationError

    from tokenmill.train.config import TrainConfig
    from tokenmill.train.layout import check_launch, layout_problems

    data = (train if train is not None else TrainConfig()).model_dump()
    for key, value in layout_settings(layout).items():
        node = data
        *parents, leaf = key.split(".")[1:]
        for part in parents:
            node = node[part]
        node[leaf] = value
    try:
        tc = TrainConfig.model_validate(data)
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc'])) or 'train'}: {e['msg']}" for e in exc.errors()]
    problems = layout_problems(cfg, tc, phase_lengths)
    if problems:
        return problems
    try:
        check_launch(cfg, tc, layout.devices)
    except UserError as exc:
        return [str(exc)]
    return []
