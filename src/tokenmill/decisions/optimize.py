"""`tokenmill mixture optimize`: bucket weights found by experiments on the user's own data.

Two published methods, at proxy scale, on the token store the base config builds:

  * DoReMi (doremi.py): a reference and a Group-DRO proxy model; the weights are the proxy's
    averaged domain weights.
  * a data-mixing-law regression over sampled mixtures (regmix.py): each sampled mixture is a real
    tokenmill training run (the loader samples by those weights, so repetition of a small bucket is
    part of what is measured), evaluated per bucket on the held-out split; the fitted law's best
    mixture is the answer.

Optionally (`compare`) the candidates — uniform, token-proportional and each method's weights —
are then trained at the base config's own size, several seeds each, and scored by the mean
held-out bits-per-byte across buckets: the measurement that says whether an optimized mixture
helps. Everything lands under <root>/<name>/: `mixture/optimized.yaml` (the weights, as a
`mixture:` section), `doremi.json`, `regmix.json`, `compare.json`, `optimize.json` (all of it; the
report layer renders it as `mixture.html`). Every proxy and
comparison run is a normal run directory sharing one token store, and a second call continues
where the first stopped.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import numpy as np
import torch
import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tokenmill import json_limits
from tokenmill.config import RunConfig, load_config
from tokenmill.config_base import Strict
from tokenmill.errors import UserError
from tokenmill.mixture.curriculum import resolve_weights
from tokenmill.mixture.errors import MixtureError
from tokenmill.runs import RunDir, atomic_write_text, sha256_json
from tokenmill.scaling.sweep import link_data, prepare_data, resolve_base
from tokenmill.ownership import FolderName
from tokenmill.runs import claim_experiment_dir
from tokenmill.config_base import config_problem

Method = Literal["doremi", "regmix"]
Candidate = Literal["uniform", "proportional", "doremi", "regmix"]


class MixtureOptimizeError(UserError, ValueError):
    """A mixture-optimization config or its data is not usable."""


class ProxyModel(Strict):
    """The small model every proxy run trains (the rest of the recipe is the base config's)."""

    d_model: int = Field(64, gt=0, description="Width of the proxy models.")
    n_layers: int = Field(2, gt=0, description="Blocks of the proxy models.")
    n_heads: int = Field(2, gt=0, description="Attention heads of the proxy models.")
    tokens: int = Field(1_000_000, gt=0, description="Training tokens of each proxy run (DoReMi: of each of its two models).")


class DoReMiConfig(Strict):
    """DoReMi's knobs (Xie et al. 2023, their defaults)."""

    reference: Literal["uniform", "proportional"] | dict[str, float] = Field(
        "uniform", description="Mixture the reference model trains on: uniform, token-proportional, or explicit weights."
    )
    step_size: float = Field(1.0, gt=0, description="η of the exponentiated-gradient update of the domain weights.")
    smoothing: float = Field(1e-3, ge=0, lt=1, description="c: the weights are mixed with uniform by this share each step.")
    rows_per_bucket: int = Field(8, gt=0, description="Sequences of every bucket in each step's batch.")


class RegMixConfig(Strict):
    """The sampled mixtures and the law fitted to them."""

    mixtures: int = Field(10, ge=4, description="Proxy runs, on uniform, token-proportional and random mixtures.")
    min_weight: float = Field(0.02, ge=0, lt=0.5, description="Least share of any bucket, sampled and optimized.")
    candidates: int = Field(
        200_000, gt=0, description="Random mixtures the fitted law is evaluated on before SLSQP polishes the best."
    )
    max_epochs: float = Field(
        4.0,
        gt=0,
        description="No bucket may be repeated more than this many epochs in a run of the base config's budget (Muennighoff et al. 2023: up to ~4 help).",
    )


class CompareConfig(Strict):
    """Train the candidate mixtures at the base config's size and measure them."""

    mixtures: list[Candidate] = Field(
        ["uniform", "proportional", "doremi", "regmix"], min_length=2, description="Candidate mixtures to train."
    )
    seeds: list[int] = Field([1, 2], min_length=1, description="train.seed of each repeat (noise: their spread).")
    confirm_seeds: list[int] = Field(
        default_factory=list,
        description="Fresh train.seed values on which the chosen mixture and the baselines are trained again, after the choice: the paired gain on data the choice did not see (empty: no confirmation).",
    )
    eval_docs: int = Field(64, gt=0, description="Held-out documents per bucket scored at the end of each run.")

    @model_validator(mode="after")
    def _fresh(self) -> "CompareConfig":
        reused = sorted(set(self.seeds) & set(self.confirm_seeds))
        if reused:
            raise ValueError(f"confirm_seeds {reused} are also in seeds: a confirmation needs seeds the choice did not see")
        return self


class ExperimentConfig(Strict):
    """Where an experiment of several runs lives, and the run config they all derive from."""

    name: FolderName = Field("experiment", description="Experiment name; the directory is <root>/<name>.")
    root: str = Field("runs", description="Directory holding the experiment directory.")
    base: str = Field(..., description="Run config giving the data stages and the recipe (relative to this file).")
    data: str | None = Field(
        None, description="An existing run directory whose tokens to use, relative to the working directory (None: <dir>/data)."
    )
    set: list[str] = Field(default_factory=list, description="Overrides applied to the base config.")


class MixtureOptimizeConfig(ExperimentConfig):
    """Which data, which methods, at which proxy size, and the optional measured comparison."""

    name: FolderName = Field("mixture-opt", description="Experiment name; the directory is <root>/<name>.")
    buckets: list[str] | None = Field(None, description="Buckets to weigh (None: every bucket of the token store).")
    methods: list[Method] = Field(["doremi", "regmix"], min_length=1, description="Methods to run.")
    seed: int = Field(0, description="Seed of the proxy models and of the sampled mixtures.")
    proxy: ProxyModel = Field(default_factory=ProxyModel)
    doremi: DoReMiConfig = Field(default_factory=DoReMiConfig)
    regmix: RegMixConfig = Field(default_factory=RegMixConfig)
    compare: CompareConfig | None = Field(None, description="Measure the candidates at the base size (None: skip).")

    @field_validator("methods")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"methods listed twice: {v}")
        return v


