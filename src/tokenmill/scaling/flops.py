"""FLOPs per token, parameter counts from the config alone, and device peak throughput (for MFU).

Training FLOPs per token (PaLM appendix B; nanoGPT `estimate_mfu`):

    flops_per_token = 6 · N  +  12 · L · d_attn · T

- 6·N: every weight is used in one multiply-add (2 FLOPs) per token in the forward pass and in
  two in the backward pass (gradient w.r.t. the input and w.r.t. the weight): "2 forward +
  4 backward" FLOPs per parameter per token (Kaplan et al. 2020, §2.1).
  N = every weight that takes part in a matmul or elementwise op: the transformer blocks, the
  final norm and the lm_head (V·d, counted even when tied, since the output projection is a real
  matmul). The input embedding *lookup* does no arithmetic and is left out.
- 12·L·d_attn·T: attention scores Q·Kᵀ and the weighted sum A·V each cost 2·T·d_attn FLOPs per
  token per layer in the forward pass (4·L·T·d_attn), ×3 for forward + backward. d_attn =
  n_heads · head_dim (= d_model); grouped K/V heads are broadcast, so GQA does not reduce it.
  The causal mask is not subtracted (the usual convention; flash kernels skip about half).
  With a sliding window w each query attends to at most w keys, so T becomes min(T, w).
- MoE: N counts the *active* parameters per token: the router and top_k of the n experts (the
  other experts hold parameters but do no arithmetic for this token).

Peak throughput, first match wins (`peak_flops_source` says which): train.peak_tflops from the
config; an entry of `tokenmill calibrate` for this device name, dtype and thread count
(scaling/calibrate.py); a table of dense (no sparsity) tensor-core peaks for known GPUs, looked up
by `torch.cuda.get_device_name`; else a quick measured matmul peak (the best of 8 timings, well under a second; cached per process).
The trainer raises the peak when a step achieves more (train/mfu.py), so a logged MFU never
exceeds 100%.
CPU MFU is therefore relative to the *measured* matmul throughput of this machine at this thread
count, not to a datasheet number.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import resolve_ffn_hidden

# Dense peak FLOP/s by device-name fragment: (bf16/fp16 tensor core, tf32 tensor core).
# Sources: NVIDIA datasheets. More specific names must come first (matched in order).
GPU_PEAKS: list[tuple[str, float, float]] = [
    ("H100 PCIe", 756e12, 378e12),
    ("H100 NVL", 835e12, 418e12),
    ("H100", 989e12, 494e12),  # SXM
    ("H200", 989e12, 494e12),
    ("GH200", 989e12, 494e12),
    ("B200", 2250e12, 1100e12),
    ("A100", 312e12, 156e12),
    ("A800", 312e12, 156e12),
    ("L40S", 362e12, 183e12),
    ("L4", 121e12, 60e12),
    ("A10G", 70e12, 35e12),
    ("A10", 125e12, 62.5e12),
    ("RTX 4090", 165e12, 82.6e12),
    ("RTX 3090", 71e12, 35.6e12),
]

_measured: dict[tuple[str, str, int, int, int], float] = {}


def param_count(cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts computed from the config alone (no model is built).

    embedding: V·d (+ max_seq_len·d of learned positions); per_layer: attention (+ QK-norm gains)
    + FFN (dense, or router + n experts) + 2 norms; lm_head: V·d if untied else 0 (shared);
    total: all unique parameters; non_embedding: total - embedding (+ nothing for a tied head);
    active_per_layer / active_non_embedding: the same with only top_k experts (= the dense
    numbers for a dense model): what one token actually multiplies by.
    """
    if cfg.vocab_size is None:
        raise ValueError("model.vocab_size must be set to count parameters")
    d, V, L = cfg.d_model, cfg.vocab_size, cfg.n_layers
    hd = d // cfg.n_heads
    kv = cfg.n_kv_heads or cfg.n_heads
    h = resolve_ffn_hidden(cfg)
    attn = d * (cfg.n_heads * hd) + 2 * d * (kv * hd) + (cfg.n_heads * hd) * d
    if cfg.qk_norm:
        attn += 2 * hd
    expert = (2 if cfg.ffn == "gelu" else 3) * d * h
    if cfg.n_experts > 0:
        ffn = d * cfg.n_experts + cfg.n_experts * expert
        active_ffn = d * cfg.n_experts + cfg.top_k * expert
    else:
        ffn = active_ffn = expert
    per_layer = attn + ffn + 2 * d
    active_per_layer = attn + active_ffn + 2 * d
    embedding = V * d + (cfg.max_seq_len * d if cfg.position == "learned" else 0)
    lm_head = 0 if cfg.tie_embeddings else V * d
    total = embedding + L * per_layer + d + lm_head
    return {
        "embedding": embedding,
        "per_layer": per_layer,
        "lm_head": lm_head,
        "total": total,
        "non_embedding": total - embedding,
        "active_per_layer": active_per_layer,
        "active_non_embedding": total - embedding - L * (per_layer - active_per_layer),
    }


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training (forward + backward) FLOPs per token: 6·N_active + 12·L·d_attn·min(T, window)
    (see module doc)."""
    counts = param_count(cfg)
    assert cfg.vocab_size is not None
    n_compute = counts["active_non_embedding"] + (cfg.vocab_size * cfg.d_model if cfg.tie_embeddings else 0)
    d_attn = cfg.n_heads * (cfg.d_model // cfg.n_heads)
    keys = seq_len if cfg.sliding_window is None else min(seq_len, cfg.sliding_window)
    return 6.0 * n_compute + 12.0 * cfg.n_layers * d_attn * keys


def gpu_peak_from_table(name: str, dtype: torch.dtype = torch.bfloat16) -> float | None:
    for fragment, bf16, tf32 in GPU_PEAKS:
        if fragment.lower() in name.lower():
            return bf16 if dtype in (torch.bfloat16, torch.float16) else tf32
    return None


QUICK_TIMINGS = 8  # timings of the quick measurement: the best of them is the peak


def measure_matmul_peak(
    device: torch.device, dtype: torch.dtype = torch.float32, n: int = 1024, timings: int = QUICK_TIMINGS
) -> float:
    """Best FLOP/s of `timings` n×n @ n×n matmuls after a warm-up (cached per process): the least
    disturbed of several, so one timing slowed by another process on the cores does not set the
    peak. n=1024 fp32 on one CPU core is ~0.05 s a timing, so the whole is well under a second."""
    from tokenmill.scaling.calibrate import best_matmul_seconds

    key = (str(device), str(dtype), torch.get_num_threads(), n, timings)
    if key not in _measured:
        _measured[key] = 2.0 * n**3 / best_matmul_seconds(n, dtype, device, seconds=0.0, min_repeats=timings)
    return _measured[key]


@dataclass(frozen=True)
class Peak:
    """A device's peak FLOP/s for MFU, its kind (config, calibration, table, measured) and where
    exactly it came from, in words (the train_start event and the log say it)."""

    flops: float
    kind: str
    origin: str


def peak_of(device: torch.device | str, dtype: torch.dtype | None = None, configured_tflops: float | None = None) -> Peak:
    """The peak of `device` for matmuls in `dtype`, first match wins: train.peak_tflops, a
    `tokenmill calibrate` entry for this device, dtype and thread count, the GPU table, else a
    quick measurement (best of QUICK_TIMINGS matmuls). dtype None: bf16 on CUDA, fp32 on CPU."""
    from tokenmill.scaling.calibrate import dtype_name, find_calibration

    if configured_tflops:
        return Peak(configured_tflops * 1e12, "config", f"config train.peak_tflops = {configured_tflops:g}")
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    entry = find_calibration(device, dtype)
    if entry is not None:
        return Peak(float(entry["peak_flops"]), "calibration", f"`tokenmill calibrate` entry of {entry.get('date', '?')}")
    # a CPU without AVX512-FP16/AMX-FP16 emulates fp16 matmuls at ~1 GFLOP/s (40-80x below fp32 on
    # the dev machine): a 1024² product takes 4 s there, a 256² one 30 ms at the same rate
    n = 256 if device.type == "cpu" and dtype == torch.float16 else 1024
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = gpu_peak_from_table(name, dtype)
        if peak is not None:
            return Peak(peak, "table", f"datasheet peak of {name}")
        n = 4096
    measured = measure_matmul_peak(device, dtype, n=n)
    threads = torch.get_num_threads()
    origin = f"quick measurement, best of {QUICK_TIMINGS} {n}² {dtype_name(dtype)} matmuls on {threads} threads (`tokenmill calibrate`: steadier)"
    return Peak(measured, "measured", origin)


def peak_flops_source(
    device: torch.device | str, dtype: torch.dtype | None = None, configured_tflops: float | None = None
) -> tuple[float, str]:
    """(peak FLOP/s of `device` for matmuls in `dtype`, its kind): "config" (the given
    train.peak_tflops), "calibration" (a `tokenmill calibrate` entry for this device, dtype and
    the current thread count), "table" (a known GPU) or "measured" (see `peak_of`)."""
    peak = peak_of(device, dtype, configured_tflops)
    return peak.flops, peak.kind


def peak_flops(device: torch.device | str, dtype: torch.dtype | None = None) -> float:
    """Peak FLOP/s of `device` for matmuls in `dtype`: calibration, GPU table or measured (see
    `peak_flops_source`)."""
    return peak_flops_source(device, dtype)[0]
