"""train.fp8: refused in one line where it cannot run (a CPU, fp32, tensor/pipeline parallelism);
the conversion swaps exactly the blocks' projections, and its checkpoints load without torchao.

torchao converts and runs Float8Linear on the CPU too (its FP8 matmul is emulated there), so the
conversion tests run here when torchao is installed (the `fp8` extra); the speed and the loss
against bf16 are a GPU measurement (benchmarks/bench_fp8.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from tokenmill.config import RunConfig
from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.runs import RunDir, read_events
from tokenmill.train.checkpoint import load_model_tensors, model_tensors
from tokenmill.train.config import TrainConfig
from tokenmill.train.fp8 import fp8_launch_problem, is_fp8_linear

from tests.adversarial.conftest import assert_clean_error, run_cli

PROJECTIONS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


def small(**model) -> Transformer:
    cfg = ModelConfig(
        **{"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32, "vocab_size": 96, **model}
    )
    return Transformer(cfg, generator=torch.Generator().manual_seed(5))


def test_a_cpu_run_with_fp8_is_refused_in_one_line(tiny_run):
    result = run_cli("train", tiny_run.path / "config.yaml", "--set", "train.fp8=true", "--set", "train.dtype=bfloat16")
    assert_clean_error(result, "train.fp8 needs a CUDA GPU with FP8 matmuls", "this run is on cpu", max_lines=2)
    assert not (tiny_run.path / "checkpoints").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dtype": "float32"}, "not with train.dtype=float32"),
        ({"parallel": {"tp": 2}}, "not supported with train.parallel.tp > 1 or pp > 1"),
        ({"parallel": {"pp": 2}}, "not supported with train.parallel.tp > 1 or pp > 1"),
        ({"micro_batch": 3, "seq_len": 5}, "multiple of 16"),
    ],
)
def test_configs_fp8_cannot_run_are_refused_at_validation(fields, message):
    with pytest.raises(ValidationError, match=message):
        TrainConfig(fp8=True, **fields)
    TrainConfig(fp8=False, **fields)  # each is fine without fp8


def test_the_launch_check_names_the_device_and_the_dtype():
    assert "this run is on cpu" in (fp8_launch_problem(torch.device("cpu"), torch.bfloat16) or "")
    if torch.cuda.is_available():  # on a GPU: the capability, the dtype, or nothing
        problem = fp8_launch_problem(torch.device("cuda"), torch.float32)
        assert problem is not None and ("compute capability" in problem or "bf16 autocast" in problem)


def test_the_filter_takes_block_projections_with_dims_divisible_by_16():
    assert is_fp8_linear(nn.Linear(64, 192), "layers.3.self_attn.qkv_proj")
    assert is_fp8_linear(nn.Linear(256, 64), "layers.0.mlp.down_proj")
    assert not is_fp8_linear(nn.Linear(40, 64), "layers.0.mlp.down_proj")  # 40 % 16
    assert not is_fp8_linear(nn.Linear(64, 96 + 8), "layers.0.mlp.gate_up_proj")
    assert not is_fp8_linear(nn.Linear(64, 128), "lm_head")
    assert not is_fp8_linear(nn.Linear(64, 16), "layers.0.mlp.router")
    assert not is_fp8_linear(nn.Linear(64, 128), "layers.0.mlp.experts.1.gate_up_proj")
    assert not is_fp8_linear(nn.Embedding(64, 128), "layers.0.mlp.down_proj")


@pytest.mark.parametrize("model", [{}, {"tie_embeddings": False, "ffn": "gelu"}, {"n_experts": 4}])
def test_conversion_swaps_exactly_the_projections_and_keeps_the_names(model):
    pytest.importorskip("torchao.float8", reason="torchao is not installed (pip install 'tokenmill[fp8]')")
    from torchao.float8.float8_linear import Float8Linear

    from tokenmill.train.fp8 import convert_to_fp8

    m = small(**model)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    converted = convert_to_fp8(m)
    swapped = sorted(n for n, mod in m.named_modules() if isinstance(mod, Float8Linear))
    suffixes = PROJECTIONS if not model else ("self_attn.qkv_proj", "self_attn.o_proj")
    if model.get("ffn") == "gelu":
        suffixes = (*suffixes, "mlp.up_proj", "mlp.down_proj")
    assert swapped == sorted(converted) == sorted(f"layers.{i}.{s}" for i in range(2) for s in suffixes)
    assert type(m.lm_head) is nn.Linear or m.lm_head is None
    after = m.state_dict()
    assert list(after) == list(before)  # same names, nothing added (tensorwise scaling keeps no state)
    assert all(torch.equal(after[k], before[k]) and after[k].dtype == torch.float32 for k in before)


def test_a_trained_fp8_models_checkpoint_loads_without_fp8():
    pytest.importorskip("torchao.float8", reason="torchao is not installed (pip install 'tokenmill[fp8]')")
    from tokenmill.train.fp8 import convert_to_fp8

    m = small(tie_embeddings=False)
    convert_to_fp8(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    x = torch.randint(0, 96, (2, 32), generator=torch.Generator().manual_seed(1))
    for _ in range(3):  # FP8 forward and backward, bf16 autocast as in training
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = m(x)
        loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert torch.isfinite(loss)
    stored = st_load(st_save(model_tensors(m)))  # what a checkpoint's model.safetensors holds
    plain = small(tie_embeddings=False)
    assert not torch.equal(plain.layers[0].mlp.down_proj.weight, m.layers[0].mlp.down_proj.weight)  # it trained
    load_model_tensors(plain, stored, origin=Path("fp8-run"))
    for name, t in m.state_dict().items():
        assert torch.equal(plain.state_dict()[name], t), name


def fp8_run(run: RunDir, dest: Path, **train) -> RunDir:
    shutil.copytree(run.path, dest)
    data = run.config.model_dump()
    # 8 steps, not the fixture's 30: torchao's FP8 matmul on a CPU is an emulation (28 ms for a 32-wide
    # projection on a Xeon, 100 s for this test at 30 steps), and a crash at step 6, between the
    # checkpoints of steps 4 and 8, needs only 8
    recipe = {"dtype": "bfloat16", "compile": False, "max_steps": 8, "warmup_steps": 2, "ckpt_every": 4, "eval_every": 6}
    data["train"].update({**recipe, "log_every": 2, **train})
    return RunDir.create(RunConfig.model_validate(data), dest)


def step_losses(run: RunDir) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"}


@pytest.mark.slow
def test_an_fp8_run_resumes_exactly_and_its_checkpoint_loads_without_fp8(tiny_run, tmp_path, monkeypatch):
    """The real trainer with train.fp8 on the CPU (the launch check, which refuses the CPU, let
    through: torchao emulates FP8 matmuls here): a crash and resume replays every step."""
    pytest.importorskip("torchao.float8", reason="torchao is not installed (pip install 'tokenmill[fp8]')")
    import tokenmill.train.trainer as trainer

    monkeypatch.setattr(trainer, "fp8_launch_problem", lambda device, dtype: None)
    reference = fp8_run(tiny_run, tmp_path / "ref", fp8=True)
    trainer.run_train(reference, progress=False)
    crashing = fp8_run(tiny_run, tmp_path / "crash", fp8=True)

    def crash(step, model):
        if step == 6:  # past the step-4 checkpoint: the resume replays steps 5 and 6
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated"):
        trainer.run_train(crashing, on_eval=crash, progress=False)
    trainer.run_train(crashing, resume=True, progress=False)
    assert step_losses(crashing) == step_losses(reference)
    for name in ("model.safetensors", "optim.pt"):
        ours = (crashing.path / "checkpoints" / "step_8" / name).read_bytes()
        assert ours == (reference.path / "checkpoints" / "step_8" / name).read_bytes(), name
    converted = [e for e in read_events(reference.path / "events.jsonl") if e["kind"] == "fp8"]
    assert converted and len(converted[0]["converted"]) == 8  # 4 projections × 2 blocks
    bf16 = fp8_run(tiny_run, tmp_path / "bf16", fp8=False, max_steps=1, eval_every=0)
    trainer.run_train(bf16, progress=False)
    assert step_losses(bf16)[1] != step_losses(reference)[1]  # the FP8 matmuls did run (step 1's forward)
    plain = Transformer(reference.config.model.model_copy(update={"vocab_size": 64}))
    stored = st_load((reference.path / "checkpoints" / "step_8" / "model.safetensors").read_bytes())
    load_model_tensors(plain, stored, origin=reference.path)  # no Float8Linear, same names
