"""Cost of document masking: forward+backward tokens/s with and without a document mask.

The demo model (d=256, 4 layers, 4 heads, SwiGLU 704, vocab 4096, tied) on random packed rows of
16 x 256 tokens whose document lengths are drawn geometrically (mean --mean-doc-len). Modes:

    causal      segments=None: is_causal SDPA, the unpacked fast path
    sdpa-doc    segments given, boolean [B, 1, T, T] mask through SDPA (the CPU path)
    flex-doc    segments given, FlexAttention BlockMask (only where flex_available: CUDA + Triton)

Each step is clm_loss_batch + backward (no optimizer: it costs the same in every mode). Modes
are interleaved per repeat and the median step time of each is reported.

    .venv/bin/python benchmarks/bench_doc_mask.py --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass

import torch

from tokenmill.config import ModelConfig
from tokenmill.model.objectives import clm_loss_batch
from tokenmill.model.transformer import Transformer, document_positions, flex_available


@dataclass
class Packed:
    tokens: torch.Tensor
    positions: torch.Tensor | None
    segments: torch.Tensor | None
    loss_mask: torch.Tensor | None


def packed_batch(B: int, T: int, vocab: int, mean_doc_len: float, g: torch.Generator) -> Packed:
    """Random tokens; each row cut into documents of geometric length (at least 1)."""
    tokens = torch.randint(0, vocab, (B, T + 1), generator=g)
    starts = torch.rand(B, T, generator=g) < 1.0 / mean_doc_len  # a document starts here
    starts[:, 0] = True
    segments = starts.long().cumsum(1) - 1
    loss_mask = torch.ones(B, T, dtype=torch.bool)
    loss_mask[:, :-1] &= ~starts[:, 1:]  # a document's last token does not predict the next one's first
    return Packed(tokens, document_positions(segments), segments, loss_mask)


def step_seconds(model: Transformer, batch: Packed, device: torch.device, steps: int, warmup: int) -> float:
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        clm_loss_batch(model, batch).backward()
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = ModelConfig(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, max_seq_len=args.seq_len)
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0)).to(device).train()
    batch = packed_batch(args.batch, args.seq_len, cfg.vocab_size, args.mean_doc_len, torch.Generator().manual_seed(1))
    batch = Packed(*(t.to(device) for t in (batch.tokens, batch.positions, batch.segments, batch.loss_mask)))
    plain = Packed(batch.tokens, None, None, None)

    modes = {"causal": (plain, "sdpa"), "sdpa-doc": (batch, "sdpa")}
    if flex_available(device):
        modes["flex-doc"] = (batch, "flex")
    secs: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.repeats):
        for mode, (b, backend) in modes.items():
            model.doc_mask_backend = backend
            secs[mode].append(step_seconds(model, b, device, args.steps, args.warmup))

    tokens = args.batch * args.seq_len
    result = {
        "device": str(device), "threads": torch.get_num_threads(), "batch": args.batch, "seq_len": args.seq_len,
        "docs_per_row": round(float(batch.segments[:, -1].float().mean()) + 1, 2),
        "mask_bytes_sdpa": args.batch * args.seq_len ** 2,
        "tokens_per_s": {m: round(tokens / statistics.median(s)) for m, s in secs.items()},
    }
    result["slowdown_vs_causal"] = {m: round(result["tokens_per_s"]["causal"] / tps, 3)
                                    for m, tps in result["tokens_per_s"].items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
