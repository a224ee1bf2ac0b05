import pytest
import torch

from tokenmill.train import device as device_mod
from tokenmill.train.device import autocast, cpu_has_native_bf16, enable_tf32, resolve_device, resolve_dtype


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    with pytest.raises(ValueError, match="not a device"):
        resolve_device("quantum")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda:0")


def _cpuinfo_flags() -> set[str]:
    for line in open("/proc/cpuinfo", encoding="utf-8", errors="replace"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_native_bf16_detection_agrees_with_the_cpu_flags():
    flags = _cpuinfo_flags()
    assert cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)


def test_auto_dtype_is_bf16_only_on_cpus_with_native_bf16(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(device_mod, "cpu_has_native_bf16", lambda: True)
    assert resolve_dtype(cpu, "auto") == torch.bfloat16
    monkeypatch.setattr(device_mod, "cpu_has_native_bf16", lambda: False)
    assert resolve_dtype(cpu, "auto") == torch.float32


def test_resolve_dtype():
    cpu = torch.device("cpu")
    assert resolve_dtype(cpu, "bfloat16") == torch.bfloat16
    assert resolve_dtype(cpu, "float32") == torch.float32
    with pytest.raises(ValueError):
        resolve_dtype(cpu, "fp8")


def test_autocast_fp32_is_a_no_op_and_bf16_casts_matmuls():
    cpu = torch.device("cpu")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(cpu, "float32"):
        assert (a @ b).dtype == torch.float32
        assert not torch.is_autocast_enabled("cpu")
    with autocast(cpu, "bfloat16"):
        assert (a @ b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32  # restored on exit


def test_enable_tf32_leaves_cpu_settings_alone():
    before = torch.backends.cuda.matmul.allow_tf32
    enable_tf32(torch.device("cpu"))
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_torch_threads_sets_the_count_inside_and_restores_it_after():
    from tokenmill.train.device import torch_threads

    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    with torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    with torch_threads(None):  # None: torch's default is left alone
        assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(other):
        raise RuntimeError("restored even when the block fails")
    assert torch.get_num_threads() == before