def load_optimize_config(path: Path) -> MixtureOptimizeConfig:
    try:
        cfg = MixtureOptimizeConfig.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise MixtureOptimizeError(config_problem(exc, f"{path}: invalid mixture-optimization config")) from exc
    if cfg.compare is not None:
        missing = sorted(set(cfg.compare.mixtures) & {"doremi", "regmix"} - set(cfg.methods))
        if missing:
            raise MixtureOptimizeError(f"{path}: compare.mixtures names {missing}, which `methods` does not run")
    return cfg.model_copy(update={"base": resolve_base(path, cfg.base)})


def check_weights(weights: dict[str, float], available: dict[str, int], where: str) -> dict[str, float]:
    """Explicit weights: the loader's checks (known, finite, non-negative buckets that hold
    tokens), and a sum of 1 (within 1e-6), since a share is what the user means to give."""
    try:
        resolve_weights(weights, available, where)
    except MixtureError as exc:
        raise MixtureOptimizeError(str(exc)) from exc
    total = sum(weights.values())
    if abs(total - 1.0) > 1e-6:
        raise MixtureOptimizeError(f"{where}: weights must sum to 1, got {total:g} ({weights})")
    return {b: float(weights.get(b, 0.0)) for b in available}


def baseline_weights(kind: str, available: dict[str, int]) -> dict[str, float]:
    """uniform: 1/k each; proportional: each bucket's share of the training tokens."""
    if kind == "uniform":
        return {b: 1.0 / len(available) for b in available}
    total = sum(available.values())
    return {b: n / total for b, n in available.items()}


