"""`tokenmill calibrate`: the file round-trips, lookups match device/threads/dtype only, the measured
peak agrees with an independent timing, and MFU's peak says where it came from."""

import json
import statistics
import time

import pytest
import torch
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.scaling import calibrate as cal
from tokenmill.scaling.flops import peak_flops, peak_flops_source


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test gets its own calibration cache (never the user's ~/.cache)."""
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def entry(peak: float, device: str | None = None, threads: int | None = None, dtype: str = "float32",
          device_type: str = "cpu") -> dict:
    return {"device": device or cal.device_name("cpu"), "device_type": device_type,
            "threads": torch.get_num_threads() if threads is None else threads, "dtype": dtype,
            "peak_flops": peak, "by_size": {"64": peak}, "date": "2026-01-01T00:00:00+00:00", "torch": torch.__version__}


def test_calibration_path_follows_the_env(cache):
    assert cal.calibration_path() == cache / "calibration.json"


def test_file_round_trips_and_a_new_calibration_replaces_only_its_own_keys(cache):
    first = [entry(1e11), entry(2e11, dtype="bfloat16"), entry(3e11, threads=7)]
    path = cal.write_calibration(first)
    assert path == cache / "calibration.json"
    assert cal.read_calibration() == first
    assert json.loads(path.read_text())["version"] == cal.FORMAT_VERSION
    again = [entry(5e11)]  # same device, threads and dtype as first[0]
    cal.write_calibration(again)
    got = cal.read_calibration()
    assert sorted(e["peak_flops"] for e in got) == [2e11, 3e11, 5e11]
    assert [p.name for p in cache.iterdir()] == ["calibration.json"]  # no temporary file left behind


def test_lookup_picks_the_matching_entry_and_ignores_others():
    threads = torch.get_num_threads()
    cal.write_calibration([entry(1e9, device="Some Other CPU"), entry(2e9, threads=threads + 1),
                           entry(3e9, dtype="bfloat16"), entry(4e9), entry(5e9, device="Some GPU", device_type="cuda")])
    assert cal.find_calibration("cpu", torch.float32)["peak_flops"] == 4e9
    assert cal.find_calibration("cpu", torch.bfloat16)["peak_flops"] == 3e9
    assert cal.find_calibration("cpu", torch.float32, threads=threads + 1)["peak_flops"] == 2e9
    assert cal.find_calibration("cpu", torch.float32, threads=threads + 2) is None
    assert cal.find_calibration("cpu", torch.float16) is None
    # CUDA entries match whatever the CPU thread count
    gpu = {"device": "Some GPU", "device_type": "cuda", "threads": 99, "dtype": "float32"}
    assert cal._key(gpu) == cal._key({**gpu, "threads": 1})


def test_peak_flops_uses_config_then_calibration_then_measurement():
    measured, source = peak_flops_source("cpu", torch.float32)
    assert source == "measured" and measured > 0
    cal.write_calibration([entry(1.234e12)])
    assert peak_flops_source("cpu", torch.float32) == (1.234e12, "calibration")
    assert peak_flops("cpu", torch.float32) == 1.234e12
    assert peak_flops_source("cpu", torch.float32, configured_tflops=2.5) == (2.5e12, "config")
    # an entry for another thread count does not apply
    prev = torch.get_num_threads()
    torch.set_num_threads(prev + 1)
    try:
        assert peak_flops_source("cpu", torch.float32)[1] == "measured"
    finally:
        torch.set_num_threads(prev)


def test_a_corrupt_file_is_a_clear_error_to_read_ignored_by_training_and_replaced(cache):
    cache.mkdir(parents=True)
    (cache / "calibration.json").write_text("{not json")
    with pytest.raises(cal.CalibrationError, match="calibration.json.*delete it"):
        cal.read_calibration()
    with pytest.warns(UserWarning, match="calibration.json"):
        assert cal.find_calibration("cpu", torch.float32) is None
    with pytest.warns(UserWarning):
        cal.write_calibration([entry(1e9)])
    assert [e["peak_flops"] for e in cal.read_calibration()] == [1e9]
    (cache / "calibration.json").write_text(json.dumps({"entries": [{"peak_flops": "fast"}]}))
    with pytest.raises(cal.CalibrationError):
        cal.read_calibration()


def test_measured_peak_is_positive_and_agrees_with_an_independent_timing():
    n = 256
    [e] = cal.calibrate("cpu", threads=1, seconds=0.3, sizes=(n,), dtypes=[torch.float32])
    assert e["threads"] == 1 and e["dtype"] == "float32" and e["device"] == cal.device_name("cpu")
    assert e["torch"] == torch.__version__ and e["date"]
    assert e["peak_flops"] == e["by_size"][str(n)] > 0
    # independent: plain torch.matmul (allocating its output) timed a few times, median
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(prev)
    independent = 2 * n ** 3 / statistics.median(times)
    # the calibration keeps the best repeat, so it is at least about the median, and not absurdly above
    assert independent / 2 < e["peak_flops"] < 50 * independent


def test_bf16_is_calibrated_only_where_it_is_native(monkeypatch):
    import tokenmill.train.device as dev

    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: False)
    assert cal.calibration_dtypes("cpu") == [torch.float32]
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: True)
    assert cal.calibration_dtypes("cpu") == [torch.float32, torch.bfloat16]


def test_bad_arguments_are_user_errors():
    with pytest.raises(cal.CalibrationError, match="--threads"):
        cal.calibrate("cpu", threads=0, seconds=0.1)
    with pytest.raises(cal.CalibrationError, match="--seconds"):
        cal.calibrate("cpu", seconds=0)


def test_cli_calibrate_prints_a_table_and_writes_the_file(cache, monkeypatch):
    monkeypatch.setattr(cal, "CPU_SIZES", (64, 128))
    res = CliRunner().invoke(app, ["calibrate", "--seconds", "0.1", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "float32" in res.output and "peak GFLOP/s" in res.output
    got = cal.read_calibration()
    assert {e["dtype"] for e in got} == {cal.dtype_name(d) for d in cal.calibration_dtypes("cpu")}
    assert all(e["threads"] == 1 and set(e["by_size"]) == {"64", "128"} for e in got)
    bad = CliRunner().invoke(app, ["calibrate", "--threads", "0"])
    assert bad.exit_code == 1 and "--threads" in bad.output


def test_bandwidth_is_a_copy_over_its_time():
    """The STREAM-copy figure: 2 × bytes / seconds, positive and below any plausible machine's 10 TB/s;
    the calibration entry carries it for the roofline of `--device this`."""
    from tokenmill.scaling.calibrate import measure_bandwidth

    bw = measure_bandwidth("cpu", 0.05, mib=16)
    assert 1e8 < bw < 1e13
