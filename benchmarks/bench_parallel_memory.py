"""Peak memory per rank of real data-, tensor-, pipeline- and context-parallel training steps (ZeRO
0-3, sequence parallelism) against the planner's estimate (`scaling/rank_memory.py`), layout by
layout, side by side.

Each layout is a torchrun job of real processes (gloo on CPU) building what the trainer builds:
the model with the run's seed, pruned to the rank's pipeline stage (`build_pipeline`), sharded
with the tensor-parallel plans (sequence parallel or not) and the data axis as train.parallel.zero
says (`wrap_model`; FSDP2 inside the stages, `shard_over_dp`; ZeRO-1's optimizer partition),
AdamW, the loader over the demo's token store; then three steps of the trainer's own
`compute_update` + `optimizer.step()` (+ ZeRO-1's broadcast of each owner's parameters). Step 3
runs under torch.profiler(profile_memory=True) on every rank: the peak of the live bytes the step
allocated (the profiler's running total), plus what the rank held before it (its parameter shards,
buffers and AdamW state, tensor by tensor) is the rank's measured peak, the CPU analogue of CUDA's
max_memory_allocated. Gloo's own buffers outside torch's allocator and the allocator's
fragmentation are not in it, nor in the estimate (benchmarks/bench_train_memory.py measures the
RSS side for one process).

    .venv/bin/python benchmarks/bench_parallel_memory.py --run runs/demo

Writes benchmarks/results/parallel_memory.json; the table goes to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
SAME_SHAPE = ["mixture.phases=[]"]
# (name, ranks, dp, tp, pp, grad_accum, schedule, zero, cp, sequence_parallel); zero None: one dp rank,
# nothing to shard (or the trainer's default, 3, around tensor parallelism)
LAYOUTS = [
    ("one process", 1, 1, 1, 1, 2, "1f1b", None, 1, True),
    ("tp=2 + SP", 2, 1, 2, 1, 2, "1f1b", None, 1, True),
    ("tp=2, no SP", 2, 1, 2, 1, 2, "1f1b", None, 1, False),
    ("pp=2, 1F1B, m=2", 2, 1, 1, 2, 2, "1f1b", None, 1, True),
    ("pp=2, 1F1B, m=4", 2, 1, 1, 2, 4, "1f1b", None, 1, True),
    ("pp=2, GPipe, m=4", 2, 1, 1, 2, 4, "gpipe", None, 1, True),
    ("dp=2, ZeRO-1 (DDP + owned optimizer state)", 2, 2, 1, 1, 2, "1f1b", 1, 1, True),
    ("dp=2, ZeRO-2 (FSDP2, no reshard)", 2, 2, 1, 1, 2, "1f1b", 2, 1, True),
    ("cp=2", 2, 1, 1, 1, 2, "1f1b", None, 2, True),
    ("dp=2 × tp=2 (FSDP2 + TP + SP)", 4, 2, 2, 1, 2, "1f1b", 3, 1, True),
    ("tp=2 × pp=2", 4, 1, 2, 2, 2, "1f1b", None, 1, True),
    ("dp=2 × pp=2 (replicated stages)", 4, 2, 1, 2, 2, "1f1b", 0, 1, True),
    ("dp=2 × pp=2, ZeRO-3 inside the stages", 4, 2, 1, 2, 2, "1f1b", 3, 1, True),
]


def worker(run: Path, out: Path, dtype_name: str, layout: list[Any], overrides: list[str]) -> None:
    """One rank: build like the trainer, three steps, measure step 3, write rank_<r>.json."""
    from tokenmill.config import load_config
    from tokenmill.mixture.loader import Loader
    from tokenmill.model.transformer import Transformer
    from tokenmill.scaling.memory import profiled_peak_bytes, tensor_bytes
    from tokenmill.scaling.rank_memory import estimate_rank_memory
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.budget import resolve_budget
    from tokenmill.train.distributed import init_distributed, wrap_model
    from tokenmill.train.optimizer import build_optimizer
    from tokenmill.train.pipeline_parallel import build_pipeline
    from tokenmill.train.trainer import compute_update, resolve_model_config
    from tokenmill.train.zero import broadcast_updates, partition_optimizer

    _, _, dp, tp, pp, accum, schedule, zero, cp, seq = layout
    torch.set_num_threads(1)
    # zero 0/1 run over DDP (train.distributed=fsdp with them is a contradiction the config refuses)
    mode = "ddp" if zero is not None and zero <= 1 else "fsdp"
    cfg = load_config(run / "config.yaml", [*SAME_SHAPE, f"train.dtype={dtype_name}", f"train.grad_accum={accum}",
                                            f"train.parallel.tp={tp}", f"train.parallel.pp={pp}", f"train.parallel.cp={cp}",
                                            f"train.parallel.pp_schedule={schedule}", f"train.distributed={mode}",
                                            f"train.parallel.sequence_parallel={str(seq).lower()}",
                                            *([f"train.parallel.zero={zero}"] if zero is not None else []),
                                            "train.device=cpu", *overrides])
    ctx = init_distributed(cfg.train)
    tc = resolve_budget(cfg.train, world_size=ctx.dp_size)
    device, dtype = torch.device("cpu"), torch.float32 if dtype_name == "float32" else torch.bfloat16
    store = TokenStore(run / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.train_seed))
    model.train()
    pipeline = None
    if ctx.sizes is not None and ctx.sizes.pp > 1:
        pipeline = build_pipeline(model, ctx.mesh, ctx.sizes, ctx.rank, schedule, device, dtype)
    train_model = wrap_model(model, ctx, tc)
    if pipeline is not None and ctx.zero >= 2:
        pipeline.shard_over_dp(ctx.mesh["dp"], ctx.zero)  # FSDP2 inside the stage, as the trainer does
    opt = build_optimizer(model, tc, device)
    if ctx.zero == 1:  # ZeRO-1: this rank keeps the optimizer state of the parameters it owns
        partition_optimizer(opt, model, ctx.dp_group, ctx.dp_rank, ctx.dp_size)
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, 10, cfg.train_seed,
                    world_size=ctx.dp_size, rank=ctx.dp_rank)

    def step(s: int) -> None:
        compute_update(train_model, opt, loader, s, tc, device, dtype, None, {}, ctx=ctx, pipeline=pipeline)
        opt.step()
        broadcast_updates(opt)
        opt.zero_grad(set_to_none=True)

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    def held() -> int:
        state = (t for st in opt.state.values() for t in st.values() if isinstance(t, torch.Tensor))
        return tensor_bytes(local(t) for t in [*model.parameters(), *model.buffers(), *state])

    step(1)
    step(2)
    before = held()
    delta, _ = profiled_peak_bytes(lambda: step(3))
    stage = ctx.sizes.coords(ctx.rank)[0] if ctx.sizes is not None and pp > 1 else 0  # cp ranks: one stage
    est = estimate_rank_memory(mcfg, tc, dtype, dp=dp, tp=tp, pp=pp, stage=stage, doc_masking=cfg.mixture.doc_masking,
                               schedule=schedule, cp=cp, zero=ctx.zero if ctx.distributed else None)
    (out / f"rank_{ctx.rank}.json").write_text(json.dumps(
        {"rank": ctx.rank, "stage": stage, "held_before_step": before, "measured_peak": before + delta,
         "estimate": est, "micro_batch": tc.micro_batch, "seq_len": tc.seq_len}))
    ctx.close(synchronize=True)


def run_layout(run: Path, dtype_name: str, layout: tuple, overrides: list[str]) -> list[dict[str, Any]]:
    name, ranks = layout[0], layout[1]
    with tempfile.TemporaryDirectory() as tmp:
        # everything in one argument: torchrun would take "--run" for an abbreviation of its own options
        args = ["--worker", json.dumps([str(run), dtype_name, tmp, list(layout), overrides])]
        cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", __file__]
               if ranks > 1 else [sys.executable, __file__])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
        if ranks == 1:
            env.update({"WORLD_SIZE": "1", "RANK": "0"})
        proc = subprocess.run(cmd + args, capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        return [json.loads((Path(tmp) / f"rank_{r}.json").read_text()) for r in range(ranks)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--dtype", default=None, help="float32 or bfloat16 (default: both).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (smoke runs).")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "parallel_memory.json")
    ap.add_argument("--only", default=None, help="Only the layouts whose name contains this (a quick check).")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        run, dtype_name, tmp, layout, overrides = json.loads(args.worker)
        worker(Path(run), Path(tmp), dtype_name, layout, overrides)
        return
    sys.path.insert(0, str(REPO / "benchmarks"))
    from provenance import LoadSampler, provenance

    prov = provenance()
    with LoadSampler(interval=2.0) as load:
        rows = measure_all(args.run, args.dtype, args.overrides, args.only)
    worst = max(max(r["estimate_over_measured"], 1 / r["estimate_over_measured"]) for r in rows)
    print(f"\nworst estimate/measured (either way): {worst:.3f}× (target <= 1.2×)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**prov, "load": load.summary(), "torch": torch.__version__,
                                    "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                                    "cores": os.cpu_count(), "run": str(args.run), "overrides": args.overrides,
                                    "rows": rows, "worst_ratio": worst}, indent=1))


def measure_all(run: Path, dtype: str | None, overrides: list[str], only: str | None) -> list[dict[str, Any]]:
    """Every layout (those whose name contains `only`) in each dtype, one row per rank."""
    rows = []
    for dtype_name in ([dtype] if dtype else ["bfloat16", "float32"]):
        for layout in [x for x in LAYOUTS if only is None or only in x[0]]:
            for r in run_layout(run, dtype_name, layout, overrides):
                ratio = r["estimate"]["peak"] / r["measured_peak"]
                rows.append({"dtype": dtype_name, "layout": layout[0], "ranks": layout[1], "grad_accum": layout[5],
                             **r, "estimate_over_measured": ratio})
                print(f"{dtype_name:8s} {layout[0]:28s} rank {r['rank']} (stage {r['stage']}): measured "
                      f"{r['measured_peak'] / 2**20:7.1f} MiB, estimate {r['estimate']['peak'] / 2**20:7.1f} MiB "
                      f"({ratio:.3f}×)", flush=True)
    return rows


if __name__ == "__main__":
    main()
