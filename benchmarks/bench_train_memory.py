"""Peak memory of a real training step against `estimate_train_memory` (scaling/memory.py).

Configs: the demo model and batch (d=256, 4 layers, 16 × 256 tokens, document masking on, one
phase at train.seq_len so every step has the same shape) in fp32 and bf16 autocast, with and
without activation checkpointing (`train.activation_checkpointing`, the trainer's per-block
non-reentrant checkpoint), grad_accum 1 and 2.

Each config runs in a fresh process (no allocator state carried over), through the trainer's
own `compute_update` + `optimizer.step()`, on batches from the real loader. Two measurements:

- allocator (primary): step 3 under torch.profiler(profile_memory=True); every CPU allocation
  and free is an event carrying the profiler's running total, so the step's peak of live bytes
  is the maximum of that total, plus the bytes held before the step (parameters, buffers, AdamW
  state: counted tensor by tensor). This is the CPU analogue of CUDA's max_memory_allocated and
  what the estimate models.
- RSS (cross-check): after step 1 (which pages in the kernels' code and creates AdamW's state),
  glibc's malloc_trim hands the freed heap back to the OS; then the kernel's peak resident set
  over step 2 (VmHWM, reset through /proc/self/clear_refs) minus the resident set before it,
  plus the tensors held before it. It includes what glibc keeps after a free (fragmentation,
  per-thread arenas) and oneDNN's scratch buffers: the process-level figure `top` shows.
  Measured twice: with glibc's defaults (its mmap threshold grows to 32 MiB once a large block
  is freed, so later large tensors come from the heap, which keeps freed pages resident), and
  with MALLOC_MMAP_THRESHOLD_=65536 (every large tensor mmap'd, unmapped when freed: RSS then
  follows the live bytes, the allocator figure).

    .venv/bin/python benchmarks/bench_train_memory.py --run runs/demo --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

SAME_SHAPE = ["mixture.phases=[]"]
MMAP_THRESHOLD = 65536  # glibc: blocks above this are mmap'd and go back to the OS when freed
CONFIGS = [  # (dtype, activation checkpointing, grad_accum)
    ("float32", False, 1), ("bfloat16", False, 1), ("float32", True, 1), ("bfloat16", True, 1),
    ("bfloat16", False, 2), ("bfloat16", True, 2),
]


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _malloc_trim() -> None:
    """Return glibc's free heap pages to the OS (no-op without glibc)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def child(src: Path, dtype_name: str, ckpt: bool, accum: int, threads: int, overrides: list[str]) -> dict[str, Any]:
    """One config in this (fresh) process: the measured peaks and the estimate."""
    from tokenmill.config import load_config
    from tokenmill.mixture.loader import Loader
    from tokenmill.model.transformer import Transformer
    from tokenmill.scaling.memory import estimate_train_memory, profiled_peak_bytes, tensor_bytes
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.optimizer import build_optimizer
    from tokenmill.train.trainer import compute_update, resolve_model_config

    torch.set_num_threads(threads)
    cfg = load_config(src / "config.yaml", [*SAME_SHAPE, f"train.dtype={dtype_name}",
                                            f"train.activation_checkpointing={str(ckpt).lower()}",
                                            f"train.grad_accum={accum}", *overrides])
    tc, device = cfg.train, torch.device("cpu")
    dtype = torch.float32 if dtype_name == "float32" else torch.bfloat16
    store = TokenStore(src / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(cfg.seed))
    model.activation_checkpointing = ckpt
    model.train()
    opt = build_optimizer(model, tc, device)
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, 10, cfg.seed)

    def step(s: int) -> None:
        compute_update(model, opt, loader, s, tc, device, dtype, None)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def held() -> int:
        return tensor_bytes([*model.parameters(), *model.buffers(), *(t for st in opt.state.values() for t in st.values())])

    step(1)
    _malloc_trim()
    rss0 = _status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    step(2)
    rss_peak = _status_kib("VmHWM") * 1024 - rss0 + held()
    delta, _ = profiled_peak_bytes(lambda: step(3))
    est = estimate_train_memory(mcfg, tc, dtype, doc_masking=cfg.mixture.doc_masking)
    return {"dtype": dtype_name, "checkpointing": ckpt, "grad_accum": accum, "held_before_step": held(),
            "allocator_peak": held() + delta, "rss_peak": rss_peak, "estimate": est,
            "micro_batch": tc.micro_batch, "seq_len": tc.seq_len}


def run_child(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **env}).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="Config override (smoke runs).")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        dtype_name, ckpt, accum = json.loads(args.child)
        print("RESULT " + json.dumps(child(args.run, dtype_name, ckpt, accum, args.threads, args.overrides)))
        return
    rows = []
    for dtype_name, ckpt, accum in CONFIGS:
        cmd = [sys.executable, __file__, "--run", str(args.run), "--threads", str(args.threads),
               "--child", json.dumps([dtype_name, ckpt, accum]), *(f"--set={o}" for o in args.overrides)]
        r = run_child(cmd, {})
        r["rss_peak_mmap"] = run_child(cmd, {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)})["rss_peak"]
        rows.append(r)
        print(f"{dtype_name} ckpt={ckpt} accum={accum}: allocator {r['allocator_peak'] / 2**20:.1f} MiB, "
              f"RSS {r['rss_peak'] / 2**20:.1f} / {r['rss_peak_mmap'] / 2**20:.1f} MiB, "
              f"estimate {r['estimate']['peak'] / 2**20:.1f} MiB", flush=True)
    mib = 2 ** 20
    print("\n| dtype | act. ckpt | accum | estimate MiB (act. / loss / state) | allocator peak MiB (/ est.) | "
          "RSS peak, glibc default (/ est.) | RSS peak, mmap threshold 64 KiB (/ est.) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        e = r["estimate"]
        state = e["params"] + e["grads"] + e["optimizer"]
        cells = [f"{r[k] / mib:.1f} ({r[k] / e['peak']:.3f})" for k in ("allocator_peak", "rss_peak", "rss_peak_mmap")]
        print(f"| {r['dtype']} | {'on' if r['checkpointing'] else 'off'} | {r['grad_accum']} | {e['peak'] / mib:.1f} "
              f"({e['activations'] / mib:.1f} / {e['logits'] / mib:.1f} / {state / mib:.1f}) | " + " | ".join(cells) + " |")
    print(json.dumps({"torch": torch.__version__, "python": platform.python_version(),
                      "cores": len(os.sched_getaffinity(0)), "threads": args.threads, "overrides": args.overrides,
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
