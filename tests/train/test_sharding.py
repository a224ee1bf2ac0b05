"""The sharding report of one process: every parameter whole, block parameters named once."""

from __future__ import annotations

from tokenmill.config import ModelConfig
from tokenmill.model.transformer import Transformer
from tokenmill.train.sharding import local_numel, parameter_layout, sharding_report


def test_an_unwrapped_model_reports_every_parameter_whole_and_blocks_once():
    model = Transformer(ModelConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=4, max_seq_len=16))
    layout = parameter_layout(model)
    assert all(p["placements"] == [] and p["local"] == p["global"] for p in layout.values())
    assert not any(name.startswith("layers.0.") for name in layout)  # named as layers.*.<name>
    assert layout["layers.*.self_attn.qkv_proj.weight"]["global"] == [3 * 32, 32]  # q, k, v fused
    per_block = sum(p.numel() for p in model.layers[0].parameters())
    outside = sum(p["global"][0] * (p["global"][1] if len(p["global"]) > 1 else 1)
                  for n, p in layout.items() if not n.startswith("layers.*."))
    assert outside + 3 * per_block == model.num_params() == local_numel(model)
    assert sharding_report(model)["numel_by_rank"] == [model.num_params()]
