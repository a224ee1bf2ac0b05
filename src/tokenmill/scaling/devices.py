"""Accelerator presets for planning a run: peak dense bf16 FLOP/s, memory, interconnect, price.

`tokenmill plan` needs, per device: the peak throughput the wall-clock formula divides by, the
memory a layout must fit in, how many devices share a fast intra-node link (NVLink) and the
bandwidth of that link and of the inter-node network (InfiniBand), and a price per device-hour.

Sources and conventions:
- Peaks come from the datasheet table in scaling/flops.py (dense bf16 tensor-core FLOP/s, no
  sparsity): A100 312e12, H100 SXM 989e12, H200 989e12 (same compute die as the H100).
- Memory is the marketed capacity in decimal GB (80 GB = 80e9 bytes): a little below what the
  card really has (80 GiB), which leaves room for the CUDA context.
- Bandwidths are per device and one direction: NVLink 3 (A100) 300 GB/s, NVLink 4 (H100/H200)
  450 GB/s (NVIDIA's "600"/"900 GB/s" count both directions); inter-node one HDR (200 Gb/s, A100
  clusters) or NDR (400 Gb/s, H100/H200 clusters) InfiniBand port per GPU.
- Prices are rough 2025 on-demand cloud rates in USD per device-hour (they vary by a factor of
  two between providers and with commitments): always printed with the plan, override with
  `--price`.

"cpu" is this machine's CPU: its `tokenmill calibrate` peak, else one measured on the spot;
`plan --config` on a CPU also measures the step time itself (scaling/plan_measure.py).
"this" is this machine as `tokenmill calibrate` measured it: the newest calibration entry for its
CUDA GPU (bf16, else fp32) or its CPU at the current thread count, its memory (GPU memory, or the
RAM for a CPU), the GPUs of this machine as one node linked by PCIe (a CPU: one device per
node), 10 Gb/s Ethernet between nodes, no price.
"""

from __future__ import annotations

import os

import torch
from pydantic import Field

from tokenmill.config_base import Strict
from tokenmill.errors import UserError
from tokenmill.scaling.flops import gpu_peak_from_table

GB = 1e9


class DeviceError(UserError, ValueError):
    """An unknown device preset, or "this" machine without a calibration."""


class DeviceSpec(Strict):
    """One accelerator as the planner sees it."""

    name: str = Field(..., description="Preset name (h100, a100-80gb, this, ...).")
    description: str = Field("", description="What the preset stands for (model, form factor, network).")
    peak_flops: float = Field(..., gt=0, description="Dense bf16 (or the calibrated dtype's) matmul peak, FLOP/s.")
    memory_bytes: float = Field(..., gt=0, description="Device memory a layout must fit in, bytes.")
    devices_per_node: int = Field(8, ge=1, description="Devices sharing the fast intra-node link.")
    intra_node_bandwidth: float = Field(
        ..., gt=0, description="Intra-node (NVLink) bandwidth per device, one direction, bytes/s."
    )
    inter_node_bandwidth: float = Field(
        ..., gt=0, description="Inter-node (InfiniBand) bandwidth per device, one direction, bytes/s."
    )
    price_per_hour: float = Field(0.0, ge=0, description="USD per device-hour (a rough default; --price overrides).")
    memory_bandwidth: float | None = Field(
        None, gt=0, description="Device memory bandwidth, bytes/s (the roofline's slope; None: not known)."
    )
    peak_source: str = Field("datasheet", description="Where peak_flops comes from: datasheet or calibration.")


def _gpu(
    name: str, table_name: str, description: str, memory_gb: float, nvlink: float, ib_gbit: float, price: float, hbm_gb_s: float
) -> DeviceSpec:
    peak = gpu_peak_from_table(table_name, torch.bfloat16)
    assert peak is not None, table_name
    return DeviceSpec(
        name=name,
        description=description,
        peak_flops=peak,
        memory_bytes=memory_gb * GB,
        devices_per_node=8,
        intra_node_bandwidth=nvlink * GB,
        inter_node_bandwidth=ib_gbit / 8 * GB,
        price_per_hour=price,
        memory_bandwidth=hbm_gb_s * GB,
    )


