"""The runs a scaling fit reads: one record per finished training run of a sweep.

The sweep (`tokenmill scaling sweep`) writes a JSON file `{"runs": [record, ...]}`; each record
is a dict with

- `name` (str, unique): the run's name;
- `params` (int > 0): N, the non-embedding parameter count the laws are fitted in;
- `params_total` (int > 0): every parameter, embeddings included (reported, not fitted);
- `tokens` (int > 0): D, the tokens the run trained on;
- `flops` (float > 0): C, the exact training compute of the run;
- `budget` (float > 0 or null): the IsoFLOP budget label the run was planned for, null for runs
  outside the IsoFLOP grid;
- `loss` (float > 0): the final held-out loss in nats/token;
- `role` ("sweep" | "holdout" | "repeat"): sweep runs are fitted, holdout runs only predicted,
  repeat runs (a sweep pair trained again with another seed) only measure the run-to-run noise.

Other keys are kept out of the record but allowed, so the sweep may log more about a run.
A bad record stops loading with an error naming the file, the record and the problem: a fit on a
silently dropped run would answer a different question.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from tokenmill import json_limits
from tokenmill.errors import UserError

Role = Literal["sweep", "holdout", "repeat"]
ROLES: tuple[str, ...] = ("sweep", "holdout", "repeat")


class ScalingResultsError(UserError, ValueError):
    """A results file or record is malformed; the message names the file, the record and the problem."""


@dataclass(frozen=True)
class RunResult:
    """One finished training run: its size, data, compute and final held-out loss."""

    name: str
    params: int
    params_total: int
    tokens: int
    flops: float
    budget: float | None
    loss: float
    role: Role

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"'{key}' must be a positive integer, got {value!r}")
    if float(value) != int(value) or value <= 0:
        raise ValueError(f"'{key}' must be a positive integer, got {value!r}")
    return int(value)


def _positive_float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"'{key}' must be a positive finite number, got {value!r}")
    return float(value)


def parse_record(record: Any) -> RunResult:
    """One record to a RunResult; raises ValueError saying which field is wrong."""
    if not isinstance(record, dict):
        raise ValueError(f"a run must be an object, got {type(record).__name__}")
    missing = [k for k in ("name", "params", "params_total", "tokens", "flops", "budget", "loss", "role") if k not in record]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(repr(k) for k in missing)}")
    name = record["name"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"'name' must be a non-empty string, got {name!r}")
    role = record["role"]
    if role not in ROLES:
        raise ValueError(f"'role' must be one of {', '.join(ROLES)}, got {role!r}")
    budget = record["budget"]
    return RunResult(
        name=name,
        params=_positive_int(record["params"], "params"),
        params_total=_positive_int(record["params_total"], "params_total"),
        tokens=_positive_int(record["tokens"], "tokens"),
        flops=_positive_float(record["flops"], "flops"),
        budget=None if budget is None else _positive_float(budget, "budget"),
        loss=_positive_float(record["loss"], "loss"),
        role=role,
    )


def parse_results(records: Iterable[Any], source: str = "<results>") -> list[RunResult]:
    """Validate records (as the sweep writes them); the error names `source`, the record and the field."""
    runs: list[RunResult] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        label = f"record {index}"
        if isinstance(record, dict) and isinstance(record.get("name"), str):
            label += f" ({record['name']!r})"
        try:
            run = parse_record(record)
        except ValueError as exc:
            raise ScalingResultsError(f"{source}: {label}: {exc}") from None
        if run.name in seen:
            raise ScalingResultsError(f"{source}: {label}: duplicate run name {run.name!r}")
        seen.add(run.name)
        runs.append(run)
    return runs


def read_json_file(path: Path, error: type[UserError], what: str) -> Any:
    """A JSON file's content; a missing or malformed file raises `error` naming the file."""
    try:
        return json_limits.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except ValueError as exc:  # not UTF-8, not JSON, or too deep
        raise error(f"{path}: not valid JSON ({exc})") from None


def load_results(path: str | Path) -> list[RunResult]:
    """Read a sweep's results file `{"runs": [...]}` (JSON; loading runs no code)."""
    path = Path(path)
    data = read_json_file(path, ScalingResultsError, "results file")
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ScalingResultsError(f"{path}: expected an object with a 'runs' list")
    return parse_results(data["runs"], source=str(path))


def sweep_runs(runs: Iterable[RunResult]) -> list[RunResult]:
    """The runs a fit may use (role 'sweep')."""
    return [r for r in runs if r.role == "sweep"]


def holdout_runs(runs: Iterable[RunResult]) -> list[RunResult]:
    """The runs only predicted, never fitted (role 'holdout')."""
    return [r for r in runs if r.role == "holdout"]


def repeat_runs(runs: Iterable[RunResult]) -> list[RunResult]:
    """The runs that repeat a sweep pair with another seed (role 'repeat')."""
    return [r for r in runs if r.role == "repeat"]
