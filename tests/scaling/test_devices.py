"""Device presets: datasheet peaks and memory, aliases, price override, and "this" machine from a
`tokenmill calibrate` entry (a clear error without one)."""

import pytest
import torch

from tokenmill.errors import UserError
from tokenmill.scaling import calibrate as cal
from tokenmill.scaling.devices import GB, PRESETS, DeviceError, get_device
from tokenmill.scaling.flops import gpu_peak_from_table


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Own calibration cache, and no GPU: "this" is the CPU whatever the test machine has."""
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_presets_match_the_datasheets():
    h100, h200 = get_device("h100"), get_device("h200")
    assert h100.peak_flops == 989e12 == gpu_peak_from_table("NVIDIA H100 80GB HBM3")
    assert h200.peak_flops == h100.peak_flops  # same compute die, more memory
    assert (h100.memory_bytes, h200.memory_bytes) == (80 * GB, 141 * GB)
    assert get_device("a100-40gb").peak_flops == get_device("a100-80gb").peak_flops == 312e12
    assert get_device("a100-40gb").memory_bytes == 40 * GB
    # NVLink 4 is 900 GB/s counted both ways; NDR InfiniBand 400 Gb/s per GPU
    assert h100.intra_node_bandwidth == 450 * GB and h100.inter_node_bandwidth == 50 * GB
    assert all(p.devices_per_node == 8 and p.price_per_hour > 0 for p in PRESETS.values())


def test_aliases_case_and_price_override():
    assert get_device("A100") == get_device("a100-80gb")
    assert get_device("H100").name == "h100"
    assert get_device("h100", price_per_hour=1.25).price_per_hour == 1.25
    assert get_device("h100").price_per_hour == PRESETS["h100"].price_per_hour  # the preset is not mutated


def test_unknown_device_and_negative_price_are_user_errors():
    with pytest.raises(DeviceError, match="presets are a100-40gb, a100-80gb, h100, h200, this"):
        get_device("tpu-v5")
    with pytest.raises(UserError, match="--price"):
        get_device("h100", price_per_hour=-1)


def test_this_machine_needs_a_calibration():
    with pytest.raises(DeviceError, match="run `tokenmill calibrate` first"):
        get_device("this")


def test_this_machine_uses_the_calibrated_peak():
    entry = {"device": cal.device_name("cpu"), "device_type": "cpu", "threads": torch.get_num_threads(),
             "dtype": "float32", "peak_flops": 1.5e11, "by_size": {"512": 1.5e11},
             "date": "2026-01-01T00:00:00+00:00", "torch": torch.__version__}
    cal.write_calibration([entry])
    spec = get_device("this", price_per_hour=0.1)
    assert spec.peak_flops == 1.5e11 and spec.peak_source == "calibration"
    assert spec.devices_per_node == 1 and spec.memory_bytes > 0 and spec.price_per_hour == 0.1


def test_this_machine_takes_the_calibrated_bandwidth_when_measured():
    entry = {"device": cal.device_name("cpu"), "device_type": "cpu", "threads": torch.get_num_threads(),
             "dtype": "float32", "peak_flops": 1.5e11, "by_size": {"512": 1.5e11},
             "date": "2026-01-01T00:00:00+00:00", "torch": torch.__version__}
    cal.write_calibration([entry])
    assert get_device("this").memory_bandwidth is None  # an entry from before bandwidth was measured
    cal.write_calibration([{**entry, "memory_bandwidth": 3.0e10}])
    assert get_device("this").memory_bandwidth == 3.0e10
    assert get_device("h100").memory_bandwidth == 3.35e12
