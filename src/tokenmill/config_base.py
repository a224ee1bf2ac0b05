"""The base of every stage's config model, and the error a config that cannot be used raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tokenmill.errors import UserError


class ConfigError(UserError, ValueError):
    """A config file or override that cannot be used; the message names the file and key."""


class Strict(BaseModel):
    """Base for config sections: unknown keys are errors, not silently ignored typos."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
