"""`tokenmill calibrate`: this machine's matmul peak, measured once and kept for MFU.

MFU is model FLOP/s over the device's peak FLOP/s. GPUs have datasheet peaks (scaling/flops.py);
a CPU's depends on its vector units, its clock under load and the thread count, so the honest
peak is what torch's own matmul reaches here. Calibration times square n×n @ n×n matmuls in each
dtype (fp32, and bf16 where the hardware computes it natively: AVX512-BF16/AMX on CPU, every
CUDA GPU), keeps the best time of repeated runs for each size (the least disturbed one), and
records the best FLOP/s over the sizes as the peak: 2·n³ / seconds.

Entries live in one JSON file, `$TOKENMILL_CACHE/calibration.json` (default
`~/.cache/tokenmill/calibration.json`), keyed by device name (the CPU model string from
/proc/cpuinfo or the GPU name), thread count and dtype, each with its date and torch version; a
new calibration replaces the entries with the same key. `tokenmill.scaling.flops.peak_flops`
uses a matching entry when there is one. On CUDA the thread count does not matter and is not
matched.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from tokenmill import json_limits
from tokenmill.errors import UserError

FORMAT_VERSION = 1
CPU_SIZES = (512, 1024, 2048)
CUDA_SIZES = (2048, 4096, 8192)
MIN_REPEATS = 3


class CalibrationError(UserError, ValueError):
    """The calibration file cannot be read; the message names it and says what to do."""


def cache_dir() -> Path:
    """$TOKENMILL_CACHE, else ~/.cache/tokenmill."""
    env = os.environ.get("TOKENMILL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tokenmill"


def calibration_path() -> Path:
    return cache_dir() / "calibration.json"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def device_name(device: torch.device | str) -> str:
    """The CPU model string (/proc/cpuinfo 'model name', else platform.processor()) or the GPU name."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def calibration_dtypes(device: torch.device | str) -> list[torch.dtype]:
    """fp32 everywhere; bf16 on CUDA and on CPUs with native bf16 instructions (elsewhere oneDNN
    emulates it, slower than fp32, and no trainer default uses it)."""
    from tokenmill.train.device import cpu_has_native_bf16

    device = torch.device(device)
    if device.type == "cuda" or cpu_has_native_bf16():
        return [torch.float32, torch.bfloat16]
    return [torch.float32]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_matmul_seconds(
    n: int, dtype: torch.dtype, device: torch.device | str, seconds: float, min_repeats: int = MIN_REPEATS
) -> float:
    """The fastest of repeated n×n @ n×n matmuls (into a preallocated output) over about `seconds`."""
    device = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(n)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    torch.mm(a, b, out=out)  # warm up: kernel selection, thread pool, page faults
    _sync(device)
    best = float("inf")
    deadline = time.perf_counter() + seconds
    repeats = 0
    while repeats < min_repeats or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        repeats += 1
    return best


def measure_peak(device: torch.device | str, dtype: torch.dtype, sizes: tuple[int, ...], seconds: float) -> dict[str, Any]:
    """{"peak_flops": best FLOP/s over sizes, "by_size": {n: FLOP/s}}; `seconds` split over the sizes."""
    by_size = {}
    for n in sizes:
        by_size[str(n)] = 2.0 * n**3 / best_matmul_seconds(n, dtype, device, seconds / len(sizes))
    return {"peak_flops": max(by_size.values()), "by_size": by_size}


def measure_bandwidth(device: torch.device | str, seconds: float, mib: int = 256) -> float:
    """Memory bandwidth in bytes/s: the fastest copy of a `mib` MiB fp32 tensor into another
    (read + write: 2 × its bytes), well beyond any cache, over about `seconds` — the STREAM
    "copy" kernel, the slope of this device's roofline."""
    device = torch.device(device)
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # page faults and thread start-up out of the timing
    _sync(device)
    best, deadline, repeats = float("inf"), time.perf_counter() + seconds, 0
    while repeats < MIN_REPEATS or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        repeats += 1
    return 2 * src.numel() * src.element_size() / best


