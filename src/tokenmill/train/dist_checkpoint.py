"""Checkpoints of a data-parallel run, loadable by any world size and either parallelism.

Two formats, one directory protocol (checkpoint.py: write into step_<N>.tmp, fsync, rename,
SHA256SUMS over every file, state.json with the same fields):

- full (one process, DDP): model.safetensors + optim.pt + rng.safetensors + state.json, exactly
  the single-process format. DDP state is replicated, so rank 0 writes it alone while the other
  ranks wait; any world size (and `tokenmill eval`) reads it as it reads a one-process checkpoint.
- dcp (FSDP2 or tensor parallel: any DTensor parameter; a pipeline stage; ZeRO-1, whose ranks
  each hold the optimizer state of their own parameters): the sharded model and optimizer state
  through torch.distributed.checkpoint, every rank writing its own shards into step_<N>.tmp/dcp/
  (`__<rank>_0.distcp` + `.metadata`), keyed by parameter name (DCP's state_dict API), so it
  reshards on load; rank 0 adds rng.safetensors
  and state.json ("kind": "dcp", the world size and mode that wrote it), hashes every file
  including the shards into SHA256SUMS, and renames after a barrier.

`load_into` reads either format into a plain, DDP, FSDP or tensor-parallel model: same world
size, another world size (2 ranks -> 1 process, 1 -> 2), another layout (DDP <-> FSDP, saved at
tp=2 and resumed at dp=2); a dcp checkpoint also loads into a plain model in one process with no
process group (`load_model`, `tokenmill eval`).

Loading never executes code from the files: DCP's own reader unpickles `.metadata` and
torch.loads non-tensor entries (optimizer hyper-parameters) with weights_only=False, so here the
metadata goes through an unpickler that admits only DCP's metadata classes, and the non-tensor
entries through torch.load(weights_only=True). Shards themselves DCP reads with weights_only=True.
Multi-node runs need `checkpoints/` on a file system every rank sees (rank 0 renames).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as st_save
from torch import nn

from tokenmill.train import checkpoint as ckpt
from tokenmill.train.distributed import DistContext, is_sharded, unwrap
from tokenmill.train.zero import is_partitioned, whole_groups

DCP_DIR = "dcp"
KIND_DCP = ckpt.DCP_KIND

# What DCP's .metadata pickle may reference: its own metadata records, tensor shapes/dtypes/layouts
# and paths. Anything else (a function call smuggled into the file) is refused.
_SAFE_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", n)
    for n in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise ckpt.CheckpointError(
            f"DCP metadata references {module}.{name}, which a checkpoint never needs; refusing to load it"
        )


def _safe_reader(path: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeFileSystemReader(FileSystemReader):
        """FileSystemReader whose metadata is unpickled through the allow-list above."""

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            rank = kwargs.get("rank")
            where = self._get_metadata_path(rank)
            try:
                with open(where, "rb") as fh:
                    metadata = _MetadataUnpickler(fh).load()
            except (
                ckpt.CheckpointError,
                pickle.UnpicklingError,
                EOFError,
                ValueError,
                TypeError,
                AttributeError,
                IndexError,
            ) as exc:
                reason = exc if isinstance(exc, ckpt.CheckpointError) else f"{type(exc).__name__}: {exc}"
                raise ckpt.CheckpointError(
                    f"{where}: not a DCP metadata file tokenmill can read ({reason}); tokenmill never runs code from a checkpoint"
                ) from exc
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeFileSystemReader(path)


def _safe_planner() -> Any:
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner import ReadItem

    class SafeLoadPlanner(DefaultLoadPlanner):
        """Non-tensor entries (numbers, strings, tuples) loaded with weights_only=True."""

        def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
            obj = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                from torch.distributed.checkpoint._traverse import set_element

                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    return SafeLoadPlanner()


# --------------------------------------------------------------------------- format
def is_dcp(state: dict[str, Any]) -> bool:
    """Whether a checkpoint's state.json says it is a sharded (DCP) checkpoint."""
    return state.get("kind") == KIND_DCP


def needs_parallel_load(state: dict[str, Any], model: nn.Module) -> bool:
    """Whether `load_into` must read this checkpoint: a dcp one, or any into a DDP/FSDP model."""
    return is_dcp(state) or unwrap(model) is not model or is_sharded(model)


