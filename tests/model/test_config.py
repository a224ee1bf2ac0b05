"""ModelConfig (model/config.py): every field described, the RoPE options validated."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tokenmill.model.config import ModelConfig


def test_every_field_has_a_description():
    assert all(f.description for f in ModelConfig.model_fields.values())


def test_rope_options():
    cfg = ModelConfig(rope_scaling="yarn", rope_scaling_factor=4.0, rope_original_max_seq_len=256, max_seq_len=1024)
    assert (cfg.rope_scaling, cfg.rope_original_max_seq_len) == ("yarn", 256)
    assert ModelConfig().rope_original_max_seq_len is None  # derived from max_seq_len / factor when unset
    with pytest.raises(ValidationError):
        ModelConfig(rope_scaling="dynamic")
    with pytest.raises(ValidationError):
        ModelConfig(rope_original_max_seq_len=0)
