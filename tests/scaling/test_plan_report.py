"""`tokenmill plan` through the CLI: the text tables and `--json` carry the same figures, the seeds'
examples run, and user errors exit 1 with a message instead of a traceback."""

import json

import pytest
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.scaling.devices import GB, get_device
from tokenmill.scaling.plan import make_plan, resolve_inputs
from tokenmill.scaling.plan_report import figures_rows, layout_rows, sci

runner = CliRunner()
SEED_002 = ["plan", "--params", "7e9", "--tokens", "1e12", "--devices", "512", "--device", "h100", "--mfu", "0.38"]


def run(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def test_text_and_json_agree():
    data = json.loads(run([*SEED_002, "--json"]))
    text = run(SEED_002)
    assert data["flops_6nd"] == pytest.approx(4.2e22)
    assert 2 <= data["wall_clock_days"] <= 4
    lay, mem = data["layout"]["layout"], data["layout"]["memory_bytes"]
    for figure in (sci(data["flops_6nd"]), sci(data["flops_exact"]), f"{data['wall_clock_days']:.3g} days",
                   f"{data['steps']:,}", f"${data['cost_usd']:,.0f}", sci(data["chinchilla"]["compute_optimal_params"]),
                   f"TP {lay['tp']} × PP {lay['pp']} × DP {lay['dp']}, ZeRO-{lay['zero']}",
                   f"{mem['total'] / GB:.2f} GB of 80 GB", *data["assumptions"][:2]):
        assert figure in text, figure
    assert mem["total"] == pytest.approx(sum(v for k, v in mem.items() if k != "total"))


def test_flops_budget_and_inference_aware_json():
    data = json.loads(run(["plan", "--flops", "1e22", "--inference-tokens", "1e12", "--json"]))
    assert round(data["params"] / 1e9, 1) == 9.1 and data["tokens"] == pytest.approx(182e9, rel=0.01)
    aware = data["inference_aware"]
    assert aware["params"] < data["params"] and aware["tokens"] > data["tokens"]
    # same loss for less training + inference compute than serving the compute-optimal model
    assert aware["total_flops"] < aware["total_flops_of_plan"] == pytest.approx(1e22 + 2 * data["params"] * 1e12)


def test_seed_004_layout_on_the_command_line():
    args = ["plan", "--arch", "llama2-70b", "--tokens", "2e12", "--devices", "64", "--device", "h100", "--seq-len",
            "8192", "--tp", "8", "--pp", "2", "--dp", "4", "--zero", "1", "--checkpointing", "--micro-batch", "3",
            "--no-master-weights", "--no-sequence-parallel"]
    data = json.loads(run([*args, "--json"]))
    assert data["layout"]["memory_bytes"]["total"] / GB == pytest.approx(62, rel=0.10)
    assert "TP 8 × PP 2 × DP 4, ZeRO-1" in run(args)


def test_config_route(tmp_path):
    data = json.loads(run(["plan", "--config", "examples/tiny.yaml", "--devices", "1", "--device", "h100",
                           "--set", "train.max_tokens=512000", "--json"]))
    assert data["tokens"] == 512000 and data["seq_len"] == 64 and data["layout"]["layout"]["dp"] == 1


@pytest.mark.parametrize("args, message", [
    (["plan"], "give the model"),
    (["plan", "--params", "7e9", "--device", "tpu"], "unknown device"),
    (["plan", "--params", "7e9", "--mfu", "1.5"], "--mfu"),
    (["plan", "--arch", "llama2-70b", "--devices", "8", "--device", "a100-40gb", "--seq-len", "8192"], "no layout fits"),
])
def test_user_errors_exit_1(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and message in result.output, result.output


def test_rows_format_the_plan():
    inputs = resolve_inputs(params=7e9, tokens=1e12)
    plan = make_plan(inputs.cfg, inputs.tokens, 512, get_device("h100"), n_params=7e9)
    rows = dict(figures_rows(plan))
    assert rows["training FLOPs 6ND"] == "4.2e+22" and rows["parameters N"] == "7e+09"
    assert "of 80 GB" in dict(layout_rows(plan))["memory per device"]


def test_no_layout_fits_still_prints_the_plan_and_the_fewest_devices():
    # 32, not the Megatron-style model's 24: tokenmill's trainer (fp32 master weights gathered
    # by FSDP, whole projection inputs) must fit too, and needs 70.5 GB on 32 H100s
    result = runner.invoke(app, ["plan", "--params", "70e9", "--tokens", "2e12"])
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    for text in ("training FLOPs 6ND", "wall-clock", "cost", "no layout fits h100", "fewest devices that fit: 32 × h100"):
        assert text in out, text


def test_the_predicted_loss_comes_with_what_it_was_fitted_on_and_a_flag_outside_its_range():
    inside = resolve_inputs(params=1e9, tokens=2e10)  # 1B parameters on 20B tokens: among Chinchilla's runs
    rows = dict(figures_rows(make_plan(inside.cfg, inside.tokens, 8, get_device("h100"), n_params=1e9)))
    assert "Hoffmann et al. 2022" in rows["  fitted on"] and "70M–16B parameters" in rows["  fitted on"]
    assert "depends on the tokenizer" in rows["  fitted on"]
    assert rows["  extrapolation"].startswith("within the fit's range")
    assert "NOT a prediction" not in rows["predicted loss (Chinchilla fit)"]

    small = resolve_inputs(params=3.5e4, tokens=1e9)  # a CPU-sized model: 2,000× below the smallest fitted
    plan = make_plan(small.cfg, small.tokens, 1, get_device("h100"), n_params=3.5e4)
    rows = dict(figures_rows(plan))
    assert "NOT a prediction for this run" in rows["predicted loss (Chinchilla fit)"]
    assert rows["  extrapolation"] == (
        "outside the fit's range: N = 3.5e+04, 2,000× fewer parameters than its smallest model (7e+07); "
        "D = 1e+09, 5× fewer tokens than its shortest run (5e+09) — not a prediction for this run")


def test_the_console_plan_prints_the_provenance():
    text = " ".join(run(["plan", "--params", "5e6", "--tokens", "1e8", "--device", "h100", "--devices", "1"]).split())
    assert "fitted on" in text and "MassiveText" in text and "14× fewer parameters than its smallest model" in text