def _clean_leftovers(root: Path) -> None:
    for p in root.iterdir():  # a write or replace that was killed
        if p.is_dir() and p.name.startswith("step_") and (p.name.endswith(".tmp") or p.name.endswith(".old")):
            shutil.rmtree(p, ignore_errors=True)


def _hash_tree(tmp: Path) -> dict[str, str]:
    """{relative posix path: sha256} of every file under tmp, each fsynced first."""
    sums: dict[str, str] = {}
    for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        sums[f.relative_to(tmp).as_posix()] = ckpt._sha256_file(f)
    return sums


def _prune(root: Path, step: int, keep: int | None, keep_every: int) -> None:
    if keep is None or keep <= 0:
        return
    existing = ckpt.list_checkpoints(root)
    survivors = ckpt.retained_steps([s for s, _ in existing], keep, keep_every, written=step)
    for s, p in existing:
        if s not in survivors:
            shutil.rmtree(p, ignore_errors=True)
    ckpt._fsync_dir(root)


# --------------------------------------------------------------------------- save
def save_train_checkpoint(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
    ctx: DistContext,
    keep: int | None = None,
    keep_every: int = 0,
) -> Path:
    """Write `root/step_<step>/` from every rank (call it on every rank): the full format for one
    process and DDP (rank 0 writes), the sharded dcp format for FSDP. Returns the final path."""
    root = Path(root)
    inner = unwrap(model)
    # a pipeline stage holds part of the model; a ZeRO-1 rank part of the optimizer state
    if not is_sharded(inner) and not ctx.model_parallel and not is_partitioned(optimizer):
        if ctx.is_main:
            ckpt.save_checkpoint(root, step, inner, optimizer, state, keep=keep, keep_every=keep_every)
        ctx.barrier()  # nobody goes on (or resumes, or prunes) before the checkpoint exists
        return root / f"step_{step}"
    return _save_dcp(root, step, inner, optimizer, state, ctx, keep, keep_every)


