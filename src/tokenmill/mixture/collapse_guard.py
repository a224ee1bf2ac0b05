"""The model-collapse guard: how much of a planned mixture is synthetic, and of which generation.

Shumailov et al. 2024 ("AI models collapse when trained on recursively generated data"): a model
trained on samples of the previous generation's model loses the tails of the original
distribution first and drifts towards a narrow one within a few generations. The usual remedy
is to keep substantial human data in every mixture (typically 50-70% human, 30-50% synthetic)
and not to chain one model's output through generations. `mixture.synthetic` states both limits.

What is counted, before the first step:
  * per bucket, the share s_b of its training tokens that come from synthetic documents (a
    curated row whose metadata carries a lineage, lineage.py; joined to the token store by the
    document id) and the newest generation among them;
  * per phase, the expected synthetic share of its tokens, Σ_b w_b · s_b over the phase's
    realised bucket shares w_b (the loader reads a bucket's stream uniformly, so a bucket's
    tokens are synthetic in proportion s_b); the run's share weighs phases by their steps;
  * the run's generation: the newest among the buckets it draws from (0 without synthetic data).
A phase above max_share, or a used bucket above max_generation, stops the run with a message
naming the bucket, its share or generation, and the limit. A run without curated rows (a bare
token store) has nothing to trace and passes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill import json_limits
from tokenmill.data.synthetic_lineage import KEY, lineage_of
from tokenmill.mixture.config import MixtureConfig, SyntheticLimitsConfig
from tokenmill.mixture.curriculum import phase_configs, resolve_weights
from tokenmill.mixture.errors import MixtureError
from tokenmill.runs import atomic_write_text
from tokenmill.tokens.store import TokenStore

WHY = "Keep 50-70% human-written data; Shumailov et al. 2024: models trained on recursively generated data collapse."


class SyntheticLimitError(MixtureError):
    """A planned mixture with more synthetic data, or a newer generation of it, than mixture.synthetic allows."""


class PhaseLike(Protocol):
    # read-only: a curriculum Phase is a frozen dataclass
    @property
    def name(self) -> str: ...
    @property
    def weights(self) -> dict[str, float]: ...
    @property
    def steps(self) -> int: ...


@dataclass
class BucketSynthetic:
    """The synthetic part of one bucket's training tokens."""

    bucket: str
    tokens: int
    synthetic_tokens: int = 0
    synthetic_docs: int = 0
    generation: int = 0  # newest generation among its synthetic training documents (0: none)

    @property
    def share(self) -> float:
        return self.synthetic_tokens / self.tokens if self.tokens else 0.0


@dataclass
class SyntheticReport:
    """A planned mixture's synthetic figures, and what the limits say about them."""

    buckets: dict[str, BucketSynthetic]
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {share, steps, contributions}
    share: float = 0.0
    generation: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "buckets": {b: {**asdict(s), "share": s.share} for b, s in self.buckets.items()},
            "phases": self.phases,
            "share": self.share,
            "generation": self.generation,
            "problems": self.problems,
        }


def synthetic_generations(curated: Path, bucket: str) -> dict[str, int]:
    """Curated document id -> generation, for the synthetic documents of one bucket (every split).

    Finding them reads the `id` and `metadata` columns of every curated part, which on a large
    corpus is a pass over gigabytes before each training start and on every rank: the answer is
    kept in <run>/.cache/synthetic/<bucket>.json under the curate stage's finished record (its
    fingerprint and time) and the parts' names and sizes, and read from there until the curate
    stage runs again. Curated parts without a finished curate stage are always scanned."""
    parts = sorted((curated / bucket).glob("part-*.parquet"))
    marker = curated.parent / ".stages" / "curate.json"
    if not marker.exists():
        return _scan_generations(parts)
    key = [marker.read_text(), *([p.name, p.stat().st_size] for p in parts)]
    cache = curated.parent / ".cache" / "synthetic" / f"{bucket}.json"
    try:
        saved = json_limits.load_file(cache)
        if saved.get("parts") == key:
            return {k: int(v) for k, v in saved["generations"].items()}
    except (OSError, ValueError, AttributeError, KeyError):
        pass  # absent or unreadable: scan again
    found = _scan_generations(parts)
    atomic_write_text(cache, json.dumps({"parts": key, "generations": found}))
    return found


def _scan_generations(parts: list[Path]) -> dict[str, int]:
    found: dict[str, int] = {}
    for part in parts:
        if "metadata" not in pq.read_schema(part).names:  # written without one: nothing to trace
            continue
        table = pq.read_table(part, columns=["id", "metadata"])
        hit = pc.fill_null(pc.match_substring(table["metadata"], f'"{KEY}"'), False)
        for doc_id, meta in zip(*(table.filter(hit)[c].to_pylist() for c in ("id", "metadata"))):
            lineage = lineage_of(meta)
            if lineage is not None:
                found[doc_id] = int(lineage["generation"])
    return found