# --------------------------------------------------------------------------- runs
def child_config(
    base: RunConfig,
    name: str,
    root: Path,
    weights: dict[str, float],
    *,
    model: dict[str, Any] | None = None,
    tokens: int | None = None,
    seed: int | None = None,
    eval_docs: int | None = None,
) -> RunConfig:
    """The base config trained on `weights` (and, for proxies, a smaller model and budget)."""
    train = base.train.model_copy(
        update={
            k: v
            for k, v in {
                "max_tokens": tokens,
                "seed": seed,
                "eval_docs": eval_docs,
                "eval_every": 0,
                "warmup_tokens": int(0.05 * tokens) if tokens else None,
            }.items()
            if v is not None
        }
    )
    mcfg = base.model.model_copy(update=model or {})
    mixture = base.mixture.model_copy(update={"weights": weights, "phases": []})
    data = base.model_dump()
    data.update(name=name, root=str(root), model=mcfg.model_dump(), train=train.model_dump(), mixture=mixture.model_dump())
    return RunConfig.model_validate(data)


def train_and_score(rc: RunConfig, data: RunDir, runs_dir: Path, buckets: list[str] | None = None) -> dict[str, Any]:
    """Train the run (or find it finished) and return its final held-out figures per bucket, and
    their mean over `buckets` (None: every bucket evaluated)."""
    from tokenmill.pipeline import run_pipeline

    run = RunDir.create(rc, runs_dir / rc.name)
    link_data(data, run)
    run_pipeline(run, ("train",))
    steps = run.finished_record("train")["summary"]["steps"]
    scored: dict[str, dict[str, float]] = json_limits.load_file(run.sub("eval", f"{steps}.json"))["buckets"]
    return {
        "run": str(run.path),
        "steps": steps,
        "bpb": {b: m["bpb"] for b, m in scored.items()},
        "loss": {b: m["loss"] for b, m in scored.items()},
        "mean_bpb": statistics.fmean(scored[b]["bpb"] for b in (buckets or scored)),
    }


def budget_tokens(base: RunConfig) -> int:
    """Training tokens of one run of the base config (its budget resolved into whole steps)."""
    from tokenmill.train.budget import resolve_budget, tokens_per_step

    tc = resolve_budget(base.train)
    return tc.max_steps * tokens_per_step(tc)


def epochs(weights: dict[str, float], available: dict[str, int], tokens: int) -> dict[str, float]:
    """How many times a run of `tokens` tokens on `weights` reads each bucket."""
    total = sum(weights.values())
    return {b: w / total * tokens / available[b] for b, w in weights.items()}


def _fmt(w: dict[str, float]) -> str:
    return ", ".join(f"{b} {v:.3f}" for b, v in w.items())


