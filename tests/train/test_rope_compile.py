"""RoPE tables rebuilt at a curriculum phase boundary under torch.compile (issue 43): the compiled
model must read the new tables (not constants baked in at its first trace) and recompile a bounded
number of times, not once per step. Dynamo alone (a counting backend, no Inductor): the guards and
the recompiles are Dynamo's whatever backend builds the kernels; benchmarks/cuda_path_checks.py
checks the same through the real trainer with Inductor on a GPU."""

from __future__ import annotations

import torch

from tokenmill.model.config import ModelConfig
from tokenmill.model.rope import phase_model_configs
from tokenmill.model.transformer import Transformer


def test_a_compiled_model_follows_tables_rebuilt_at_phase_boundaries():
    torch._dynamo.reset()
    short = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=16)
    model = Transformer(short, generator=torch.Generator().manual_seed(0)).eval()
    graphs: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(model, backend=counting)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    long_ids = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        first = compiled(ids)
        for _ in range(3):  # steps inside a phase reuse the graph
            torch.testing.assert_close(compiled(ids), model(ids))
        assert len(graphs) == 1
        # A base-frequency change at the same length: same shapes, new values in the tables.
        model.set_rope(short.model_copy(update={"rope_theta": 100.0}))
        rethought = compiled(ids)
        torch.testing.assert_close(rethought, model(ids))
        assert (rethought - first).abs().max() > 1e-4  # 10x assert_close's atol: the new tables were read
        # A context-extension phase: twice the length with YaRN, longer tables.
        [long] = phase_model_configs(short, [(32, {"rope_scaling": "yarn", "rope_scaling_factor": 2.0})])
        model.set_rope(long)
        for _ in range(3):
            torch.testing.assert_close(compiled(long_ids), model(long_ids))
    assert model.rope_cos.shape[0] == 32
    assert len(graphs) <= 3, f"{len(graphs)} graphs: recompiling per step, not per phase"
