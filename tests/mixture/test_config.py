"""MixtureConfig (mixture/config.py): phases partition the budget; a phase's RoPE is validated."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tokenmill.mixture.config import MixtureConfig, PhaseConfig, PhaseRopeConfig, ReplayConfig


def test_every_field_has_a_description():
    for model in (MixtureConfig, PhaseConfig, PhaseRopeConfig, ReplayConfig):
        assert all(f.description for f in model.model_fields.values()), model.__name__


def test_a_phase_names_its_rope_and_bad_values_are_refused():
    m = MixtureConfig(phases=[{"name": "short", "fraction": 0.9},
                              {"name": "long", "fraction": 0.1, "seq_len": 1024,
                               "rope": {"rope_scaling": "yarn", "rope_scaling_factor": 4}}])
    assert m.phases[0].rope is None and m.phases[1].rope.rope_scaling == "yarn"
    assert m.phases[1].rope.model_dump(exclude_none=True) == {"rope_scaling": "yarn", "rope_scaling_factor": 4.0}
    for bad in ({"rope_scaling": "dynamic"}, {"rope_scaling_factor": 0}, {"rope_theta": -1}, {"theta": 5e5}):
        with pytest.raises(ValidationError):
            PhaseConfig(name="long", fraction=1.0, rope=bad)
    with pytest.raises(ValidationError, match="sum to 1"):
        MixtureConfig(phases=[{"name": "a", "fraction": 0.5}])