def calibrate(
    device: torch.device | str = "cpu",
    threads: int | None = None,
    seconds: float = 2.0,
    sizes: tuple[int, ...] | None = None,
    dtypes: list[torch.dtype] | None = None,
) -> list[dict[str, Any]]:
    """Measure the matmul peak of `device` in each dtype at `threads` torch threads (None: the
    current count); returns the calibration entries (not written: see `write_calibration`)."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CalibrationError("--device cuda but CUDA is not available here; use --device cpu")
    if seconds <= 0:
        raise CalibrationError(f"--seconds {seconds}: must be positive")
    sizes = sizes or (CUDA_SIZES if device.type == "cuda" else CPU_SIZES)
    prev = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise CalibrationError(f"--threads {threads}: must be at least 1")
        torch.set_num_threads(threads)
    try:
        n_threads = torch.get_num_threads()
        bandwidth = measure_bandwidth(device, min(seconds, 1.0))
        entries = []
        for dtype in dtypes or calibration_dtypes(device):
            result = measure_peak(device, dtype, sizes, seconds)
            entries.append(
                {
                    "device": device_name(device),
                    "device_type": device.type,
                    "threads": n_threads,
                    "dtype": dtype_name(dtype),
                    "peak_flops": result["peak_flops"],
                    "by_size": result["by_size"],
                    "seconds": seconds,
                    "memory_bandwidth": bandwidth,
                    "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "torch": torch.__version__,
                }
            )
        return entries
    finally:
        torch.set_num_threads(prev)


def _key(entry: dict[str, Any]) -> tuple[Any, ...]:
    threads = None if entry.get("device_type") == "cuda" else entry.get("threads")
    return entry.get("device"), threads, entry.get("dtype")


def read_calibration(path: Path | None = None) -> list[dict[str, Any]]:
    """The entries of the calibration file ([] when it does not exist)."""
    path = path or calibration_path()
    if not path.exists():
        return []
    try:
        data = json_limits.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON, or too deep
        raise CalibrationError(
            f"{path}: not a readable calibration file ({exc}); delete it and run `tokenmill calibrate` again"
        ) from exc
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("peak_flops"), (int, float)) for e in entries
    ):
        raise CalibrationError(
            f"{path}: expected {{'entries': [{{..., 'peak_flops': number}}]}}; delete it and run `tokenmill calibrate` again"
        )
    return entries


def write_calibration(new: list[dict[str, Any]], path: Path | None = None) -> Path:
    """Merge `new` into the file (replacing entries with the same device, threads and dtype) and
    write it atomically (temporary file, fsync, rename). An unreadable file is replaced."""
    path = path or calibration_path()
    try:
        old = read_calibration(path)
    except CalibrationError as exc:
        warnings.warn(f"{exc}; replacing it", stacklevel=2)
        old = []
    keys = {_key(e) for e in new}
    merged = [e for e in old if _key(e) not in keys] + list(new)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibration.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"version": FORMAT_VERSION, "entries": merged}, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def find_calibration(
    device: torch.device | str, dtype: torch.dtype, threads: int | None = None, path: Path | None = None
) -> dict[str, Any] | None:
    """The entry for this device name, dtype and thread count (None: the current count; ignored on
    CUDA), or None. An unreadable file is warned about and treated as absent: a stale cache must
    not stop a training run."""
    device = torch.device(device)
    try:
        entries = read_calibration(path)
    except CalibrationError as exc:
        warnings.warn(str(exc), stacklevel=2)
        return None
    if not entries:
        return None
    want = {
        "device": device_name(device),
        "device_type": device.type,
        "dtype": dtype_name(dtype),
        "threads": torch.get_num_threads() if threads is None else threads,
    }
    for entry in reversed(entries):  # the newest first
        if _key(entry) == _key(want) and entry.get("device_type", "cpu") == device.type:
            return entry
    return None
