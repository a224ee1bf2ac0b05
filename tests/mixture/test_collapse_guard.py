"""The collapse guard on a real token store: the synthetic share of a planned mixture and the
generation it reaches, refused above mixture.synthetic's limits before training starts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.config import MixtureConfig, RunConfig, SyntheticLimitsConfig
from tokenmill.mixture.curriculum import build_phases
from tokenmill.runs import RunDir
from tokenmill.mixture.collapse_guard import SyntheticLimitError, guard_mixture, run_generation, scan_bucket
from tokenmill.tokens.store import TokenStore


def write_curated_lineage(run: RunDir, bucket: str, generation: int | None, every: int = 1) -> None:
    """Curated rows for a bucket of the tiny store; every `every`-th document synthetic."""
    store = TokenStore(run.sub("tokens"))
    ids = [i for split in ("train", "val") for s in store.shards(bucket, split) for i in s.doc_table()["id"].to_pylist()]
    lineage = {"version": 1, "generation": generation, "run": "/runs/parent"}
    meta = [json.dumps({"id": i, "source": "synthetic", "metadata": {"synthetic": lineage}})
            if generation is not None and k % every == 0 else None for k, i in enumerate(ids)]
    out = run.sub("curated", bucket)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": ids, "text": ["x"] * len(ids), "metadata": pa.array(meta, pa.string())}),
                   out / "part-00000.parquet")


def phases(run: RunDir, **mixture):
    store = TokenStore(run.sub("tokens"))
    available = {b: store.n_tokens(b, "train") for b in store.buckets}
    return build_phases(MixtureConfig(**mixture), available, 32, 8, 2, 30)[0]


@pytest.fixture()
def synthetic_run(tiny_run: RunDir) -> RunDir:
    """tiny_run whose bucket "b" is all synthetic, generation 1; "a" is people's text."""
    write_curated_lineage(tiny_run, "a", None)
    write_curated_lineage(tiny_run, "b", 1)
    return tiny_run


def with_mixture(run: RunDir, **mixture) -> RunDir:
    data = run.config.model_dump()
    data["mixture"].update(mixture)
    return RunDir(RunConfig.model_validate(data), run.path)


def test_the_guard_refuses_60_percent_synthetic_naming_the_bucket_and_limit_and_accepts_40(synthetic_run):
    from tokenmill.train.trainer import run_train

    store, limits = TokenStore(synthetic_run.sub("tokens")), SyntheticLimitsConfig()
    with pytest.raises(SyntheticLimitError) as err:
        guard_mixture(synthetic_run.path, store, phases(synthetic_run, weights={"a": 0.4, "b": 0.6}), limits)
    msg = str(err.value)
    assert "60.0% of its tokens from synthetic documents" in msg and "bucket 'b' gives 60.0%" in msg
    assert "max_share 0.5" in msg and "generation 1" in msg
    report = guard_mixture(synthetic_run.path, store, phases(synthetic_run, weights={"a": 0.6, "b": 0.4}), limits)
    assert report.share == pytest.approx(0.4, abs=1e-5) and report.generation == 1 and not report.problems

    refused = with_mixture(synthetic_run, weights={"a": 0.4, "b": 0.6})
    with pytest.raises(SyntheticLimitError, match="bucket 'b'"):
        run_train(refused, progress=False)
    assert not refused.sub("checkpoints").exists()  # refused before the first step
    run_train(with_mixture(synthetic_run, weights={"a": 0.6, "b": 0.4}), progress=False)
    event = [e for e in synthetic_run.events.read() if e["kind"] == "synthetic_mixture"][-1]
    assert event["share"] == pytest.approx(0.4, abs=1e-5) and event["buckets"]["b"]["share"] == 1.0


def test_a_bucket_part_synthetic_counts_its_synthetic_tokens_exactly(tiny_run):
    write_curated_lineage(tiny_run, "b", 1, every=3)
    store = TokenStore(tiny_run.sub("tokens"))
    table = pa.concat_tables([s.doc_table() for s in store.shards("b", "train")])
    lengths = table["n_tokens"].to_pylist()
    scan = scan_bucket(tiny_run.path, store, "b")
    # train ids come first in write order, so the train documents 0, 3, 6, ... are the synthetic ones
    assert scan.synthetic_tokens == sum(lengths[::3]) and scan.synthetic_docs == len(lengths[::3])
    assert scan.share == pytest.approx(sum(lengths[::3]) / sum(lengths))
    assert scan_bucket(tiny_run.path, store, "a").share == 0.0  # no curated rows: nothing synthetic


def test_a_generation_above_the_limit_is_refused_naming_bucket_and_generation(tiny_run):
    write_curated_lineage(tiny_run, "b", 3)
    store = TokenStore(tiny_run.sub("tokens"))
    plan = phases(tiny_run, weights={"a": 0.7, "b": 0.3})
    with pytest.raises(SyntheticLimitError) as err:
        guard_mixture(tiny_run.path, store, plan, SyntheticLimitsConfig())
    assert "bucket 'b' holds synthetic documents of generation 3" in str(err.value)
    assert "max_generation 2" in str(err.value) and "max_share" not in str(err.value).split("max_generation")[0]
    assert guard_mixture(tiny_run.path, store, plan, SyntheticLimitsConfig(max_generation=3)).generation == 3


def test_each_phase_is_held_to_the_limit(synthetic_run):
    store = TokenStore(synthetic_run.sub("tokens"))
    plan = phases(synthetic_run, phases=[{"name": "main", "fraction": 0.8, "weights": {"a": 1.0}},
                                         {"name": "anneal", "fraction": 0.2, "weights": {"b": 1.0}, "anneal": True}])
    with pytest.raises(SyntheticLimitError, match="phase 'anneal' would draw 100.0%"):
        guard_mixture(synthetic_run.path, store, plan, SyntheticLimitsConfig())
    report = guard_mixture(synthetic_run.path, store, plan, SyntheticLimitsConfig(max_share=1.0))
    assert report.phases["main"]["share"] == 0.0 and report.share == pytest.approx(0.2, abs=0.02)


def test_the_run_generation_counts_only_buckets_the_mixture_draws_from(synthetic_run):
    store = TokenStore(synthetic_run.sub("tokens"))
    assert run_generation(synthetic_run.path, store, MixtureConfig(weights={"a": 1.0})) == 0
    assert run_generation(synthetic_run.path, store, MixtureConfig()) == 1  # proportional: b is used
    # no curated rows at all (a bare token store): nothing to trace, generation 0
    assert run_generation(Path("/nonexistent"), store, MixtureConfig()) == 0


def test_the_lineage_scan_is_kept_until_the_curate_stage_runs_again(tiny_run, monkeypatch):
    from tokenmill.mixture import collapse_guard

    write_curated_lineage(tiny_run, "b", 2)
    curated = tiny_run.sub("curated")
    first = collapse_guard.synthetic_generations(curated, "b")
    assert first and set(first.values()) == {2}
    assert not tiny_run.sub(".cache").exists()  # no finished curate stage: nothing to key a cache on
    tiny_run.mark_done("curate")
    assert collapse_guard.synthetic_generations(curated, "b") == first  # scanned, and kept

    def no_scan(parts):
        raise AssertionError("scanned again")

    monkeypatch.setattr(collapse_guard, "_scan_generations", no_scan)
    assert collapse_guard.synthetic_generations(curated, "b") == first  # from the cache
    tiny_run.mark_done("curate", inputs="new sources")  # the curate stage ran again
    with pytest.raises(AssertionError, match="scanned again"):
        collapse_guard.synthetic_generations(curated, "b")
