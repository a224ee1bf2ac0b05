"""One rank of the sequence-parallel probe (test helper for tests/train/test_sequence_parallel.py).

    python -m torch.distributed.run --standalone --nproc-per-node 2 sp_probe.py OUT_DIR

Builds the distributed tests' tiny model on every rank (same seed), keeps a whole copy, and shards
two more copies over the tp=2 mesh, with and without sequence parallelism. For each it records, per
dtype: the per-token NLL of a document-masked batch against the whole model's, the norm gains'
gradients (gathered) against the whole model's, the local shapes every block's norms and FFN see,
and the bytes autograd saves inside each block (distinct storages, parameters excluded), which the
test compares with scaling/memory.py's estimate; the QK-norm gains' gradients (RMSNorm and
LayerNorm, with and without SP); and what the SP model says to rows of an odd length. Rank r writes OUT_DIR/rank<r>.json.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer, document_positions
from tokenmill.train.device import autocast
from tokenmill.train.layout import LayoutError
from tokenmill.train.tensor_parallel import apply_tensor_parallel

CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32)
B, T = 4, 32


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _note(shapes: dict[str, list[int]], name: str, t: torch.Tensor) -> None:
    shapes.setdefault(name, list(_local(t).shape))  # None: the hook leaves the output alone


def batch() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    tokens = torch.randint(0, 64, (B, T + 1), generator=torch.Generator().manual_seed(3))
    seg = torch.zeros(B, T, dtype=torch.long)
    seg[:, 11:] = 1  # two documents per row, the boundary inside rank 0's half
    return tokens, {"segments": seg, "positions": document_positions(seg)}


def probe(model: Transformer, dtype: torch.dtype) -> dict[str, Any]:
    """NLL, norm-gain gradients, local shapes seen inside the blocks, and saved bytes per block."""
    tokens, kwargs = batch()
    params = {_local(p).untyped_storage().data_ptr() for p in model.parameters()}
    params |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    saved: list[dict[int, int]] = []
    shapes: dict[str, list[int]] = {}
    hooks = []
    for i, block in enumerate(model.layers):
        hooks.append(block.register_forward_pre_hook(lambda *_: saved.append({})))
        for name in ("input_layernorm", "post_attention_layernorm", "mlp"):
            mod: nn.Module = getattr(block, name)
            record = f"layers.{i}.{name}"
            hooks.append(mod.register_forward_hook(lambda m, a, o, r=record: _note(shapes, r, a[0])))
    ended = []
    hooks.append(model.norm.register_forward_pre_hook(lambda *_: ended.append(True)))

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = _local(t).untyped_storage()
        if saved and not ended and s.data_ptr() not in params:
            saved[-1][s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(torch.device("cpu"), dtype):
        nll = model(tokens[:, :-1], targets=tokens[:, 1:], **kwargs)
    nll.sum().backward()
    for h in hooks:
        h.remove()
    norms = {
        n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        for n, p in model.named_parameters()
        if "norm" in n
    }
    model.zero_grad(set_to_none=True)
    return {"nll": nll.detach(), "norm_grads": norms, "shapes": shapes, "saved": [sum(s.values()) for s in saved]}


def main() -> int:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    whole = Transformer(CFG, generator=torch.Generator().manual_seed(0))

    report: dict[str, Any] = {}
    for sp in (False, True):
        sharded = apply_tensor_parallel(copy.deepcopy(whole), mesh, sequence_parallel=sp)
        for dtype in (torch.float32, torch.bfloat16):
            ref, got = probe(whole, dtype), probe(sharded, dtype)
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            report[f"sp={sp} {dtype}"] = {
                "nll_max_diff": float((got["nll"] - ref["nll"]).abs().max()),
                "nll_ok": bool(torch.allclose(got["nll"], ref["nll"], rtol=tol, atol=tol)),
                "norm_grads_ok": all(
                    torch.allclose(got["norm_grads"][n], g, rtol=tol, atol=tol) for n, g in ref["norm_grads"].items()
                ),
                "shapes": got["shapes"],
                "saved_per_block": got["saved"],
                "saved_whole_model": ref["saved"],
            }
    for norm in ("rmsnorm", "layernorm"):  # QK-norm: gains shared by the heads that tp splits
        qk = Transformer(CFG.model_copy(update={"qk_norm": True, "norm": norm}), generator=torch.Generator().manual_seed(0))
        for sp in (False, True):
            sharded = apply_tensor_parallel(copy.deepcopy(qk), mesh, sequence_parallel=sp)
            ref, got = probe(qk, torch.float32)["norm_grads"], probe(sharded, torch.float32)["norm_grads"]
            report[f"qk_norm {norm} sp={sp}"] = all(torch.allclose(got[n], g, atol=1e-5) for n, g in ref.items())
    sharded = apply_tensor_parallel(copy.deepcopy(whole), mesh, sequence_parallel=True)
    try:  # an odd row length cannot split in two: refused before any collective
        sharded(torch.zeros(1, T - 1, dtype=torch.long))
        report["odd_rows"] = "accepted"
    except LayoutError as exc:
        report["odd_rows"] = str(exc)
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(report, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
