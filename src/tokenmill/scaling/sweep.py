"""IsoFLOP sweeps with the real trainer (Chinchilla approaches 2 and 3, Hoffmann et al. 2022).

A sweep is a YAML file (SweepConfig): a base run config (its data stages and its recipe), a list
of compute budgets C in FLOPs, a list of model shapes, and held-out runs. For every budget each
shape trains on D = C / flops_per_token(shape) tokens, so the runs of one budget cost the same
compute; the held-out runs are trained the same way but never shown to the fit: they are what
the fitted law must predict.

Layout of a sweep directory (every run is a normal run directory):

    <root>/<name>/sweep.yaml        the resolved sweep config
    <root>/<name>/data/             curate -> tokenizer -> tokenize of the base config, once
    <root>/<name>/runs/<run>/       one run per (budget, shape): config.yaml, checkpoints, eval/
                                    (curated/, tokenizer/, tokens/ are links into data/)
    <root>/<name>/results.json      {"runs": [{name, role, budget, params, tokens, flops, loss, ...}]}

Running the same command again continues where it stopped: finished runs are skipped, an
interrupted run resumes from its last checkpoint (bit-exactly, see train/checkpoint.py), and
results.json is rewritten after every run.

Beyond the grid: `repeats` train some pairs again with other seeds (the run-to-run noise of the
final loss), `lr_base_width` scales the LR with width (lr·(d/base)^-0.5 by default, the standard-
parametrization rule `scaling lr-transfer` measures), and `jobs` trains several runs at once, each
in its own process. `--no-holdout` trains everything but the held-out runs, so that `scaling fit
--register` can write their predictions down before they exist (see preregister.py).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import Field, ValidationError

from tokenmill import json_limits
from tokenmill.config import RunConfig, load_config
from tokenmill.config_base import Strict, config_problem
from tokenmill.model.config import ModelConfig
from tokenmill.errors import UserError
from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.scaling.flops import flops_per_token, param_count
from tokenmill.train.budget import resolve_budget, tokens_per_step
from tokenmill.train.trainer import TrainingDiverged
from tokenmill.ownership import FolderName
from tokenmill.runs import claim_experiment_dir

DATA_STAGES = ("curate", "tokenizer", "tokenize")
DATA_DIRS = ("curated", "tokenizer", "tokens")


class SweepError(UserError, ValueError):
    """A sweep config or sweep directory that cannot be used."""


class ShapeConfig(Strict):
    """One model shape of the sweep; every other model knob comes from the base config."""

    d_model: int = Field(..., gt=0, description="Width.")
    n_layers: int = Field(..., gt=0, description="Depth.")
    n_heads: int | None = Field(None, description="Attention heads (None: d_model / sweep head_dim).")


class HoldoutConfig(Strict):
    """A run the fit never sees: its final loss is what the fitted law must predict."""

    shape: ShapeConfig = Field(..., description="Model shape of the held-out run.")
    flops: float = Field(..., gt=0, description="Its compute budget in FLOPs.")


class RepeatConfig(Strict):
    """One (budget, shape) pair trained again with other seeds: the spread of its final loss is the
    run-to-run noise a prediction cannot beat."""

    shape: ShapeConfig = Field(..., description="Model shape (usually one of the sweep's).")
    flops: float = Field(..., gt=0, description="Compute budget in FLOPs (usually one of the sweep's).")
    seeds: list[int] = Field(..., min_length=1, description="train.seed of each extra run (initialization and batch order).")


class SweepConfig(Strict):
    """An IsoFLOP grid of small runs plus held-out runs, all with the real trainer."""

    name: FolderName = Field("sweep", description="Sweep name; the sweep directory is <root>/<name>.")
    root: str = Field("runs", description="Directory holding the sweep directory.")
    base: str = Field(
        ...,
        description="Run config (YAML) giving the data stages and the training recipe; "
        "relative paths are relative to the sweep file.",
    )
    data: str | None = Field(
        None,
        description="An existing run directory whose curated data, tokenizer and tokens the sweep "
        "uses, relative to the working directory like `root` (None: run the base "
        "config's data stages in <sweep>/data).",
    )
    set: list[str] = Field(default_factory=list, description="Overrides applied to the base config (`train.lr=1e-3`).")
    budgets: list[float] = Field(..., min_length=1, description="Compute budgets C in FLOPs (forward + backward).")
    shapes: list[ShapeConfig] = Field(..., min_length=2, description="Model shapes tried at every budget.")
    head_dim: int = Field(32, gt=0, description="Head width used when a shape gives no n_heads.")
    min_steps: int = Field(40, ge=1, description="A (budget, shape) pair with fewer optimizer steps is left out.")
    min_tokens_per_param: float = Field(
        1.0,
        ge=0,
        description="A pair whose D/N (non-embedding) is below this is left out: a model that sees fewer "
        "tokens than it has parameters is far off the frontier, its loss set by the first "
        "steps of its schedule more than by N or D.",
    )
    max_tokens_per_param: float = Field(
        400.0, gt=0, description="A pair whose D/N (non-embedding) exceeds this is left out (far from the minimum)."
    )
    max_epochs: float = Field(
        1.0,
        gt=0,
        description="A pair that would repeat the training tokens more than this is left out "
        "(repetition bends the law, Muennighoff et al. 2023).",
    )
    warmup_fraction: float = Field(0.05, ge=0.0, lt=1.0, description="Warmup as a share of each run's tokens.")
    holdout: list[HoldoutConfig] = Field(default_factory=list, description="Runs the fit must predict.")
    repeats: list[RepeatConfig] = Field(
        default_factory=list, description="Pairs trained with other seeds to measure the noise of the final loss (never fitted)."
    )
    lr_base_width: int | None = Field(
        None,
        gt=0,
        description="Scale each run's peak LR as lr·(d_model / this)^-lr_width_exponent "
        "(None: the base config's lr for every width).",
    )
    lr_width_exponent: float = Field(
        0.5,
        ge=0,
        description="Exponent of the width rule above (0.5: the standard-"
        "parametrization optima measured by `scaling lr-transfer`).",
    )
    jobs: int = Field(1, ge=1, description="Runs trained at once, each in its own process with train.threads / jobs threads.")


@dataclass(frozen=True)
class SweepRun:
    """One planned run of a sweep."""

    name: str
    role: Literal["sweep", "holdout", "repeat"]
    budget: float
    d_model: int
    n_layers: int
    n_heads: int
    params: int  # non-embedding
    params_total: int
    steps: int
    tokens: int
    flops: float
    lr: float
    seed: int | None = None


def resolve_base(sweep_path: Path, base: str) -> str:
    """The base run config's path: relative paths are relative to the sweep file."""
    path = Path(base)
    if not path.is_absolute():
        path = (Path(sweep_path).parent / path).resolve()
    if not path.is_file():
        raise SweepError(f"{sweep_path}: base config {path} not found")
    return str(path)