PRESETS: dict[str, DeviceSpec] = {
    # HBM bandwidth from NVIDIA's datasheets: A100 40 GB 1,555 GB/s, 80 GB 2,039; H100 SXM 3,350; H200 4,800
    "a100-40gb": _gpu("a100-40gb", "A100", "A100 SXM 40 GB, NVLink 3, HDR 200 Gb/s per GPU", 40, 300, 200, 1.30, 1555),
    "a100-80gb": _gpu("a100-80gb", "A100", "A100 SXM 80 GB, NVLink 3, HDR 200 Gb/s per GPU", 80, 300, 200, 1.80, 2039),
    "h100": _gpu("h100", "H100", "H100 SXM 80 GB, NVLink 4, NDR 400 Gb/s per GPU", 80, 450, 400, 2.50, 3350),
    "h200": _gpu("h200", "H200", "H200 SXM 141 GB, NVLink 4, NDR 400 Gb/s per GPU", 141, 450, 400, 3.50, 4800),
}
ALIASES = {"a100": "a100-80gb", "h100-sxm": "h100", "h100-80gb": "h100", "h200-141gb": "h200"}
THIS_NETWORK = 10 / 8 * GB  # "this" machine: assume 10 Gb/s Ethernet between nodes
THIS_PCIE = 25 * GB  # and PCIe 4.0 x16 (about 25 GB/s achieved, one direction) between its GPUs


def cpu_spec(peak_flops: float, description: str, memory_bandwidth: float | None = None) -> DeviceSpec:
    """This CPU as the planner sees it: `peak_flops` (calibrated or measured), the machine's RAM,
    one device per node, 10 Gb/s Ethernet to any other."""
    return DeviceSpec(
        name="cpu",
        description=description,
        peak_flops=peak_flops,
        memory_bytes=float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")),
        devices_per_node=1,
        intra_node_bandwidth=THIS_NETWORK,
        inter_node_bandwidth=THIS_NETWORK,
        price_per_hour=0.0,
        peak_source="calibration",
        memory_bandwidth=memory_bandwidth,
    )


def this_cpu(dtype: torch.dtype, threads: int) -> DeviceSpec:
    """This CPU at `threads` threads in `dtype`: `tokenmill calibrate`'s peak, else one measured now."""
    from tokenmill.scaling.plan_measure import cpu_peak

    peak, origin, _ = cpu_peak(dtype, threads)
    return cpu_spec(peak, f"this CPU, {threads} threads: {origin}")


def this_machine() -> DeviceSpec:
    """This machine's calibrated peak (CUDA GPU 0 when there is one, else the CPU) and memory."""
    from tokenmill.scaling.calibrate import device_name, find_calibration

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    entry = find_calibration(device, torch.bfloat16) or find_calibration(device, torch.float32)
    if entry is None:
        raise DeviceError(
            f"--device this: no `tokenmill calibrate` entry for {device_name(device)!r} "
            f"({device.type}, {torch.get_num_threads()} threads); run `tokenmill calibrate"
            f"{' --device cuda' if device.type == 'cuda' else ''}` first"
        )
    if device.type == "cuda":
        memory = float(torch.cuda.get_device_properties(device).total_memory)
        count = torch.cuda.device_count()
    else:
        memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        count = 1
    return DeviceSpec(
        name="this",
        description=f"{entry['device']} ({entry['dtype']}, calibrated {entry.get('date', '?')})",
        peak_flops=float(entry["peak_flops"]),
        memory_bytes=memory,
        devices_per_node=count,
        intra_node_bandwidth=THIS_PCIE if device.type == "cuda" else THIS_NETWORK,
        inter_node_bandwidth=THIS_NETWORK,
        price_per_hour=0.0,
        peak_source="calibration",
        memory_bandwidth=entry.get("memory_bandwidth"),
    )


def get_device(name: str, price_per_hour: float | None = None) -> DeviceSpec:
    """The preset called `name` (case-insensitive; "this" = this machine), with the price replaced
    when `price_per_hour` is given."""
    key = ALIASES.get(name.lower(), name.lower())
    if key == "this":
        spec = this_machine()
    elif key == "cpu":
        from tokenmill.train.device import resolve_dtype

        spec = this_cpu(resolve_dtype(torch.device("cpu"), "auto"), torch.get_num_threads())
    elif key in PRESETS:
        spec = PRESETS[key]
    else:
        raise DeviceError(f"--device {name!r}: unknown device; presets are {', '.join([*PRESETS, 'this', 'cpu'])}")
    if price_per_hour is not None:
        if price_per_hour < 0:
            raise DeviceError(f"--price {price_per_hour}: must be >= 0")
        spec = spec.model_copy(update={"price_per_hour": price_per_hour})
    return spec
