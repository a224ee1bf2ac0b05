"""benchmarks/cuda_path_checks.py end to end in its --smoke mode (tiny shapes on the CPU): every
part runs through the real trainer and writes its checks to the JSON; the GPU figures come from a
lease (benchmarks/lease_issue43_checks.sh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import cuda_path_checks  # noqa: E402


@pytest.mark.slow
def test_every_part_runs_and_passes_its_checks_on_the_cpu(tmp_path):
    """Each part in turn, one of them broken (an unknown name): it records its error, the others
    still run and pass."""
    out = tmp_path / "checks.json"
    names = "forward_clock,no_such_part,probe_cost,rope_phase"
    result = cuda_path_checks.main(["--smoke", "--json", str(out), "--commit", "abc123", "--parts", names])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["commit"] == "abc123" and result["torch"] == __import__("torch").__version__
    parts = result["parts"]
    broken = parts.pop("no_such_part")
    assert broken["ok"] is False and "no_such_part" in broken["error"]
    assert list(parts) == ["forward_clock", "probe_cost", "rope_phase"]
    assert all(p["ok"] for p in parts.values()), {k: p.get("error") for k, p in parts.items()}
    clock = parts["forward_clock"]
    for mode in ("deferred", "immediate"):
        run = clock["trainer"][mode]
        assert run["steps"] == 4 and all(0 < f < s for f, s in zip(run["forward_s"], run["step_s"]))
    paid = parts["probe_cost"]["trainer"]
    assert paid["every_1_probed_steps"] == 4 and paid["every_0_probed_steps"] == 0  # the probe ran where asked
    rope = parts["rope_phase"]
    assert rope["rope_changed"] and rope["recompiles_at_boundary"] >= 1  # longer sequences: a new graph
    assert rope["no_recompiles_within_phases"]
    assert rope["losses_compiled"] == rope["losses_eager"]  # fp32, Dynamo only: the same arithmetic


TINY_1B = ["--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "model.n_heads=4", "--set", "model.n_kv_heads=2",
           "--set", "model.ffn_hidden=64", "--set", "model.max_seq_len=32", "--set", "train.seq_len=32",
           "--set", "train.micro_batch=2", "--set", "train.threads=1"]


def bench_fp8(monkeypatch, *args: str) -> None:
    import bench_fp8 as bench

    monkeypatch.setattr(sys, "argv", ["bench_fp8.py", *args])
    bench.main()


def test_bench_fp8_takes_the_1b_config_one_arm_per_call(tiny_run, tmp_path, monkeypatch):
    """The ~1B lease's two calls (bf16, then fp8 into the same JSON) on the CPU, the model shrunk:
    the second call keeps the first's arm and adds the ratios and issue 43's targets."""
    out = tmp_path / "fp8_1b.json"
    common = ["--smoke-cpu", "--run", str(tiny_run.path), "--config", str(ROOT / "benchmarks/configs/gpu_1b.yaml"),
              "--steps", "3", "--warmup", "1", "--eval-docs", "2", "--json", str(out), "--commit", "c1", *TINY_1B]
    bench_fp8(monkeypatch, *common, "--arms", "bf16")
    first = json.loads(out.read_text())
    assert list(first["arms"]) == ["bf16"] and "fp8_over_bf16" not in first
    assert first["shape"]["activation_checkpointing"] == "selective"  # gpu_1b.yaml's recipe, not the run's
    assert first["config"].endswith("gpu_1b.yaml") and 0 < first["arms"]["bf16"]["epochs"] < 1
    bench_fp8(monkeypatch, *common, "--arms", "fp8")
    both = json.loads(out.read_text())
    assert both["arms"]["bf16"] == first["arms"]["bf16"] and both["arms"]["fp8"]["steps"] == 3
    assert set(both["fp8_over_bf16"]) >= {"speedup_tokens_per_s", "target_speedup_1_2", "target_loss_within_1pct"}
    with pytest.raises(SystemExit, match="written by another comparison \\(steps differ\\)"):
        bench_fp8(monkeypatch, *[a if a != "3" else "4" for a in common], "--arms", "fp8")