def _save_dcp(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
    ctx: DistContext,
    keep: int | None,
    keep_every: int,
) -> Path:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    final, tmp = root / f"step_{step}", root / f"step_{step}.tmp"
    if ctx.is_main:
        root.mkdir(parents=True, exist_ok=True)
        _clean_leftovers(root)
        tmp.mkdir()
    ctx.barrier()
    if optimizer is not None:
        with whole_groups(optimizer):  # ZeRO-1: this rank's state, every parameter's group
            msd, osd = get_state_dict(model, optimizer)
        _union_groups(osd, ctx)
        payload: dict[str, Any] = {"model": msd, "optim": osd}
    else:
        payload = {"model": get_model_state_dict(model)}
    dcp.save(payload, storage_writer=dcp.FileSystemWriter(tmp / DCP_DIR, single_file_per_rank=True, sync_files=True))
    ctx.barrier()  # every rank's shards are on disk
    if ctx.is_main:
        rng_js, rng_tensors = ckpt.capture_rng_state()
        ckpt._write_bytes(tmp / "rng.safetensors", st_save(rng_tensors))
        full_state = {
            "format": ckpt.FORMAT_VERSION,
            "step": int(step),
            "saved_at": time.time(),
            "torch": torch.__version__,
            **state,
            "rng": rng_js,
            "kind": KIND_DCP,
            "world_size": ctx.world_size,
            "mode": ctx.mode,
            "has_optimizer": optimizer is not None,
        }
        ckpt._write_bytes(tmp / "state.json", json.dumps(full_state, indent=1, sort_keys=True).encode("utf-8"))
        sums = _hash_tree(tmp)
        ckpt._write_bytes(tmp / "SHA256SUMS", "".join(f"{d}  {n}\n" for n, d in sums.items()).encode("utf-8"))
        ckpt._fsync_dir(tmp / DCP_DIR)
        ckpt._fsync_dir(tmp)
        old = None
        if final.exists():  # re-reaching a step whose checkpoint was corrupt, or a rollback
            old = root / f"step_{step}.old"
            os.replace(final, old)
        os.replace(tmp, final)
        ckpt._fsync_dir(root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        _prune(root, step, keep, keep_every)
    ctx.barrier()
    return final


def _union_groups(osd: dict[str, Any], ctx: DistContext) -> None:
    """Every rank's parameter names in each optimizer group, on every rank. DCP writes one rank's
    copy of the groups (whichever it picks), and a load takes a group's hyper-parameters from the
    saved group that names one of its parameters: a pipeline stage (or a ZeRO-1 rank) lists only
    its own, so the copy must list those of every stage for any layout to find its groups."""
    if not ctx.distributed:
        return
    import torch.distributed as dist

    mine = [list(g["params"]) for g in osd["param_groups"]]
    every: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(every, mine)
    if any(len(lists) != len(mine) for lists in every):
        return  # groups that do not line up (another optimizer per rank): leave each rank's own
    for i, group in enumerate(osd["param_groups"]):
        group["params"] = list(dict.fromkeys(name for lists in every for name in lists[i]))


# --------------------------------------------------------------------------- load
def load_into(
    path: Path, state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer | None, restore_rng: bool = True
) -> dict[str, Any]:
    """Load a checkpoint of either format into a plain, DDP-wrapped or FSDP-sharded model (and
    its optimizer); every rank calls it. `state` is the checkpoint's (verified) state.json."""
    path = Path(path)
    inner = unwrap(model)
    if is_dcp(state):
        if optimizer is not None and not state.get("has_optimizer", True):
            raise ckpt.CheckpointError(f"{path} holds no optimizer state: evaluate it, or resume from another")
        _load_dcp(path, inner, optimizer)
    elif is_sharded(inner):
        _load_full_into_sharded(path, inner, optimizer)
    else:
        ckpt.load_model_tensors(inner, ckpt.read_tensors(path / "model.safetensors"), path, optimizer is not None)
        if optimizer is not None:
            optimizer.load_state_dict(ckpt.read_optimizer_state(path / "optim.pt"))
    if restore_rng:
        ckpt.restore_rng_state(state["rng"], ckpt.read_tensors(path / "rng.safetensors"))
    return state


def _load_dcp(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """DCP shards -> the model's own layout (resharded for FSDP; full tensors for a plain model,
    read without any collective, so one process with no process group can do it)."""
    no_dist = not is_sharded(model)
    with warnings.catch_warnings():
        # DCP warns when it reads with no process group; here that is the point (one process)
        warnings.filterwarnings("ignore", message=r"torch\.distributed is disabled", category=UserWarning)
        _load_dcp_state(path, model, optimizer, no_dist)


def _load_dcp_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None, no_dist: bool) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict

    try:
        if optimizer is None:
            msd = get_model_state_dict(model)
            dcp.load({"model": msd}, storage_reader=_safe_reader(path / DCP_DIR), planner=_safe_planner(), no_dist=no_dist)
            set_model_state_dict(model, msd)
            return
        with whole_groups(optimizer):  # ZeRO-1: loads every parameter's state, then keeps its own
            msd, osd = get_state_dict(model, optimizer)  # sets up Adam's state with an lr-0 step (no change)
            dcp.load(
                {"model": msd, "optim": osd},
                storage_reader=_safe_reader(path / DCP_DIR),
                planner=_safe_planner(),
                no_dist=no_dist,
            )
            set_state_dict(model, optimizer, model_state_dict=msd, optim_state_dict=osd)
    except (RuntimeError, KeyError, ValueError, pickle.UnpicklingError) as exc:
        if isinstance(exc, ckpt.CheckpointError):
            raise
        raise ckpt.CheckpointError(
            f"{path}: the sharded checkpoint could not be loaded into this model/optimizer ({exc})"
        ) from exc


def _tied_names(model: nn.Module) -> list[list[str]]:
    """Names of each parameter, all of them when one tensor is shared (a tied lm_head)."""
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return list(by_id.values())


def _load_full_into_sharded(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """A full-format checkpoint (one process or DDP) into a sharded model (FSDP2, tensor
    parallel): every rank reads the files and keeps its own shard (DCP's state_dict API with
    full_state_dict=True)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    tensors = ckpt.fused_layout(model, ckpt.read_tensors(path / "model.safetensors"), path, optimizer is not None)
    for names in _tied_names(model):  # the file stores a tied tensor once
        present = [n for n in names if n in tensors]
        if present:
            for n in names:
                tensors.setdefault(n, tensors[present[0]])
    opts = StateDictOptions(full_state_dict=True)
    expected = set(model.state_dict())
    if set(tensors) != expected:
        raise ckpt.CheckpointError(
            f"{path}: parameters do not match the model (missing "
            f"{sorted(expected - set(tensors))}, unexpected {sorted(set(tensors) - expected)})"
        )
    # Every rank must walk the tensors in the same order (each one is a scatter); safetensors'
    # load order is not even stable from one call to the next, so use the model's.
    ordered: dict[str, Any] = {name: tensors[name] for name in model.state_dict()}  # Any: DCP's ValueType union
    set_model_state_dict(model, ordered, options=opts)
    if optimizer is None:
        return
    saved = ckpt.read_optimizer_state(path / "optim.pt")
    fqn = {id(p): name for name, p in model.named_parameters()}
    ours = [fqn[id(p)] for g in optimizer.param_groups for p in g["params"]]
    theirs = [i for g in saved["param_groups"] for i in g["params"]]
    if len(ours) != len(theirs):
        raise ckpt.CheckpointError(f"{path}: optim.pt holds {len(theirs)} parameters, the optimizer {len(ours)}")
    name_of = dict(zip(theirs, ours))  # the same build_optimizer walk gave both their order
    osd: dict[str, Any] = {
        "state": {name_of[i]: s for i, s in saved["state"].items()},
        "param_groups": [{**g, "params": [name_of[i] for i in g["params"]]} for g in saved["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, osd, options=opts)


def load_full_into_stage(
    path: Path,
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    full: nn.Module,
    full_order: list[str],
    restore_rng: bool = True,
) -> None:
    """A one-process/DDP checkpoint into one pipeline stage: the stage's tensors by name, and its
    share of the AdamW state, whose indices in optim.pt follow the optimizer of the whole model
    (`full_order`: its parameter names in that optimizer's order; `full`: the whole model, for
    the names a tied tensor is stored under)."""
    tensors = ckpt.fused_layout(full, ckpt.read_tensors(path / "model.safetensors"), path, optimizer=True)
    for names in _tied_names(full):  # the file stores a tied tensor once, under one of its names
        present = [n for n in names if n in tensors]
        for n in names:
            if present:
                tensors.setdefault(n, tensors[present[0]])
    keys = list(model.state_dict())
    missing = [k for k in keys if k not in tensors]
    if missing:
        raise ckpt.CheckpointError(f"{path}: the checkpoint lacks {missing[:5]} that this pipeline stage holds")
    model.load_state_dict({k: tensors[k] for k in keys})
    saved = ckpt.read_optimizer_state(path / "optim.pt")
    theirs = [i for g in saved["param_groups"] for i in g["params"]]
    if len(theirs) != len(full_order) or len(saved["param_groups"]) != len(optimizer.param_groups):
        raise ckpt.CheckpointError(
            f"{path}: optim.pt holds {len(theirs)} parameters in {len(saved['param_groups'])} "
            f"groups, the model's optimizer {len(full_order)}"
        )
    index_of = dict(zip(full_order, theirs))
    fqn = {id(p): name for name, p in model.named_parameters()}
    osd: dict[str, Any] = {"state": {}, "param_groups": []}
    k = 0
    for saved_group, group in zip(saved["param_groups"], optimizer.param_groups):
        ids = []
        for p in group["params"]:
            if index_of[fqn[id(p)]] in saved["state"]:
                osd["state"][k] = saved["state"][index_of[fqn[id(p)]]]
            ids.append(k)
            k += 1
        osd["param_groups"].append({**saved_group, "params": ids})
    optimizer.load_state_dict(osd)
    if restore_rng:
        ckpt.restore_rng_state(state["rng"], ckpt.read_tensors(path / "rng.safetensors"))


def load_dcp_model(path: Path, model: nn.Module) -> None:
    """The weights of a dcp checkpoint into a plain model, in this process alone."""
    _load_dcp(Path(path), model, None)


# --------------------------------------------------------------------------- resume
def agreed_latest_checkpoint(root: Path, events: Any, ctx: DistContext) -> Path | None:
    """The newest valid checkpoint as rank 0 sees it, on every rank: the ranks never disagree
    on where they resume, even if a file changed between two ranks' looks."""
    choice = ckpt.latest_checkpoint(root, events) if ctx.is_main else None
    found = ctx.broadcast(None if choice is None else str(choice))
    return None if found is None else Path(found)
