"""Device and precision: which device, which autocast dtype, TF32 on CUDA."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import torch


def resolve_device(spec: str) -> torch.device:
    """'auto' -> cuda if available else cpu; otherwise the named device, checked to exist."""
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise ValueError(f"train.device={spec!r} is not a device ('auto', 'cpu', 'cuda', 'cuda:1')") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"train.device={spec!r} but CUDA is not available here; use 'auto' or 'cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"train.device={spec!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"train.device={spec!r} but MPS is not available here")
    return device


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's CPU thread count set to `threads` (train.threads) inside the block, restored after;
    None leaves torch's default. Evaluation and replay use training's count: on a shared CPU the
    default (one per core) competes with other jobs, and CPU sums are bitwise equal only at the
    same count."""
    prev = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 matmuls natively (AVX512-BF16 or AMX-BF16 instructions).

    Without them oneDNN emulates bf16 and autocast is slower than fp32, so 'auto' keeps fp32."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_dtype(device: torch.device, spec: str) -> torch.dtype:
    """Autocast dtype: 'auto' is bf16 on a CUDA device that supports it and on a CPU with native
    bf16 instructions (about 2× the fp32 matmul rate there), fp32 elsewhere."""
    if spec == "float32":
        return torch.float32
    if spec == "bfloat16":
        return torch.bfloat16
    if spec == "float16":  # never chosen by 'auto': it needs loss scaling (train/loss_scale.py)
        return torch.float16
    if spec != "auto":
        raise ValueError(f"train.dtype={spec!r}: expected 'auto', 'float32', 'bfloat16' or 'float16'")
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if device.type == "cpu" and cpu_has_native_bf16():
        return torch.bfloat16
    return torch.float32


def enable_tf32(device: torch.device) -> None:
    """Let fp32 matmuls and convolutions use TF32 tensor cores on CUDA (no-op elsewhere)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


@contextlib.contextmanager
def autocast(device: torch.device, dtype_spec: str | torch.dtype = "auto") -> Iterator[None]:
    """Mixed-precision region: bf16 or fp16 autocast where chosen, nothing at all for fp32.

    Parameters, gradients and optimizer state stay fp32; only matmul inputs/outputs are bf16/fp16
    (norms, softmax and the loss run in fp32 in the model's code, whatever autocast's lists say).

    Autocast's weight cache is off: it would keep a bf16 copy of every weight until the region
    ends, i.e. the whole model's copies at the end of the forward, even where activation
    checkpointing (or FSDP's resharding) has let each block's copy go. Every weight is used once
    per forward, so the cache saves no casts; without it a checkpointed block's copies live only
    while it runs (scaling/memory.py `weight_copies`).
    """
    dtype = dtype_spec if isinstance(dtype_spec, torch.dtype) else resolve_dtype(device, dtype_spec)
    if dtype == torch.float32:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=False):
        yield