# --------------------------------------------------------------------------- methods
@contextlib.contextmanager
def _doremi_bar(steps: int) -> Iterator[Callable[[str, int], None]]:
    """A progress bar per DoReMi model (reference, then proxy) on a terminal; nothing elsewhere."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True, soft_wrap=True)  # lines are never cut at 80 columns (paths, sentences)
    with Progress(
        TextColumn("[bold]doremi[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as bar:
        tasks = {kind: bar.add_task(kind, total=steps) for kind in ("reference", "proxy")}
        yield lambda kind, step: bar.update(tasks[kind], completed=step)


def doremi_step(
    cfg: MixtureOptimizeConfig,
    base: RunConfig,
    data: RunDir,
    buckets: list[str],
    available: dict[str, int],
    out: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    from tokenmill.decisions.doremi import run_doremi
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.device import resolve_device
    from tokenmill.train.trainer import resolve_model_config

    path = out / "doremi.json"
    # what the weights depend on: a record made with other settings is stale, not reused
    settings = {
        "doremi": cfg.doremi.model_dump(mode="json"),
        "proxy": cfg.proxy.model_dump(),
        "seed": cfg.seed,
        "buckets": buckets,
        "store": data.finished_record("tokenize")["fingerprint"],
        "train": base.train.model_dump(
            mode="json", include={"seq_len", "lr", "schedule", "weight_decay", "beta1", "beta2", "grad_clip", "dtype"}
        ),
    }
    if path.exists():
        record = json_limits.load_file(path)
        if record.get("settings") == settings:
            return record
        progress("DoReMi: settings changed since doremi.json was written; training again")
    ref = cfg.doremi.reference
    ref_w = check_weights(ref, available, "doremi.reference") if isinstance(ref, dict) else baseline_weights(ref, available)
    store = TokenStore(data.sub("tokens"))
    tc = base.train
    rows, seq = cfg.doremi.rows_per_bucket, tc.seq_len
    steps = max(10, cfg.proxy.tokens // (rows * seq * len(buckets)))
    mcfg = resolve_model_config(base.model.model_copy(update=cfg.proxy.model_dump(exclude={"tokens"})), store, seq)
    progress(f"DoReMi: reference and proxy models, {steps} steps of {len(buckets)} × {rows} × {seq} tokens each")
    prev_threads = torch.get_num_threads()  # process-wide: put back for whatever runs next (as the trainer does)
    try:
        if tc.threads:
            torch.set_num_threads(tc.threads)
        with _doremi_bar(steps) as advance:
            res = run_doremi(
                store,
                buckets,
                mcfg,
                tc,
                steps,
                rows,
                seq,
                cfg.seed,
                ref_w,
                cfg.doremi.step_size,
                cfg.doremi.smoothing,
                resolve_device(tc.device),
                log_every=max(1, steps // 50),
                on_step=advance,
            )
    finally:
        torch.set_num_threads(prev_threads)
    record = {"settings": settings, "steps": steps, "tokens_per_model": steps * rows * seq * len(buckets), **res.as_dict()}
    atomic_write_text(path, json.dumps(record, indent=1))
    progress(f"DoReMi weights: {_fmt(res.weights)}")
    return record


def regmix_step(
    cfg: MixtureOptimizeConfig,
    base: RunConfig,
    data: RunDir,
    buckets: list[str],
    available: dict[str, int],
    out: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    from tokenmill.decisions.regmix import best_mixture, fit_law, sample_mixtures

    rc = cfg.regmix
    anchors = [np.asarray([baseline_weights(k, available)[b] for b in buckets]) for k in ("uniform", "proportional")]
    floor = np.maximum(anchors[1], rc.min_weight)  # the proportional anchor, lifted to the floor
    anchors[1] = floor / floor.sum()
    mixtures = sample_mixtures(len(buckets), rc.mixtures, cfg.seed, rc.min_weight, anchors)
    runs = []
    for i, r in enumerate(mixtures):
        w = {b: float(x) for b, x in zip(buckets, r)}
        name = f"regmix-{i:02d}"
        progress(f"RegMix proxy {i + 1}/{len(mixtures)} ({name}): {_fmt(w)}")
        rcfg = child_config(
            base, name, out / "runs", w, model=cfg.proxy.model_dump(exclude={"tokens"}), tokens=cfg.proxy.tokens, seed=cfg.seed
        )
        runs.append({"name": name, "weights": w, **train_and_score(rcfg, data, out / "runs", buckets)})
    y = np.asarray([[run["bpb"][b] for b in buckets] for run in runs])
    fits = [fit_law(mixtures, y[:, j]) for j in range(len(buckets))]
    target = budget_tokens(base)
    upper = np.asarray([rc.max_epochs * available[b] / target for b in buckets])
    try:
        r_best, predicted = best_mixture(fits, len(buckets), cfg.seed, rc.candidates, rc.min_weight, upper)
    except ValueError as exc:
        raise MixtureOptimizeError(f"regmix: {exc} (max_epochs {rc.max_epochs} over {target:,} training tokens)") from exc
    observed = [run["mean_bpb"] for run in runs]
    record = {
        "weights": {b: float(x) for b, x in zip(buckets, r_best)},
        "predicted_mean_bpb": predicted,
        "upper": {b: float(u) for b, u in zip(buckets, upper)},
        "target_tokens": target,
        "best_sampled": runs[int(np.argmin(observed))]["name"],
        "best_sampled_mean_bpb": float(min(observed)),
        "fits": {
            b: {
                "c": float(f.params[0]),
                "k": float(math.exp(f.params[1])),
                "t": {bj: float(t) for bj, t in zip(buckets, f.params[2:])},
                "rmse": f.rmse,
                "loo_errors": f.loo_errors,
            }
            for b, f in zip(buckets, fits)
        },
        "runs": runs,
    }
    atomic_write_text(out / "regmix.json", json.dumps(record, indent=1))
    progress(f"RegMix weights: {_fmt(record['weights'])} (predicted mean bpb {predicted:.4f})")
    return record


def compare_step(
    cfg: MixtureOptimizeConfig,
    base: RunConfig,
    data: RunDir,
    candidates: dict[str, dict[str, float]],
    available: dict[str, int],
    out: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    assert cfg.compare is not None
    results: dict[str, Any] = {}
    for name in cfg.compare.mixtures:
        w = candidates[name]
        rows = _seed_runs(name, w, cfg.compare.seeds, cfg.compare.eval_docs, base, data, out, progress)
        means = [r["mean_bpb"] for r in rows]
        results[name] = {
            "weights": w,
            "epochs": epochs(w, available, budget_tokens(base)),
            "runs": rows,
            "mean_bpb": statistics.fmean(means),
            "std_bpb": statistics.stdev(means) if len(means) > 1 else None,
        }
        atomic_write_text(out / "compare.json", json.dumps(results, indent=1))
    for mixture, r in results.items():
        r["paired"] = {
            other: paired_delta(r["runs"], results[other]["runs"])
            for other in ("uniform", "proportional")
            if other in results and other != mixture
        }
    atomic_write_text(out / "compare.json", json.dumps(results, indent=1))
    return results


def _seed_runs(
    name: str,
    w: dict[str, float],
    seeds: list[int],
    eval_docs: int,
    base: RunConfig,
    data: RunDir,
    out: Path,
    progress: Callable[[str], None],
) -> list[dict[str, Any]]:
    """One base-size run of weights `w` per seed, scored (finished runs are reused)."""
    rows = []
    tag = sha256_json({b: round(x, 6) for b, x in w.items()})[:6]  # other weights, another run
    for seed in seeds:
        run_name = f"compare-{name}-{tag}-s{seed}"
        progress(f"compare {run_name}: {_fmt(w)}")
        rc = child_config(base, run_name, out / "runs", w, seed=seed, eval_docs=eval_docs)
        rows.append({"seed": seed, **train_and_score(rc, data, out / "runs", list(w))})
    return rows


def confirm_step(
    cfg: MixtureOptimizeConfig,
    chosen: str,
    base: RunConfig,
    data: RunDir,
    candidates: dict[str, dict[str, float]],
    out: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """The chosen mixture and the baselines again, on `compare.confirm_seeds` only: the chosen
    one's paired gain on seeds its choice did not see (the comparison's own gain is selected on
    its seeds, so it is biased toward the winner)."""
    assert cfg.compare is not None
    names = [chosen] + [b for b in ("uniform", "proportional") if b in cfg.compare.mixtures and b != chosen]
    runs = {
        n: _seed_runs(n, candidates[n], cfg.compare.confirm_seeds, cfg.compare.eval_docs, base, data, out, progress)
        for n in names
    }
    record = {
        "chosen": chosen,
        "seeds": cfg.compare.confirm_seeds,
        "mean_bpb": {n: statistics.fmean(r["mean_bpb"] for r in rows) for n, rows in runs.items()},
        "paired": {b: paired_delta(runs[chosen], runs[b]) for b in names[1:]},
        "runs": runs,
    }
    atomic_write_text(out / "confirm.json", json.dumps(record, indent=1))
    return record


def paired_delta(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean-bpb difference (ours − theirs) per seed both ran, its mean and standard deviation: the
    seed moves both runs alike (same init and data order), so the pairs see through its noise."""
    by_seed = {r["seed"]: r["mean_bpb"] for r in theirs}
    deltas = [r["mean_bpb"] - by_seed[r["seed"]] for r in ours if r["seed"] in by_seed]
    return {
        "per_seed": deltas,
        "mean": statistics.fmean(deltas) if deltas else None,
        "std": statistics.stdev(deltas) if len(deltas) > 1 else None,
    }


