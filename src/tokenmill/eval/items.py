"""The task item types every layout parser produces (eval/tasks.py, eval/layouts.py) and the field
checks they share, in a module of their own so the layout parsers and the scorer import them
without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenmill.errors import UserError

SHOT_SEPARATOR = "\n\n"


class TaskError(UserError):
    """A task file that cannot be read or has a malformed item."""


@dataclass
class Item:
    """One task item: parallel lists of contexts and continuations (one pair per choice; lambada
    has one pair) and the index of the correct one. `line` is the item's 1-based line in the file
    (a BIG-bench example: its index in `examples`). `header` is task-level text shown once at the
    top of the prompt, before any shots (MMLU's subject line, BIG-bench's `task_prefix`);
    `shot_separator` follows each solved shot. `choices` are the answers as lm-evaluation-harness's
    `doc_to_choice` gives them, whose lengths `acc_norm` and `acc_bytes` divide by: the
    continuation without its target delimiter (one leading space) unless a layout sets them
    (winogrande: the filled-in contexts, as lm-eval's `doc_to_choice` returns them)."""

    contexts: list[str]
    continuations: list[str]
    gold: int
    line: int
    header: str = ""
    shot_separator: str = SHOT_SEPARATOR
    choices: list[str] = field(default_factory=list)

    def solved(self) -> str:
        """The item with its correct answer: what a k-shot prompt shows."""
        return self.contexts[self.gold] + self.continuations[self.gold]

    def choice_texts(self) -> list[str]:
        """`choices`, or each continuation less lm-eval's default target delimiter " "."""
        return self.choices or [c.removeprefix(" ") for c in self.continuations]


@dataclass
class GenItem:
    """A generative item: the model continues `prompt`. Exact-match items list their accepted
    `answers`; code items instead carry `tests`, a Python program run (in the sandbox) after the
    prompt and the completion, passing when it exits 0, and a reference `solution` (what a k-shot
    prompt shows). `line` is the item's 1-based line in the file (a BIG-bench example: its index in
    `examples`); `header` and `shot_separator` as for `Item`."""

    prompt: str
    answers: list[str]
    line: int
    tests: str | None = None
    solution: str | None = None
    header: str = ""
    shot_separator: str = SHOT_SEPARATOR

    def solved(self) -> str:
        """The item with its reference answer: what a k-shot prompt shows."""
        return self.prompt + (self.solution if self.solution is not None else self.answers[0])


def need(rec: dict, key: str, where: str) -> Any:
    """rec[key], or a TaskError naming the record and the missing field."""
    if key not in rec or rec[key] is None:
        raise TaskError(f"{where}: missing field {key!r}")
    return rec[key]


def str_field(rec: dict, key: str, where: str) -> str:
    """rec[key] as a string (missing or another type: a TaskError)."""
    v = need(rec, key, where)
    if not isinstance(v, str):
        raise TaskError(f"{where}: field {key!r} must be a string, got {type(v).__name__}")
    return v


def index_field(value: Any, n: int, key: str, where: str) -> int:
    """`value` as an index into n choices (not an integer, or out of range: a TaskError)."""
    try:
        i = int(value)
    except (TypeError, ValueError):
        raise TaskError(f"{where}: field {key!r} must be an integer, got {value!r}") from None
    if not 0 <= i < n:
        raise TaskError(f"{where}: field {key!r}={value!r} is out of range for {n} choices")
    return i


def str_list(rec: dict, key: str, where: str) -> list[str]:
    """rec[key] as a non-empty list of strings (a lone string is a list of one)."""
    v = need(rec, key, where)
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
        raise TaskError(f"{where}: field {key!r} must be a string or a non-empty list of strings")
    return v
