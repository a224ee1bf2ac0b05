"""Does the best learning rate transfer across widths? A μP learning-rate sweep (Yang et
al. 2022, "Tensor Programs V").

The same grid of learning rates is trained at two (or more) widths, with μP (`model.mup`, base
width = the narrowest width) and, for contrast, with the standard parameterization. Under μP the
optimum should stay put as the model widens; under SP it usually moves to smaller rates. The
optimum of each curve is the minimum of a parabola through the best grid point and its two
neighbours in log2(lr), so it is not limited to the grid.

Every run is a normal run directory sharing one token store (see sweep.py), and a second call
continues where the first stopped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from tokenmill.config import RunConfig, load_config
from tokenmill.config_base import Strict
from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.scaling.sweep import SweepError, final_loss, link_data, prepare_data, resolve_base
from tokenmill.train.trainer import TrainingDiverged
from tokenmill.ownership import FolderName
from tokenmill.runs import claim_experiment_dir
from tokenmill.config_base import config_problem

Param = Literal["mup", "sp"]


class LrTransferConfig(Strict):
    """A learning-rate grid trained at several widths, under μP and under SP."""

    name: FolderName = Field("lr-transfer", description="Sweep name; the directory is <root>/<name>.")
    root: str = Field("runs", description="Directory holding the sweep directory.")
    base: str = Field(..., description="Run config giving the data stages and the recipe (relative to this file).")
    data: str | None = Field(
        None, description="An existing run directory whose tokens to use, relative to the working directory (None: <sweep>/data)."
    )
    set: list[str] = Field(default_factory=list, description="Overrides applied to the base config.")
    widths: list[int] = Field(..., min_length=2, description="d_model values; the narrowest is μP's base width.")
    n_layers: int = Field(2, gt=0, description="Depth of every model.")
    n_heads: int = Field(4, gt=0, description="Heads (fixed: μP widens heads, as in μTransfer).")
    lrs: list[float] = Field(..., min_length=3, description="Learning rates, tried at every width.")
    tokens: int = Field(..., gt=0, description="Training tokens of every run.")
    parameterizations: list[Param] = Field(["mup", "sp"], min_length=1, description="Which parameterizations to sweep.")


def load_lr_transfer(path: Path) -> LrTransferConfig:
    try:
        cfg = LrTransferConfig.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise SweepError(config_problem(exc, f"{path}: invalid learning-rate transfer config")) from exc
    return cfg.model_copy(update={"base": resolve_base(path, cfg.base)})


def run_name(param: Param, width: int, lr: float) -> str:
    return f"{param}-w{width}-lr{lr:.2e}".replace("+", "")


def transfer_run_config(base: RunConfig, cfg: LrTransferConfig, param: Param, width: int, lr: float, root: Path) -> RunConfig:
    model = base.model.model_copy(
        update={
            "d_model": width,
            "n_layers": cfg.n_layers,
            "n_heads": cfg.n_heads,
            "mup": param == "mup",
            "mup_base_width": min(cfg.widths),
        }
    )
    train = base.train.model_copy(update={"lr": lr, "max_tokens": cfg.tokens})
    data = base.model_dump()
    data.update(name=run_name(param, width, lr), root=str(root), model=model.model_dump(), train=train.model_dump())
    return RunConfig.model_validate(data)


def best_lr(lrs: list[float], losses: list[float | None]) -> dict[str, Any]:
    """The grid argmin and the vertex of the parabola through it and its neighbours in log2(lr)
    (the argmin itself when it lies on the grid's edge: the optimum may be outside the grid)."""
    pts = sorted((lr, loss) for lr, loss in zip(lrs, losses) if loss is not None and math.isfinite(loss))
    if not pts:
        return {"lr": None, "grid_lr": None, "loss": None, "edge": True}
    i = min(range(len(pts)), key=lambda k: pts[k][1])
    out = {"grid_lr": pts[i][0], "loss": pts[i][1], "lr": pts[i][0], "edge": i in (0, len(pts) - 1)}
    if not out["edge"]:
        (x0, y0), (x1, y1), (x2, y2) = [(math.log2(lr), loss) for lr, loss in pts[i - 1 : i + 2]]
        denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
        a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
        b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denom
        if a > 0:
            out["lr"] = 2.0 ** (-b / (2 * a))
    return out


def analyse(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per parameterization and width: the optimum; per parameterization: how far it moves (in
    octaves of lr) from the narrowest to the widest width."""
    out: dict[str, Any] = {}
    for param in sorted({r["param"] for r in results}):
        widths = sorted({r["width"] for r in results if r["param"] == param})
        optima = {}
        for w in widths:
            rows = [r for r in results if r["param"] == param and r["width"] == w]
            optima[w] = best_lr([r["lr"] for r in rows], [r["loss"] for r in rows])
        lo, hi = optima[widths[0]]["lr"], optima[widths[-1]]["lr"]
        shift = math.log2(hi / lo) if lo and hi else None
        out[param] = {"optima": {str(w): v for w, v in optima.items()}, "shift_octaves": shift}
    return out


def run_lr_transfer(path: Path) -> dict[str, Any]:
    """Train every (parameterization, width, lr) run not finished yet; write results.json with the analysis."""
    from tokenmill.pipeline import run_pipeline

    cfg = load_lr_transfer(path)
    base = load_config(cfg.base, cfg.set, f"{path}: set:")
    sweep_dir = Path(cfg.root) / cfg.name
    claim_experiment_dir(sweep_dir, "lr-transfer", cfg.name, "results.json")
    data = prepare_data(sweep_dir, base, cfg.data)
    results = []
    for param in cfg.parameterizations:
        for width in cfg.widths:
            for lr in cfg.lrs:
                rc = transfer_run_config(base, cfg, param, width, lr, sweep_dir / "runs")
                run = RunDir.create(rc, sweep_dir / "runs" / rc.name)
                link_data(data, run)
                diverged = run.sub("diverged.txt")
                if not run.is_fresh("train") and not diverged.exists():
                    try:
                        run_pipeline(run, ("train",))
                    except TrainingDiverged as exc:  # too high a learning rate: +inf, and the sweep goes on
                        atomic_write_text(diverged, str(exc))
                loss = None if diverged.exists() else final_loss(run, run.finished_record("train")["summary"]["steps"])["loss"]
                results.append(
                    {"name": rc.name, "param": param, "width": width, "lr": lr, "loss": loss, "diverged": diverged.exists()}
                )
                summary = {"runs": results, "analysis": analyse(results)}
                atomic_write_text(sweep_dir / "results.json", json.dumps(summary, indent=1))
    return summary
