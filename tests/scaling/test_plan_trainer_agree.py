"""Every layout `tokenmill plan` can print is one `tokenmill train --nproc N` accepts.

The planner's whole search space (TP × PP × DP × ZeRO 0-3 × checkpointing, sequence parallelism)
is walked for several model sizes and device counts; each candidate's printed settings are
applied to a real run config the way a user pastes them (`--set key=value`), validated as
`tokenmill train` loads a config (RunConfig's validators, the mixture's phases included), and
put through `check_launch`, what `--nproc` runs before torchrun starts. Pure in-process checks."""

import copy
from pathlib import Path

import pytest
import yaml

from tokenmill.config import RunConfig, apply_overrides
from tokenmill.errors import UserError
from tokenmill.model.config import ModelConfig
from tokenmill.scaling.devices import get_device
from tokenmill.scaling.parallel import Layout
from tokenmill.scaling.plan import ARCHS, layout_candidates, make_plan, shape_for_params
from tokenmill.scaling.plan_train import config_lines, set_overrides
from tokenmill.train.layout import check_launch

DEMO = Path(__file__).resolve().parents[2] / "src" / "tokenmill" / "configs" / "demo.yaml"
H100 = get_device("h100")
DEVICES = (1, 2, 8, 64, 512)


def demo_data() -> dict:
    return yaml.safe_load(DEMO.read_text())


def demo_run() -> RunConfig:
    data = demo_data()
    data["model"]["vocab_size"] = data["tokenizer"]["vocab_size"]
    return RunConfig.model_validate(data)


def trainer_verdict(data: dict, model: dict | None, layout: Layout) -> str | None:
    """What `tokenmill train CONFIG --nproc N --set ...` says about the plan's settings: None
    (accepted) or the refusal, through the same config load and launch checks."""
    data = copy.deepcopy(data)
    if model is not None:
        data["model"] = model
        data["mixture"]["phases"] = []  # a --params/--arch plan knows no run's phases
    try:
        run = RunConfig.model_validate(apply_overrides(data, set_overrides(layout)))
        check_launch(run.model, run.train, layout.devices)
    except (ValueError, UserError) as exc:  # pydantic's ValidationError is a ValueError
        return str(exc).splitlines()[0]
    return None


# (name, seq_len, micro_batch, global batch tokens); the demo plans through its run config
SHAPES = [
    ("demo", 256, 8, 2**16),
    ("125m", 1002, 2, 2**19),  # 1002 splits over tp 2, not 4: sequence parallelism off there
    ("1b", 4096, 1, 2**22),
    ("7b", 4096, 1, 2**22),
]


def shape(name: str):
    if name == "demo":
        run = demo_run()
        return run.model, run
    if name == "125m":  # GPT-2 small's shape: 12 heads (tp 1, 2, 4), 12 layers
        return ModelConfig(vocab_size=32000, d_model=768, n_layers=12, n_heads=12, max_seq_len=1024), None
    return (ARCHS["llama2-7b"] if name == "7b" else shape_for_params(1e9)), None


@pytest.mark.parametrize("name, seq_len, micro_batch, batch", SHAPES)
def test_every_candidate_the_planner_keeps_is_accepted_by_the_trainer(name, seq_len, micro_batch, batch):
    cfg, run = shape(name)
    model = None if run is not None else cfg.model_copy(update={"max_seq_len": max(cfg.max_seq_len, seq_len)}).model_dump()
    base = Layout(seq_len=seq_len, micro_batch=micro_batch)
    data = demo_data()
    kept = refused = 0
    for devices in DEVICES:
        every = layout_candidates(cfg, H100, devices, base, batch, 0.4, run, keep_refused=True)
        seen = set()
        for c in every:
            lay = c.layout
            key = (lay.tp, lay.pp, lay.dp, lay.zero, lay.sequence_parallel)
            if key in seen:  # checkpointing on/off: the same layout to the trainer
                continue
            seen.add(key)
            verdict = trainer_verdict(data, model, lay)
            # both ways: what the planner keeps runs, what it drops the trainer refuses
            assert (verdict is None) == (not c.refused), (name, devices, config_lines(lay), verdict, c.refused)
            kept += not c.refused
            refused += bool(c.refused)
            if lay.tp > 1 and seq_len % lay.tp:
                assert not lay.sequence_parallel  # kept with SP off, not dropped
        proposed = layout_candidates(cfg, H100, devices, base, batch, 0.4, run)
        assert [c.layout.model_dump() for c in proposed] == [c.layout.model_dump() for c in every if not c.refused]
    assert kept > 0
    if name != "demo":  # ZeRO 0/1 around tp without pp: proposed before, refused by the trainer
        assert refused > 0


