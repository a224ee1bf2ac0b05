"""The base of every stage's config model, and the error a config that cannot be used raises."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Sequence

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


def _models_in(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """The config models a field holds (itself, or inside Optional[...], list[...], dict[..., ...]),
    and whether they sit in a container (an error's location then has an index or key next)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    origin = typing.get_origin(annotation)
    found: list[type[BaseModel]] = []
    contained = origin in (list, dict, tuple, set, frozenset)
    if origin is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            models, inner = _models_in(arg)
            found += models
            contained = contained or inner
    return found, contained


def keys_at(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The valid keys of the section at `loc` (a pydantic error's location without its last part);
    [] where the path does not lead to a config section."""
    models, contained = [model], False
    for part in loc:
        if contained:  # a list index or a dict key: the same models hold the item
            contained = False
            continue
        if not any(part in m.model_fields for m in models):
            return []
        found = [_models_in(m.model_fields[part].annotation) for m in models if part in m.model_fields]
        models = [sub for subs, _ in found for sub in subs]
        contained = any(inner for _, inner in found)
        if not models:
            return []
    return [] if contained else sorted({k for m in models for k in m.model_fields})


def close_keys(key: str, valid: Sequence[str]) -> list[str]:
    """The valid keys a typo most likely meant: difflib's similarity ≥ 0.6, nearest first, and only
    those about as near as the nearest (max_stpes gets max_steps, not also max_tokens); at most three."""
    scored = sorted(((difflib.SequenceMatcher(None, key, k).ratio(), k) for k in valid), key=lambda rk: (-rk[0], rk[1]))
    best = scored[0][0] if scored else 0.0
    return [k for r, k in scored if r >= 0.6 and r >= best - 0.05][:3]


def _did_you_mean(e: Any, model: type[BaseModel] | None, prefix: str) -> str:
    """' (did you mean max_steps?)' for an unknown key with near valid ones, else ''."""
    loc = e["loc"]
    if model is None or not loc or not isinstance(loc[-1], str):
        return ""
    near = close_keys(loc[-1], keys_at(model, loc[:-1]))
    return f" (did you mean {' or '.join(prefix + k for k in near)}?)" if near else ""


def field_problem(e: Any, model: type[BaseModel] | None = None, full_keys: bool = False) -> str:
    """One pydantic error as `dotted.field: what is wrong (got value)`; an unknown key names the
    valid keys nearest it, where `model` (the config validated) is known: as the key under its
    section (what a file's author edits), or with `full_keys` as the whole dotted path (what a
    `--set` takes)."""
    key = ".".join(str(p) for p in e["loc"])
    kind = e["type"]
    if kind == "extra_forbidden":
        section = ".".join(str(p) for p in e["loc"][:-1])
        return f"{key}: unknown key" + _did_you_mean(e, model, f"{section}." if full_keys and section else "")
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


def model_named(title: str) -> type[BaseModel] | None:
    """The config model a ValidationError's title names (None when no Strict model, or several, has
    that name): what lets an error raised anywhere suggest the keys its section has."""
    found: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [Strict]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__name__ == title and cls not in found:
            found.append(cls)
    return found[0] if len(found) == 1 else None


def _override_of(e: Any, overrides: Sequence[tuple[list[str], str]]) -> tuple[list[str], str] | None:
    """The last override that set the value the error is about: its key path starts the error's
    location, or (an unknown key) the override created that key on its way down (`--set
    trian.max_steps=5` makes the section `trian`)."""
    loc = [str(p) for p in e["loc"]]
    hit = None
    for path, text in overrides:
        if loc[: len(path)] == path or (e["type"] == "extra_forbidden" and loc and path[: len(loc)] == loc):
            hit = (path, text)
    return hit


def format_validation_error(
    err: ValidationError,
    origin: str,
    overrides: Sequence[tuple[list[str], str]] = (),
    model: type[BaseModel] | None = None,
) -> str:
    """Every problem of a config on one line, each naming its dotted field: the CLI prints it as is.

    A problem under a key a command-line override set is blamed on that override (`--set
    train.max_stpes=5: unknown key`), not on the file: `overrides` pairs each override's key path
    with how the user wrote it. The rest are the file's (`origin`)."""
    model = model or model_named(err.title)
    mine: list[str] = []
    theirs: dict[str, list[str]] = {}
    for e in err.errors():
        hit = _override_of(e, overrides)
        if hit is None:
            mine.append(" ".join(field_problem(e, model).split()))
            continue
        path, by = hit
        # a key the override's path names is typed whole on the command line; one inside the value
        # it wrote (`--set curate.sources=[{...}]`) is typed as the key alone
        problem = field_problem(e, model, full_keys=len(e["loc"]) <= len(path))
        if len(path) == len(e["loc"]):  # the override's own text names the key: say only what is wrong
            problem = problem.removeprefix(".".join(path) + ": ")
        theirs.setdefault(by, []).append(" ".join(problem.split()))
    parts = [f"{origin}: " + "; ".join(mine)] if mine else []
    parts += [f"{by}: " + "; ".join(problems) for by, problems in theirs.items()]
    return "; ".join(parts)