def scan_bucket(run_path: Path, store: TokenStore, bucket: str) -> BucketSynthetic:
    """The synthetic tokens of a bucket's training split, from its curated rows' lineage."""
    out = BucketSynthetic(bucket, store.n_tokens(bucket, "train"))
    generations = synthetic_generations(run_path / "curated", bucket)
    if not generations:
        return out
    for shard in store.shards(bucket, "train"):
        table = shard.doc_table()
        for doc_id, n in zip(table.column("id").to_pylist(), table.column("n_tokens").to_pylist()):
            g = generations.get(doc_id)
            if g is not None:
                out.synthetic_tokens += n
                out.synthetic_docs += 1
                out.generation = max(out.generation, g)
    return out


def assess(phases: Sequence[PhaseLike], buckets: dict[str, BucketSynthetic]) -> SyntheticReport:
    """Expected synthetic share per phase and for the run, and the run's generation."""
    report = SyntheticReport(buckets)
    total = sum(p.steps for p in phases)
    for p in phases:
        parts = {b: w * buckets[b].share for b, w in p.weights.items() if w > 0 and buckets[b].share > 0}
        share = sum(parts.values())
        report.phases[p.name] = {"share": share, "steps": p.steps, "contributions": parts}
        report.share += share * p.steps / total
        used = [buckets[b].generation for b, w in p.weights.items() if w > 0]
        report.generation = max([report.generation, *used])
    return report


def _bucket_words(b: BucketSynthetic, part: float) -> str:
    return (
        f"bucket {b.bucket!r} gives {part:.1%} ({b.share:.1%} of its {b.tokens:,} training tokens are "
        f"synthetic, generation {b.generation})"
    )


def check(report: SyntheticReport, limits: SyntheticLimitsConfig, several_phases: bool) -> list[str]:
    """Every limit the report crosses, in words that name the bucket, its figure and the limit."""
    problems = []
    for name, ph in report.phases.items():
        if ph["share"] > limits.max_share + 2e-6:  # the loader quantises shares to 2^-20
            where = f"phase {name!r}" if several_phases else "the mixture"
            parts = ", ".join(
                _bucket_words(report.buckets[b], c) for b, c in sorted(ph["contributions"].items(), key=lambda kv: -kv[1])
            )
            problems.append(
                f"{where} would draw {ph['share']:.1%} of its tokens from synthetic documents, above "
                f"mixture.synthetic.max_share {limits.max_share:g}: {parts}. {WHY} Lower those "
                f"buckets' weights, or raise mixture.synthetic.max_share knowingly."
            )
    used = {b for ph in report.phases.values() for b in ph["contributions"]}
    for b in sorted(used):
        g = report.buckets[b].generation
        if g > limits.max_generation:
            problems.append(
                f"bucket {b!r} holds synthetic documents of generation {g} (sampled from a model "
                f"that itself trained on generation-{g - 1} data), above "
                f"mixture.synthetic.max_generation {limits.max_generation}. {WHY} Sample from a "
                f"model trained on real data, or raise mixture.synthetic.max_generation knowingly."
            )
    return problems


def guard_mixture(
    run_path: Path, store: TokenStore, phases: Sequence[PhaseLike], limits: SyntheticLimitsConfig, events: Any = None
) -> SyntheticReport:
    """Measure the planned mixture and refuse it above the limits (SyntheticLimitError), before
    any step is trained. With synthetic data, a `synthetic_mixture` event records the figures."""
    used = sorted({b for p in phases for b, w in p.weights.items() if w > 0})
    buckets = {b: scan_bucket(run_path, store, b) for b in used}
    report = assess(phases, buckets)
    report.problems = check(report, limits, len(phases) > 1)
    if events is not None and any(b.synthetic_docs for b in buckets.values()):
        events.write(
            "train", "synthetic_mixture", **report.as_dict(), max_share=limits.max_share, max_generation=limits.max_generation
        )
    if report.problems:
        raise SyntheticLimitError("synthetic data over the limit: " + " Also: ".join(report.problems))
    return report


def used_buckets(store: TokenStore, mixture: MixtureConfig) -> list[str]:
    """Buckets a run's mixture gives weight to in any phase."""
    available = {b: store.n_tokens(b, "train") for b in store.buckets}
    used: set[str] = set()
    for k, phase in enumerate(phase_configs(mixture)):
        weights = phase.weights if phase.weights is not None else mixture.weights
        used |= set(resolve_weights(weights, available, f"mixture phase {k}"))
    return sorted(used)


def run_generation(run_path: Path, store: TokenStore, mixture: MixtureConfig) -> int:
    """The generation of a run's model: the newest synthetic generation among the buckets it
    trained on (0: real data only)."""
    return max([0, *(scan_bucket(run_path, store, b).generation for b in used_buckets(store, mixture))])
