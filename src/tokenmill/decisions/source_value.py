"""`tokenmill source-value`: the marginal value of one source, measured (docs/decisions.md).

Two experiments, each a pair of real training runs per seed that differ only in the source:

  * paired proxy comparison — the same model and the same number of training tokens, without the
    source (the other buckets at their relative weights) and with it (the source at `share`, the
    others scaled to 1 − share);
  * annealing test — the run without the source, except that its last `anneal_fraction` of steps
    decays the LR to 0 on a mix holding the source at `anneal_share`; against the same anneal
    without it (Llama 3's annealing runs, Dubey et al. 2024). Both runs share their first
    phase, so the difference is what the low-LR pass over the source buys.

Each run is scored per held-out slice (bucket) in bits-per-byte. Δ = with − without, per seed, so
negative helps. The noise band is two standard deviations over seeds of the per-seed mean Δ over
the slices other than the source's own (whose gain is expected and says nothing about transfer);
the verdict compares that mean with the band: helps, hurts, or within noise.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import Field, ValidationError

from tokenmill.config import RunConfig, load_config
from tokenmill.decisions.optimize import ExperimentConfig, MixtureOptimizeError, train_and_score
from tokenmill.runs import atomic_write_text
from tokenmill.scaling.sweep import prepare_data, resolve_base
from tokenmill.ownership import FolderName
from tokenmill.runs import claim_experiment_dir
from tokenmill.config_base import config_problem

Test = Literal["paired", "anneal"]


class SourceValueConfig(ExperimentConfig):
    """Which source, against which data and recipe, how many seeds."""

    name: FolderName = Field("source-value", description="Experiment name; the directory is <root>/<name>.")
    source: str | None = Field(
        None,
        description="The new source: a bucket of the token store, or a file/directory to curate into a new bucket (the CLI's --source overrides it).",
    )
    source_bucket: str | None = Field(
        None, description="Bucket name for a source given as a path (None: 'new-' + its file name)."
    )
    tests: list[Test] = Field(["paired", "anneal"], min_length=1, description="Which experiments to run.")
    share: float = Field(0.2, gt=0, lt=1, description="The source's share of the mixture in the paired 'with' runs.")
    anneal_fraction: float = Field(0.2, gt=0, lt=1, description="Share of the steps in the annealing phase.")
    anneal_share: float = Field(0.3, gt=0, le=1, description="The source's share of the annealing phase's mixture.")
    seeds: list[int] = Field([1, 2], min_length=2, description="train.seed of each pair (at least 2: the noise band).")
    sigmas: float = Field(2.0, gt=0, description="Width of the noise band in standard deviations over seeds.")


def load_source_value_config(path: Path, source: str | None = None) -> SourceValueConfig:
    try:
        cfg = SourceValueConfig.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise MixtureOptimizeError(config_problem(exc, f"{path}: invalid source-value config")) from exc
    cfg = cfg.model_copy(update={"base": resolve_base(path, cfg.base), "source": source or cfg.source})
    if not cfg.source:
        raise MixtureOptimizeError(f"{path}: no source given (set `source:` or pass --source BUCKET)")
    return cfg


def resolve_source(cfg: SourceValueConfig, base: RunConfig, path: Path) -> tuple[RunConfig, str]:
    """(base config to build the data from, the source's bucket). A source that names an existing
    file or directory joins the base config's curation sources as a new bucket; anything that
    looks like a path but does not exist is refused; otherwise it names a bucket."""
    assert cfg.source is not None
    where = Path(cfg.source).expanduser()
    if where.exists():
        if cfg.data is not None:
            raise MixtureOptimizeError(
                f"{path}: source {cfg.source} is a path, so the experiment curates it with the "
                "base config's sources into its own token store; remove `data:`"
            )
        bucket = cfg.source_bucket or "new-" + re.sub(r"[^A-Za-z0-9_-]+", "-", where.stem or where.name).strip("-")
        data = base.model_dump()
        data["curate"]["sources"].append({"kind": "files", "path": str(where.resolve()), "bucket": bucket})
        return RunConfig.model_validate(data), bucket
    if "/" in cfg.source or cfg.source.startswith((".", "~")):
        raise MixtureOptimizeError(f"{path}: source path {cfg.source} does not exist")
    return base, cfg.source


def arm_mixtures(others: dict[str, float], source: str, share: float) -> tuple[dict[str, float], dict[str, float]]:
    """(without, with): the other buckets normalised, and the same scaled to 1 − share plus the source."""
    total = sum(others.values())
    without = {b: w / total for b, w in others.items()}
    with_source = {b: (1 - share) * w for b, w in without.items()} | {source: share}
    return without, with_source


def arm_config(base: RunConfig, name: str, root: Path, seed: int, phases: list[dict[str, Any]]) -> RunConfig:
    """The base config trained on `phases` (a list of PhaseConfig dicts) with train.seed = seed."""
    data = base.model_dump()
    data["train"].update(seed=seed, eval_every=0)
    data["mixture"].update(weights=None, phases=phases)
    data.update(name=name, root=str(root))
    return RunConfig.model_validate(data)


def test_phases(
    test: Test, cfg: SourceValueConfig, without: dict[str, float], with_source: dict[str, float]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The phases of the (without, with) arms of a test."""
    if test == "paired":
        return (
            [{"name": "main", "fraction": 1.0, "weights": without}],
            [{"name": "main", "fraction": 1.0, "weights": with_source}],
        )
    f = cfg.anneal_fraction
    assert cfg.source is not None
    annealed = {b: (1 - cfg.anneal_share) * w for b, w in without.items()} | {cfg.source: cfg.anneal_share}
    main = {"name": "main", "fraction": 1 - f, "weights": without}
    return (
        [main, {"name": "anneal", "fraction": f, "weights": without, "anneal": True}],
        [main, {"name": "anneal", "fraction": f, "weights": annealed, "anneal": True}],
    )


def verdict(deltas: list[dict[str, float]], source: str, sigmas: float) -> dict[str, Any]:
    """Mean Δ per slice over seeds, the transfer figure (mean over the other slices), its band."""
    slices = sorted(deltas[0])
    per_slice = {s: statistics.fmean(d[s] for d in deltas) for s in slices}
    others = [s for s in slices if s != source]
    per_seed = [statistics.fmean(d[s] for s in others) for d in deltas]
    mean, band = statistics.fmean(per_seed), sigmas * statistics.stdev(per_seed)
    word = "within noise" if abs(mean) <= band else ("helps" if mean < 0 else "hurts")
    return {
        "delta_bpb": per_slice,
        "delta_other_slices": mean,
        "per_seed": per_seed,
        "noise_band": band,
        "source_slice": per_slice.get(source),
        "verdict": word,
    }


def run_source_value(path: Path, source: str | None = None, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Train every arm of every test not finished yet; write source_value.json."""
    from tokenmill.tokens.store import TokenStore

    cfg = load_source_value_config(path, source)
    base, bucket = resolve_source(cfg, load_config(cfg.base, cfg.set, f"{path}: set:"), path)
    cfg = cfg.model_copy(update={"source": bucket})
    out = Path(cfg.root) / cfg.name
    claim_experiment_dir(out, "source-value", cfg.name, "source_value.json")
    data = prepare_data(out, base, cfg.data)
    store = TokenStore(data.sub("tokens"))
    assert cfg.source is not None
    if cfg.source not in store.buckets:
        raise MixtureOptimizeError(
            f"{path}: source {cfg.source!r} is not a bucket of the token store {store.root} (buckets: {list(store.buckets)})"
        )
    available = {b: store.n_tokens(b, "train") for b in store.buckets}
    weights = base.mixture.weights or {b: float(n) for b, n in available.items()}
    others = {b: float(w) for b, w in weights.items() if b != cfg.source and w > 0}
    if not others:
        raise MixtureOptimizeError(f"{path}: the mixture has no bucket besides {cfg.source!r} to compare against")
    without, with_source = arm_mixtures(others, cfg.source, cfg.share)
    result: dict[str, Any] = {"dir": str(out), "source": cfg.source, "without": without, "with": with_source, "tests": {}}
    for test in cfg.tests:
        arms = dict(zip(("without", "with"), test_phases(test, cfg, without, with_source)))
        runs: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
        for seed in cfg.seeds:
            for arm, phases in arms.items():
                name = f"{test}-{arm}-s{seed}"
                progress(f"{name}")
                rc = arm_config(base, name, out / "runs", seed, phases)
                runs[arm].append({"seed": seed, **train_and_score(rc, data, out / "runs")})
        deltas = [{b: w["bpb"][b] - wo["bpb"][b] for b in wo["bpb"]} for wo, w in zip(runs["without"], runs["with"])]
        result["tests"][test] = {"phases": arms, "runs": runs, **verdict(deltas, cfg.source, cfg.sigmas)}
        atomic_write_text(out / "source_value.json", json.dumps(result, indent=1))
    return result
