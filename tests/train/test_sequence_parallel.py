"""Sequence parallelism on the tensor-parallel axis (train.parallel.sequence_parallel). One real
2-rank gloo run of tests/train/sp_probe.py (its main() on 2 forked processes, which need not import
torch again as torchrun's fresh ones would) checks the sharded model against the whole one
(per-token NLL of a document-masked batch, the norm gains' gradients), that the norms see only
their rank's [B, T/tp, d] tokens while the FFN sees the whole sequence, and that the activation
bytes it saves are what scaling/memory.py subtracts for it. The trainer's losses, placements and
resume under SP are the tensor-parallel tests' (test_tensor_parallel.py, test_pipeline_parallel.py
tp2 × pp2): SP is on there by default."""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest
from torch.distributed.tensor.parallel import PrepareModuleInput, RowwiseParallel, SequenceParallel

from tokenmill.config import ConfigError, ModelConfig, TrainConfig, load_config
from tokenmill.model.transformer import Block
from tokenmill.scaling.memory import layer_activation_bytes
from tokenmill.scaling.rank_memory import estimate_rank_memory
from tokenmill.train.layout import LayoutError, check_launch, layout_problems
from tokenmill.train.tensor_parallel import block_plan


PROBE = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32)  # sp_probe.py's
B, T, D = 4, 32, 32


def _probe_rank(rank: int, out: str, port: int) -> None:
    """One forked rank: the environment torchrun would give it, then the probe's main()."""
    import torch

    from tests.train import sp_probe

    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"})
    torch.set_num_threads(1)
    sys.argv = ["sp_probe.py", out]
    sp_probe.main()


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> list[dict]:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("sp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_probe_rank, args=(str(out), port), nprocs=2, join=True, start_method="fork")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_sequence_parallel_blocks_compute_what_the_whole_model_does(probe):
    for rank in probe:
        for case in ("sp=True torch.float32", "sp=True torch.bfloat16", "sp=False torch.float32"):
            assert rank[case]["nll_ok"] and rank[case]["norm_grads_ok"], (case, rank[case]["nll_max_diff"])
        for norm in ("rmsnorm", "layernorm"):  # QK-norm gains, shared by the heads tp splits: gradients summed over tp
            assert rank[f"qk_norm {norm} sp=False"] and rank[f"qk_norm {norm} sp=True"]
        assert rank["odd_rows"] == "sequence parallelism over tp=2 needs rows whose length divides by 2, got 31 tokens"


def test_the_norms_hold_their_ranks_tokens_and_the_ffn_the_whole_sequence(probe):
    for rank in probe:
        on, off = rank["sp=True torch.float32"]["shapes"], rank["sp=False torch.float32"]["shapes"]
        for i in range(PROBE.n_layers):
            for norm in ("input_layernorm", "post_attention_layernorm"):
                assert on[f"layers.{i}.{norm}"] == [B, T // 2, D] and off[f"layers.{i}.{norm}"] == [B, T, D]
            assert on[f"layers.{i}.mlp"] == off[f"layers.{i}.mlp"] == [B, T, D]  # all-gathered before the FFN


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_saved_activations_shrink_by_what_the_memory_model_says(probe, dtype):
    """Per block on each rank: SP saves exactly the estimate's difference (the norms' inputs, their
    normalised values and statistics, /tp); both stay within 10% of the estimate (the per-row RoPE
    tables and masks that the estimate counts once per forward show up in each block here)."""
    est = {sp: layer_activation_bytes(PROBE, B, T, dtype, True, "cpu", tp=2, sequence_parallel=sp) for sp in (True, False)}
    for rank in probe:
        got = {sp: rank[f"sp={sp} torch.{dtype}"]["saved_per_block"] for sp in (True, False)}
        for on, off in zip(got[True], got[False]):
            assert off - on == est[False] - est[True] > 0
            assert est[True] <= on <= 1.1 * est[True]


def test_the_plan_splits_norms_and_gathers_before_each_tensor_parallel_region():
    plan = block_plan(Block(PROBE), sequence_parallel=True)
    assert {n for n, s in plan.items() if isinstance(s, SequenceParallel)} == {"input_layernorm", "post_attention_layernorm"}
    assert {n for n, s in plan.items() if isinstance(s, PrepareModuleInput)} == {"self_attn", "mlp"}
    assert all(s.output_layouts[0].is_shard(1) for s in plan.values() if isinstance(s, RowwiseParallel))
    assert not any(isinstance(s, (SequenceParallel, PrepareModuleInput)) for s in block_plan(Block(PROBE)).values())


def test_rows_that_do_not_split_over_tp_are_refused_before_launch():
    train = TrainConfig(seq_len=31, micro_batch=2, parallel={"tp": 2})
    (problem,) = layout_problems(PROBE, train)
    assert "train.parallel.sequence_parallel" in problem and "train.seq_len=31" in problem and "\n" not in problem
    with pytest.raises(LayoutError, match="sequence_parallel"):
        check_launch(PROBE, train, 2)
    assert layout_problems(PROBE, train.model_copy(update={"parallel": train.parallel.model_copy(update={"sequence_parallel": False})})) == []


def test_a_phase_whose_rows_do_not_split_fails_the_config_in_one_line(tmp_path):
    overrides = ["model.max_seq_len=64", "train.seq_len=32", "train.parallel.tp=2", "model.n_kv_heads=2"]
    cfg = tmp_path / "run.yaml"
    cfg.write_text("mixture:\n  phases:\n    - {name: short, fraction: 0.5, seq_len: 15}\n    - {name: main, fraction: 0.5}\n")
    with pytest.raises(ConfigError, match=r"a mixture.phases\[\].seq_len=15 is not a multiple of 2") as err:
        load_config(cfg, overrides)
    assert "\n" not in str(err.value)
    assert load_config(cfg, [*overrides, "train.parallel.sequence_parallel=false"]).train.parallel.tp == 2


def test_rank_memory_counts_sequence_parallel_only_when_the_trainer_runs_it():
    cfg = PROBE.model_copy(update={"vocab_size": 512, "d_model": 128, "max_seq_len": 128})
    on = TrainConfig(micro_batch=8, seq_len=128, parallel={"tp": 2})
    off = on.model_copy(update={"parallel": on.parallel.model_copy(update={"sequence_parallel": False})})
    with_sp, without = (estimate_rank_memory(cfg, tc, "bfloat16", tp=2)["activations"] for tc in (on, off))
    saved = 2 * (4 * 8 * 128 * 128 * 2 + 4 * 8 * 128) // 2  # two norms' input, normalised value, rsqrt: half each
    assert without - with_sp == cfg.n_layers * saved
    assert estimate_rank_memory(cfg, on, "bfloat16")["activations"] == estimate_rank_memory(cfg, off, "bfloat16")["activations"]
    # checkpointed: every block keeps half its fp32 input, except the first, which splits it itself
    ckpt_on, ckpt_off = (tc.model_copy(update={"activation_checkpointing": True}) for tc in (on, off))
    with_sp, without = (estimate_rank_memory(cfg, tc, "bfloat16", tp=2)["activations"] for tc in (ckpt_on, ckpt_off))
    assert without - with_sp == (cfg.n_layers - 1) * 4 * 8 * 128 * 128 // 2
