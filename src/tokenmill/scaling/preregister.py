"""Predictions written down before the run they predict has finished (pre-registration).

A held-out run checks a scaling law only if its prediction cannot have been tuned to it. `tokenmill
scaling fit SWEEP --register` predicts every held-out run of the sweep's plan that has not finished
yet and appends the prediction, the time, the law and a hash of the results it was fitted on to
<sweep>/predictions.json. A registered prediction is never overwritten: refitting later (with more
runs, other options) changes fit.json, not the record. Once the held-out run finishes, the record
is compared with its actual loss.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from tokenmill import json_limits
from tokenmill.runs import atomic_write_text
from tokenmill.scaling.analysis import ScalingAnalysis
from tokenmill.scaling.fit import predict
from tokenmill.scaling.results import ScalingResultsError, sweep_runs

PREDICTIONS = "predictions.json"


def pending_holdouts(sweep_dir: Path) -> list[dict[str, Any]]:
    """Held-out runs of the sweep's plan (plan.json) without a result yet."""
    plan_path, results_path = sweep_dir / "plan.json", sweep_dir / "results.json"
    if not plan_path.exists():
        return []
    planned = [r for r in json_limits.load_file(plan_path)["runs"] if r["role"] == "holdout"]
    done = set()
    if results_path.exists():
        done = {r["name"] for r in json_limits.load_file(results_path)["runs"]}
    return [r for r in planned if r["name"] not in done]


def predict_pending(sweep_dir: Path, analysis: ScalingAnalysis) -> list[dict[str, Any]]:
    """The law's prediction (with its bootstrap interval) for each pending held-out run."""
    out = []
    for r in pending_holdouts(sweep_dir):
        p = predict(analysis.chinchilla, r["params"], r["tokens"])
        out.append(
            {
                "name": r["name"],
                "params": r["params"],
                "tokens": r["tokens"],
                "flops": r["flops"],
                "predicted": p.loss,
                "interval": None if p.interval is None else [p.interval.low, p.interval.high],
            }
        )
    return out


def load_registered(sweep_dir: Path) -> list[dict[str, Any]]:
    path = sweep_dir / PREDICTIONS
    if not path.exists():
        return []
    try:
        data = json_limits.loads(path.read_text(encoding="utf-8"))
        return list(data["predictions"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ScalingResultsError(f"{path}: not a predictions file ({exc})") from None


def register(sweep_dir: Path, analysis: ScalingAnalysis) -> list[dict[str, Any]]:
    """Append the predictions of pending held-out runs not registered yet; return the new records."""
    registered = load_registered(sweep_dir)
    known = {r["name"] for r in registered}
    results = (sweep_dir / "results.json").read_bytes()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    new = [
        {
            **p,
            "registered_at": stamp,
            "results_sha256": hashlib.sha256(results).hexdigest(),
            "fit_runs": sorted(r.name for r in sweep_runs(analysis.runs)),
            "law": analysis.chinchilla.fit.to_dict(),
        }
        for p in predict_pending(sweep_dir, analysis)
        if p["name"] not in known
    ]
    if new:
        atomic_write_text(sweep_dir / PREDICTIONS, json.dumps({"predictions": registered + new}, indent=1))
    return new


def registered_checks(sweep_dir: Path, analysis: ScalingAnalysis) -> list[dict[str, Any]]:
    """Each registered prediction next to its run's actual loss (None while the run is pending)."""
    actual = {r.name: r.loss for r in analysis.runs if r.role == "holdout"}
    out = []
    for p in load_registered(sweep_dir):
        loss = actual.get(p["name"])
        out.append(
            {
                "name": p["name"],
                "registered_at": p["registered_at"],
                "predicted": p["predicted"],
                "interval": p.get("interval"),
                "actual": loss,
                "relative_error": None if loss is None else (p["predicted"] - loss) / loss,
            }
        )
    return out