def test_the_planner_no_longer_proposes_zero_1_around_tensor_parallelism():
    cfg = ARCHS["llama2-7b"]
    every = layout_candidates(cfg, H100, 64, Layout(), 2**22, 0.4, keep_refused=True)
    z1 = [c for c in every if c.layout.tp == 8 and c.layout.pp == 1 and c.layout.zero == 1]
    assert z1 and all("zero=1 with tp > 1 and pp = 1" in c.refused[0] for c in z1)
    kept = layout_candidates(cfg, H100, 64, Layout(), 2**22, 0.4)
    assert not [c for c in kept if c.layout.tp > 1 and c.layout.pp == 1 and c.layout.zero <= 1]
    assert [c for c in kept if c.layout.tp == 8 and c.layout.pp == 1 and c.layout.zero == 2]
    assert [c for c in kept if c.layout.tp == 8 and c.layout.pp == 2 and c.layout.zero == 1]  # inside stages: fine


def test_a_fixed_layout_the_trainer_refuses_says_so_and_a_chosen_one_prints_its_config_lines():
    cfg = ARCHS["llama2-7b"]
    plan = make_plan(cfg, 1e12, 64, H100, layout={"tp": 8, "pp": 1, "dp": 8, "zero": 1})
    assert plan.layout is not None and plan.layout["trainer_refuses"]
    assert plan.layout_reasons[0].startswith("TOKENMILL'S TRAINER REFUSES IT: train.parallel.zero=1 with tp > 1")
    seed = make_plan(cfg, 1e12, 512, H100, mfu=0.38)
    assert seed.layout is not None and not seed.layout["trainer_refuses"]
    lay = seed.layout["layout"]
    lines = seed.layout["train_config"]
    assert f"train.parallel.zero: {lay['zero']}" in lines and f"train.parallel.dp: {lay['dp']}" in lines
    assert seed.layout["train_command"].startswith("tokenmill train CONFIG --nnodes 64 --node-rank R --rdzv HOST:PORT --nproc 8 ")
    assert "--nproc 8 --set train.parallel.dp=" in seed.layout["train_command"]
    small = make_plan(cfg, 1e12, 8, H100, layout={"tp": 8, "pp": 1, "dp": 1})
    assert small.layout is not None and small.layout["train_command"].startswith("tokenmill train CONFIG --nproc 8 --set")
    # the trainer's own memory model is shown beside the planner's, with the layout's ZeRO stage
    assert seed.trainer_memory is not None and seed.trainer_memory["zero"] == (lay["zero"] if lay["dp"] > 1 else 0)


def test_the_printed_plan_shows_the_settings_to_paste():
    from typer.testing import CliRunner

    from tokenmill.cli import app

    result = CliRunner().invoke(app, ["plan", "--params", "7e9", "--tokens", "1e12", "--devices", "512", "--device", "h100"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "DP 512, ZeRO-2" in text and "train.parallel.zero: 2" in text and "train.distributed: fsdp" in text
    assert "--set train.parallel.zero=2" in text and "tokenmill trainer per rank" in text
    assert "does not run dp × pp" not in text
