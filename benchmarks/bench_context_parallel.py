"""Activation memory per rank of context parallelism (train/context_parallel.py) at long rows:
cp = 1, 2, 4 real gloo processes on CPU, each running the training forward of a tiny model on its
zig-zag share of one document-masked row, against the estimate (`scaling/memory.py`,
`context_parallel_activation_bytes`).

Measured: the bytes of the distinct storages autograd saves for the backward during the forward
and its fused loss (parameters and buffers excluded) on each rank — what stays allocated from the
forward to the backward, the term context parallelism divides. No backward is run: the saved
tensors are the activation memory, and the forward alone keeps this under two minutes.

    .venv/bin/python benchmarks/bench_context_parallel.py [--seq-len 16384] [--cps 1 2 4]

Writes benchmarks/results/context_parallel_memory.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# a tiny model: the rows, not the weights, are what context parallelism is about
MODEL = {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 128}


def saved_forward_bytes(model: torch.nn.Module, tokens: torch.Tensor, segments: torch.Tensor) -> int:
    """Bytes of the distinct non-parameter storages autograd saves in one training forward + fused loss."""
    from tokenmill.model.transformer import document_positions

    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        nll = model(tokens[:, :-1], document_positions(segments), segments, targets=tokens[:, 1:])
    del nll
    return sum(seen.values())


def rank_worker(rank: int, cp: int, store_path: str, T: int, out: dict[int, Any]) -> None:
    """One cp rank: the model with seed 0, one row of T tokens in three documents, its saved bytes."""
    from tokenmill.model.config import ModelConfig
    from tokenmill.model.transformer import Transformer
    from tokenmill.train.context_parallel import attach

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, cp), rank=rank, world_size=cp)
    try:
        model = Transformer(ModelConfig(**MODEL, max_seq_len=T), generator=torch.Generator().manual_seed(0))
        if cp > 1:
            attach(model, dist.group.WORLD)
        tokens = torch.randint(0, MODEL["vocab_size"], (1, T + 1), generator=torch.Generator().manual_seed(1))
        segments = torch.zeros(1, T, dtype=torch.long)
        segments[:, T // 3 :], segments[:, 2 * T // 3 :] = 1, 2
        t0 = time.perf_counter()
        out[rank] = {"saved_bytes": saved_forward_bytes(model, tokens, segments), "forward_s": time.perf_counter() - t0}
    finally:
        dist.destroy_process_group()


def measure(cp: int, T: int) -> list[dict[str, Any]]:
    """Every rank's {saved_bytes, forward_s} for a cp-rank job over rows of T tokens."""
    with tempfile.TemporaryDirectory() as tmp, mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(rank_worker, args=(cp, str(Path(tmp) / "store"), T, out), nprocs=cp, join=True)
        return [dict(out[r]) for r in range(cp)]


def estimate(cp: int, T: int) -> int:
    from tokenmill.model.config import ModelConfig
    from tokenmill.scaling.memory import context_parallel_activation_bytes

    cfg = ModelConfig(**MODEL, max_seq_len=T)
    return context_parallel_activation_bytes(cfg, 1, T, "float32", doc_masking=True, cp=cp, fused_loss=True)


def main() -> None:
    from benchmarks.provenance import LoadSampler, provenance

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq-len", type=int, default=16384)
    ap.add_argument("--cps", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "context_parallel_memory.json")
    args = ap.parse_args()
    prov = provenance()
    rows = []
    with LoadSampler() as load:
        for cp in args.cps:
            ranks = measure(cp, args.seq_len)
            est = estimate(cp, args.seq_len)
            peak = max(r["saved_bytes"] for r in ranks)
            rows.append({"cp": cp, "seq_len": args.seq_len, "ranks": ranks, "max_rank_saved_bytes": peak,
                         "estimate_bytes": est, "estimate_over_measured": round(est / peak, 4)})
            print(f"cp={cp}: {peak / 2**20:.1f} MiB saved per rank (estimate {est / 2**20:.1f} MiB), "
                  f"forward {max(r['forward_s'] for r in ranks):.1f} s", flush=True)
    base = rows[0]["max_rank_saved_bytes"] if rows[0]["cp"] == 1 else None
    for r in rows:
        r["vs_cp1"] = round(r["max_rank_saved_bytes"] / base, 4) if base else None
    result = {**prov, "load": load.summary(), "model": MODEL, "dtype": "float32", "rows_per_rank": 1,
              "doc_masking": True, "results": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
