"""The base of every stage's config model, and the error a config that cannot be used raises."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tokenmill.errors import UserError


class ConfigError(UserError, ValueError):
    """A config file or override that cannot be used; the message names the file and key."""


class Strict(BaseModel):
    """Base for config sections: unknown keys are errors, not silently ignored typos."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# pydantic's range errors, said as the bound the field must keep
_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", "≥"),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "≤"),
}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_problem(e: Any) -> str:
    """One pydantic error as `dotted.field: what is wrong (got value)`."""
    key = ".".join(str(p) for p in e["loc"])
    kind = e["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key"
    if kind in _BOUNDS:
        name, sign = _BOUNDS[kind]
        return f"{key}: must be {sign} {e['ctx'][name]} (got {_short(e['input'])})"
    msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind != "missing" and not isinstance(e.get("input"), (dict, list)) and "input" in e:
        msg += f" (got {_short(e['input'])})"
    # a check over a whole section or config names its fields itself
    return msg if not e["loc"] or f"{key}." in msg else f"{key}: {msg}"


def config_problem(exc: Exception, origin: str) -> str:
    """One line for a config file that cannot be read or validated: each pydantic problem with its
    dotted field, a YAML or OS error with its whitespace folded."""
    if isinstance(exc, ValidationError):
        return format_validation_error(exc, origin)
    return f"{origin}: " + " ".join(str(exc).split())


def format_validation_error(err: ValidationError, origin: str) -> str:
    """Every problem of a config on one line, each naming its dotted field: the CLI prints it as is."""
    problems = [field_problem(e) for e in err.errors()]
    return f"{origin}: " + "; ".join(" ".join(p.split()) for p in problems)
