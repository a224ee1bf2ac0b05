"""benchmarks/cuda_path_checks.py end to end in its --smoke mode (tiny shapes on the CPU): every
part runs through the real trainer and writes its checks to the JSON; the GPU figures come from a
lease (benchmarks/lease_issue43_checks.sh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import cuda_path_checks  # noqa: E402


def test_every_part_runs_and_passes_its_checks_on_the_cpu(tmp_path):
    out = tmp_path / "checks.json"
    result = cuda_path_checks.main(["--smoke", "--json", str(out), "--commit", "abc123"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["commit"] == "abc123" and result["torch"] == __import__("torch").__version__
    parts = result["parts"]
    assert list(parts) == ["forward_clock", "probe_cost", "rope_phase"]
    assert all(p["ok"] for p in parts.values()), {k: p.get("error") for k, p in parts.items()}
    clock = parts["forward_clock"]
    assert clock["trainer_steps"] > 0 and all(0 < f < s for f, s in zip(clock["trainer_forward_s"], clock["trainer_step_s"]))
    rope = parts["rope_phase"]
    assert rope["rope_changed"] and rope["recompiles_at_boundary"] >= 1  # longer sequences: a new graph
    assert rope["losses_compiled"] == rope["losses_eager"]  # fp32, Dynamo only: the same arithmetic


def test_a_part_that_fails_keeps_the_others_results(tmp_path):
    out = tmp_path / "checks.json"
    result = cuda_path_checks.main(["--smoke", "--json", str(out), "--parts", "no_such_part,probe_cost"])
    parts = json.loads(out.read_text())["parts"]
    assert parts == json.loads(json.dumps(result["parts"]))
    assert parts["no_such_part"]["ok"] is False and "no_such_part" in parts["no_such_part"]["error"]
    assert parts["probe_cost"]["ok"] is True and parts["probe_cost"]["repeats"] == 3