# --------------------------------------------------------------------------- entry point
def run_optimize(path: Path, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run the configured methods (and comparison); write optimized.yaml, the JSON records, the page."""
    from tokenmill.tokens.store import TokenStore

    cfg = load_optimize_config(path)
    base = load_config(cfg.base, cfg.set, f"{path}: set:")
    out = Path(cfg.root) / cfg.name
    claim_experiment_dir(out, "mixture-optimize", cfg.name, "optimize.json")
    data = prepare_data(out, base, cfg.data)
    store = TokenStore(data.sub("tokens"))
    buckets = cfg.buckets or list(store.buckets)
    unknown = sorted(set(buckets) - set(store.buckets))
    if unknown:
        raise MixtureOptimizeError(
            f"{path}: buckets {unknown} are not in the token store {store.root} (buckets: {list(store.buckets)})"
        )
    if len(buckets) < 2:
        raise MixtureOptimizeError(f"{path}: a mixture needs at least 2 buckets, got {buckets}")
    available = {b: store.n_tokens(b, "train") for b in buckets}
    empty = [b for b, n in available.items() if n == 0]
    if empty:
        raise MixtureOptimizeError(f"{path}: bucket(s) {empty} hold no training token")
    result: dict[str, Any] = {"dir": str(out), "buckets": buckets, "available_tokens": available}
    if "doremi" in cfg.methods:
        result["doremi"] = doremi_step(cfg, base, data, buckets, available, out, progress)
    if "regmix" in cfg.methods:
        result["regmix"] = regmix_step(cfg, base, data, buckets, available, out, progress)
    candidates = {k: baseline_weights(k, available) for k in ("uniform", "proportional")}
    candidates.update({m: result[m]["weights"] for m in cfg.methods})
    if cfg.compare is not None:
        result["compare"] = compare_step(cfg, base, data, candidates, available, out, progress)
    chosen = choose(cfg, result)
    result["chosen"] = chosen
    if cfg.compare is not None and cfg.compare.confirm_seeds and chosen in candidates:
        result["confirm"] = confirm_step(cfg, chosen, base, data, candidates, out, progress)
    result["optimized"] = str(write_optimized(out, result, candidates[chosen], chosen))
    atomic_write_text(out / "optimize.json", json.dumps(result, indent=1))
    return result


def choose(cfg: MixtureOptimizeConfig, result: dict[str, Any]) -> str:
    """The method whose weights go to optimized.yaml: the one with the lowest measured mean bpb
    when the comparison ran, else the first method listed."""
    measured = {m: result["compare"][m]["mean_bpb"] for m in cfg.methods if m in result.get("compare", {})}
    return min(measured, key=measured.__getitem__) if measured else cfg.methods[0]


def write_optimized(out: Path, result: dict[str, Any], weights: dict[str, float], chosen: str) -> Path:
    """mixture/optimized.yaml: a `mixture:` section to paste or merge, and where it came from."""
    lines = [
        f"# tokenmill mixture optimize: weights of {chosen} over buckets {', '.join(result['buckets'])}",
        f"# experiment: {out}; details in doremi.json, regmix.json, compare.json, mixture.html",
    ]
    if "compare" in result:
        for name, c in result["compare"].items():
            std = f" ± {c['std_bpb']:.4f}" if c["std_bpb"] is not None else ""
            lines.append(f"# measured mean held-out bpb, {name}: {c['mean_bpb']:.4f}{std} ({len(c['runs'])} seeds)")
    if "confirm" in result:
        conf = result["confirm"]
        for other, d in conf["paired"].items():
            std = f" ± {d['std']:.4f}" if d["std"] is not None else ""
            lines.append(
                f"# confirmed on fresh seeds {conf['seeds']}: paired Δ bpb {conf['chosen']} − {other} "
                f"{d['mean']:+.4f}{std} (negative: {conf['chosen']} better)"
            )
    body = yaml.safe_dump({"mixture": {"weights": {b: round(float(w), 6) for b, w in weights.items()}}}, sort_keys=False)
    path = out / "mixture" / "optimized.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n" + body)
    return path