def load_sweep(path: Path) -> SweepConfig:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SweepError(f"{path}: cannot read the sweep config: {exc}") from exc
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise SweepError(config_problem(exc, f"{path}: invalid sweep config")) from exc
    return cfg.model_copy(update={"base": resolve_base(path, cfg.base)})


def base_config(cfg: SweepConfig, path: Path | str = "sweep") -> RunConfig:
    return load_config(cfg.base, cfg.set, f"{path}: set:")  # a bad override is the sweep file's


def shape_model(base: RunConfig, shape: ShapeConfig, head_dim: int, vocab_size: int) -> ModelConfig:
    heads = shape.n_heads or max(1, shape.d_model // head_dim)
    if shape.d_model % heads:
        raise SweepError(f"shape d_model={shape.d_model}: not divisible into {heads} heads")
    return base.model.model_copy(
        update={"d_model": shape.d_model, "n_layers": shape.n_layers, "n_heads": heads, "vocab_size": vocab_size}
    )


def run_lr(base: RunConfig, cfg: SweepConfig, d_model: int) -> float:
    """The peak LR of a run of width `d_model`: the base lr, scaled by the sweep's width rule if it has one."""
    if cfg.lr_base_width is None:
        return base.train.lr
    return base.train.lr * (d_model / cfg.lr_base_width) ** -cfg.lr_width_exponent


def plan_run(
    base: RunConfig,
    cfg: SweepConfig,
    shape: ShapeConfig,
    flops: float,
    role: Literal["sweep", "holdout", "repeat"],
    vocab_size: int,
    seed: int | None = None,
) -> SweepRun:
    """The run of `shape` that spends `flops`: its steps round D = C / flops-per-token up to whole steps."""
    model = shape_model(base, shape, cfg.head_dim, vocab_size)
    per_token = flops_per_token(model, base.train.seq_len)
    tps = tokens_per_step(resolve_budget(base.train))
    steps = max(1, math.ceil(flops / per_token / tps))
    counts = param_count(model)
    prefix = {"sweep": "c", "holdout": "holdout", "repeat": "repeat"}[role]
    name = f"{prefix}{flops:.1e}-d{model.d_model}-l{model.n_layers}".replace("+", "")
    if seed is not None:
        name += f"-s{seed}"
    return SweepRun(
        name=name,
        role=role,
        budget=flops,
        d_model=model.d_model,
        n_layers=model.n_layers,
        n_heads=model.n_heads,
        params=counts["non_embedding"],
        params_total=counts["total"],
        steps=steps,
        tokens=steps * tps,
        flops=steps * tps * per_token,
        lr=run_lr(base, cfg, model.d_model),
        seed=seed,
    )


def plan_sweep(
    cfg: SweepConfig, base: RunConfig, vocab_size: int, train_tokens: int
) -> tuple[list[SweepRun], list[dict[str, Any]]]:
    """Every (budget, shape) run that is worth training, the held-out runs, and the pairs left out with why."""
    if cfg.lr_base_width is not None and base.model.mup:
        raise SweepError("lr_base_width and model.mup both scale the LR with width; use one of them")
    runs, skipped = [], []
    for budget in sorted(cfg.budgets):
        for shape in cfg.shapes:
            run = plan_run(base, cfg, shape, budget, "sweep", vocab_size)
            why = None
            if run.steps < cfg.min_steps:
                why = f"{run.steps} steps < min_steps {cfg.min_steps}"
            elif run.tokens / run.params < cfg.min_tokens_per_param:
                why = f"D/N = {run.tokens / run.params:.2f} < min_tokens_per_param {cfg.min_tokens_per_param:g}"
            elif run.tokens / run.params > cfg.max_tokens_per_param:
                why = f"D/N = {run.tokens / run.params:.0f} > max_tokens_per_param {cfg.max_tokens_per_param:g}"
            elif run.tokens > cfg.max_epochs * train_tokens:
                why = f"{run.tokens:,} tokens > {cfg.max_epochs:g} epoch(s) of {train_tokens:,}"
            if why:
                skipped.append({"name": run.name, "why": why})
            else:
                runs.append(run)
    runs += [plan_run(base, cfg, h.shape, h.flops, "holdout", vocab_size) for h in cfg.holdout]
    runs += [plan_run(base, cfg, r.shape, r.flops, "repeat", vocab_size, seed) for r in cfg.repeats for seed in r.seeds]
    if len({r.name for r in runs}) != len(runs):
        raise SweepError("two sweep runs have the same budget and shape; list each shape and budget once")
    return runs, skipped


def run_threads(base: RunConfig, jobs: int) -> int:
    """Threads of each run when `jobs` train at once: the base config's share (not fingerprinted)."""
    total = base.train.threads or os.cpu_count() or 1
    return max(1, total // jobs)


def run_config(base: RunConfig, cfg: SweepConfig, run: SweepRun, root: Path) -> RunConfig:
    """The base config with the run's shape, LR, seed and token budget (warmup a fixed share of it)."""
    update: dict[str, Any] = {
        "max_tokens": run.tokens,
        "max_steps": run.steps,
        "lr": run.lr,
        "seed": run.seed,
        "warmup_tokens": int(cfg.warmup_fraction * run.tokens),
    }
    if cfg.jobs > 1:
        update["threads"] = run_threads(base, cfg.jobs)
    train = base.train.model_copy(update=update)
    model = base.model.model_copy(update={"d_model": run.d_model, "n_layers": run.n_layers, "n_heads": run.n_heads})
    data = base.model_dump()
    data.update(name=run.name, root=str(root), model=model.model_dump(), train=train.model_dump())
    return RunConfig.model_validate(data)


def link_data(data: RunDir, run: RunDir) -> None:
    """Share the data stages' outputs and their finished records (their fingerprints match: same
    curate/tokenizer/tokenize sections and seed), so only training runs per sweep run."""
    for d in DATA_DIRS:
        target = run.sub(d)
        if not target.exists():
            os.symlink(os.path.relpath(data.sub(d), run.path), target)
    for stage in DATA_STAGES:
        if data.finished(stage) is None:
            raise SweepError(f"{data.path}: data stage {stage!r} has not finished")
        if run.fingerprint(stage) != data.fingerprint(stage):
            raise SweepError(f"{run.path}: its {stage} config differs from the sweep's data run")
        marker = run.sub(".stages", f"{stage}.json")
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data.sub(".stages", f"{stage}.json"), marker)


def final_loss(run: RunDir, step: int) -> dict[str, float]:
    """Held-out loss (nats/token) and bits-per-byte over all buckets of the eval at `step`."""
    path = run.sub("eval", f"{step}.json")
    if not path.exists():
        raise SweepError(f"{path}: missing (the run's final evaluation)")
    buckets = json_limits.load_file(path)["buckets"]
    nll = sum(b["loss"] * b["tokens"] for b in buckets.values())
    tokens = sum(b["tokens"] for b in buckets.values())
    n_bytes = sum(b["bytes"] for b in buckets.values())
    return {"loss": nll / tokens, "bpb": nll / (math.log(2) * n_bytes), "eval_tokens": tokens}


def prepare_data(sweep_dir: Path, base: RunConfig, existing: str | None = None) -> RunDir:
    """The run whose data stages every sweep run shares: `existing` as it is, or <sweep>/data,
    built from the base config (a finished stage is not redone)."""
    from tokenmill.pipeline import run_pipeline

    if existing is not None:
        path = Path(existing)
        if not (path / "config.yaml").is_file():
            raise SweepError(f"{path}: not a run directory (no config.yaml)")
        data = RunDir(load_config(path / "config.yaml"), path)
        missing = [s for s in DATA_STAGES if data.finished(s) is None]
        if missing:
            import shlex

            command = {"curate": "curate", "tokenizer": "tokenizer train", "tokenize": "tokenize"}
            where = f"{shlex.quote(str(path / 'config.yaml'))} --run-dir {shlex.quote(str(path))}"
            todo = ", then ".join(f"`tokenmill {command[s]} {where}`" for s in missing)
            raise SweepError(f"{path}: data stage(s) {', '.join(missing)} not finished (run {todo})")
        return data
    data = RunDir.create(base.model_copy(update={"name": "data", "root": str(sweep_dir)}), sweep_dir / "data")
    run_pipeline(data, DATA_STAGES)
    return data


def store_tokens(data: RunDir) -> tuple[int, int]:
    """(vocab size, training tokens) of the sweep's token store."""
    from tokenmill.tokens.store import TokenStore

    store = TokenStore(data.sub("tokens"))
    return int(store.meta["vocab_size"]), sum(store.n_tokens(b, "train") for b in store.buckets)


def run_sweep(path: Path, only: list[str] | None = None, dry_run: bool = False, holdout: bool = True) -> dict[str, Any]:
    """Plan the sweep, prepare its data once, train every run not yet finished, write results.json.
    With holdout=False the held-out runs wait (so their predictions can be registered first)."""
    cfg = load_sweep(path)
    base = base_config(cfg, path)
    sweep_dir = Path(cfg.root) / cfg.name
    claim_experiment_dir(sweep_dir, "sweep", cfg.name, "sweep.yaml")
    atomic_write_text(sweep_dir / "sweep.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    data = prepare_data(sweep_dir, base, cfg.data)
    vocab, train_tokens = store_tokens(data)
    runs, skipped = plan_sweep(cfg, base, vocab, train_tokens)
    plan = {"runs": [asdict(r) for r in runs], "skipped": skipped, "train_tokens": train_tokens}
    atomic_write_text(sweep_dir / "plan.json", json.dumps(plan, indent=1))
    if dry_run:
        return plan
    dirs: dict[str, RunDir] = {}
    for r in runs:
        run = RunDir.create(run_config(base, cfg, r, sweep_dir / "runs"), sweep_dir / "runs" / r.name)
        link_data(data, run)
        dirs[r.name] = run
    todo = [
        r
        for r in runs
        if not dirs[r.name].is_fresh("train") and (not only or r.name in only) and (holdout or r.role != "holdout")
    ]
    failed: list[dict[str, Any]] = []

    def record(name: str | None = None, why: str | None = None) -> None:
        if why is not None:  # diverged: a point of the grid, not the sweep: record it and go on
            failed.append({"name": name, "why": why})
        _write_results(sweep_dir, _finished(runs, dirs, train_tokens), failed)

    record()
    if cfg.jobs == 1:  # smallest budgets first: a stopped sweep has whole IsoFLOP curves
        for r in todo:
            record(r.name, _train(str(dirs[r.name].path)))
    else:
        _train_parallel(todo, dirs, cfg.jobs, record)
    results = _finished(runs, dirs, train_tokens)
    return {"sweep": str(sweep_dir), "finished": len(results), "planned": len(runs), "skipped": skipped, "failed": failed}


def _train(path: str) -> str | None:
    """Train (or resume) the run at `path`; the divergence message if it diverged. Runs in a worker
    process when the sweep trains several runs at once, so it takes a path, not a RunDir."""
    from tokenmill.pipeline import run_pipeline

    run = RunDir(load_config(Path(path) / "config.yaml"), Path(path))
    try:
        run_pipeline(run, ("train",))
    except TrainingDiverged as exc:
        return str(exc)
    return None


def _train_parallel(
    todo: list[SweepRun], dirs: dict[str, RunDir], jobs: int, record: Callable[[str | None, str | None], None]
) -> None:
    """Train `todo` with `jobs` worker processes (spawned: torch and fork do not mix), largest runs
    first so the last one to finish is short, recording each run as it ends. A run that fails
    (other than diverging) cancels the runs not started yet instead of letting them train first."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = {pool.submit(_train, str(dirs[r.name].path)): r.name for r in sorted(todo, key=lambda r: -r.flops)}
        try:
            for fut in as_completed(futures):
                record(futures[fut], fut.result())
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _finished(runs: list[SweepRun], dirs: dict[str, RunDir], train_tokens: int) -> list[dict[str, Any]]:
    """The result record of every planned run whose training has finished, in plan order."""
    return [
        {
            **asdict(r),
            **final_loss(dirs[r.name], r.steps),
            "epochs": r.tokens / max(train_tokens, 1),
            "seconds": _train_seconds(dirs[r.name]),
        }
        for r in runs
        if dirs[r.name].is_fresh("train")
    ]


def _train_seconds(run: RunDir) -> float | None:
    done = run.finished("train")
    return (done or {}).get("summary", {}).get("seconds")


def _write_results(sweep_dir: Path, results: list[dict[str, Any]], failed: list[dict[str, Any]]) -> None:
    """results.json: the finished runs (what `scaling fit` reads) and the diverged ones with why."""
    atomic_write_text(sweep_dir / "results.json", json.dumps({"runs": results, "failed": failed}, indent=1))
