"""Cost of document masking: forward+backward tokens/s with and without a document mask.

The demo model (d=256, 4 layers, 4 heads, SwiGLU 704, vocab 4096, tied) on random packed rows of
16 x 256 tokens whose document lengths are drawn geometrically (mean --mean-doc-len). Modes:

    causal      segments=None: is_causal SDPA, the unpacked fast path
    sdpa-doc    segments given, boolean [B, 1, T, T] mask through SDPA (the CPU path)
    flex-doc    segments given, FlexAttention BlockMask (only where flex_available: CUDA + Triton)
    *-staged    the same mask built before the forward, as the trainer stages it
                (train/staging.py prebuild_mask), and passed in as `prebuilt_mask`

Each step is clm_loss_batch + backward (no optimizer: it costs the same in every mode); a staged
step includes its mask's build. Modes are interleaved per repeat and the median step time of each
is reported, and `mask_build_ms` the median time of the mask build alone (one per micro-batch).
`--compile` runs the model under torch.compile: unstaged, the mask's construction is traced into
the graph; staged, the graph takes it as an input (the GPU comparison that matters).

    .venv/bin/python benchmarks/bench_doc_mask.py --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from tokenmill.config import ModelConfig
from tokenmill.model.objectives import clm_loss_batch
from tokenmill.model.transformer import Transformer, document_positions, flex_available
from tokenmill.train.staging import prebuild_mask


@dataclass
class Packed:
    tokens: torch.Tensor
    positions: torch.Tensor | None
    segments: torch.Tensor | None
    loss_mask: torch.Tensor | None
    prebuilt_mask: Any = None  # set per step by the *-staged modes


def packed_batch(B: int, T: int, vocab: int, mean_doc_len: float, g: torch.Generator) -> Packed:
    """Random tokens; each row cut into documents of geometric length (at least 1)."""
    tokens = torch.randint(0, vocab, (B, T + 1), generator=g)
    starts = torch.rand(B, T, generator=g) < 1.0 / mean_doc_len  # a document starts here
    starts[:, 0] = True
    segments = starts.long().cumsum(1) - 1
    loss_mask = torch.ones(B, T, dtype=torch.bool)
    loss_mask[:, :-1] &= ~starts[:, 1:]  # a document's last token does not predict the next one's first
    return Packed(tokens, document_positions(segments), segments, loss_mask)


def step_seconds(model: Any, batch: Packed, device: torch.device, steps: int, warmup: int, staged: bool) -> float:
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        b = prebuild_mask(model, batch, torch.float32) if staged else batch
        clm_loss_batch(model, b).backward()
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mask_build_ms(model: Transformer, batch: Packed, device: torch.device, steps: int) -> float:
    """Median ms of one micro-batch's mask build (`Transformer.mask_for`, as staging calls it)."""
    assert batch.segments is not None
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        model.mask_for(batch.segments.shape[1], device, batch.segments)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--mean-doc-len", type=float, default=64.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = ModelConfig(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, max_seq_len=args.seq_len)
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0)).to(device).train()
    batch = packed_batch(args.batch, args.seq_len, cfg.vocab_size, args.mean_doc_len, torch.Generator().manual_seed(1))
    batch = Packed(*(t.to(device) for t in (batch.tokens, batch.positions, batch.segments, batch.loss_mask)))
    plain = replace(batch, positions=None, segments=None, loss_mask=None)
    run = torch.compile(model) if args.compile else model

    backends = ["sdpa"] + (["flex"] if flex_available(device) else [])
    modes = {"causal": (plain, "sdpa", False)}
    for backend in backends:
        modes[f"{backend}-doc"] = (batch, backend, False)
        modes[f"{backend}-doc-staged"] = (batch, backend, True)
    secs: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.repeats):
        for mode, (b, backend, staged) in modes.items():
            model.doc_mask_backend = backend
            secs[mode].append(step_seconds(run, b, device, args.steps, args.warmup, staged))
    build: dict[str, float] = {}
    for backend in backends:
        model.doc_mask_backend = backend
        build[backend] = round(mask_build_ms(model, batch, device, args.steps), 3)

    tokens = args.batch * args.seq_len
    result = {
        "device": str(device), "threads": torch.get_num_threads(), "batch": args.batch, "seq_len": args.seq_len,
        "docs_per_row": round(float(batch.segments[:, -1].float().mean()) + 1, 2),
        "mask_bytes_sdpa": args.batch * args.seq_len ** 2,
        "compiled": args.compile, "torch": torch.__version__,
        "step_ms": {m: round(1e3 * statistics.median(s), 2) for m, s in secs.items()},
        "mask_build_ms": build,
        "tokens_per_s": {m: round(tokens / statistics.median(s)) for m, s in secs.items()},
    }
    result["slowdown_vs_causal"] = {m: round(result["tokens_per_s"]["causal"] / tps, 3)
                                    for m, tps in result["tokens_per_s"].items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
