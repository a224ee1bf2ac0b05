"""Model collapse across generations, and the guard that prevents it (issue 18's acceptance).

Generation 0 trains on the demo's real text (examples/synth/collapse_base.yaml). Each later
generation samples documents from the previous generation's model (`tokenmill synth`: ancestral
sampling, temperature 1, one real prompt token, fixed-length blocks of 127 new tokens as Shumailov
et al. sample fixed-length blocks — without it each generation ends its documents sooner and the
synthetic corpus shrinks) and trains a fresh model of the same size for the
same tokens, in one of two arms:

  replace  100% synthetic: only the previous generation's samples (the setting of Shumailov et
           al. 2024). The default guard refuses it; its refusal is recorded, and the arm runs
           with mixture.synthetic.max_share = 1.0 and max_generation = the generations asked.
  capped   the real buckets plus the previous generation's samples at the guard's default share,
           mixture.synthetic.max_share = 0.5; a generation the default max_generation refuses is
           recorded and run with max_generation raised.

Per model: held-out bits-per-byte on the real buckets (the same held-out documents in every run,
checked), and the collapse figures of the documents it samples (distinct-1..4, vocabulary used,
unigram entropy, tail mass) beside windows of real text of the same lengths. Every run is a
normal tokenmill run directory under --work (curate -> tokenizer -> tokenize -> train); the
tokenizer is trained on the real buckets only and is checked to be identical in every run.
Running the script again reuses finished runs and samples.

    .venv/bin/python benchmarks/bench_model_collapse.py --work runs/collapse \\
        --out benchmarks/results/model_collapse.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch
import yaml

from tokenmill.config import RunConfig, SyntheticLimitsConfig
from tokenmill.mixture.curriculum import build_phases
from tokenmill.pipeline import run_pipeline
from tokenmill.runs import RunDir
from tokenmill.mixture.collapse_guard import SyntheticLimitError, guard_mixture
from tokenmill.synth.run import SynthConfig, synthesize
from tokenmill.tokens.store import TokenStore

BASE = Path(__file__).resolve().parents[1] / "examples" / "synth" / "collapse_base.yaml"
REAL = ("code", "reference", "web")
DATA_STAGES = ("curate", "tokenizer", "tokenize")
STAGES = (*DATA_STAGES, "train")


def run_config(base: dict[str, Any], work: Path, name: str, samples: Path | None, weights: dict[str, float] | None,
               limits: dict[str, Any] | None) -> RunConfig:
    """The base run, plus the samples as a synthetic source, the mixture weights and guard limits."""
    data = json.loads(json.dumps(base))
    data.update(name=name, root=str(work))
    if samples is not None:
        data["curate"]["sources"].append({"kind": "files", "path": str(samples.resolve()), "format": "jsonl",
                                          "bucket": "synthetic", "license": "synthetic", "synthetic": True})
    data.setdefault("mixture", {}).update(weights=weights, synthetic=limits or {})
    return RunConfig.model_validate(data)


ENVIRONMENT = dict(os.environ)


def train(cfg: RunConfig, stages: tuple[str, ...] = STAGES) -> RunDir:
    # pydoc's page for cgi prints os.environ, and torch adds variables to it while training: every
    # run's curation sees the environment the script started with, so its real text is the same
    os.environ.clear()
    os.environ.update(ENVIRONMENT)
    run = RunDir.create(cfg)
    run_pipeline(run, stages)
    return run


def default_refusal(run: RunDir) -> str | None:
    """What the guard says of the run's planned mixture under the default mixture.synthetic limits
    (the trainer's own check, here without training)."""
    store = TokenStore(run.sub("tokens"))
    tc = run.config.train
    available = {b: store.n_tokens(b, "train") for b in store.buckets}
    phases = build_phases(run.config.mixture, available, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps)[0]
    try:
        guard_mixture(run.path, store, phases, SyntheticLimitsConfig())
    except SyntheticLimitError as exc:
        return str(exc)
    return None


def train_guarded(base: dict[str, Any], work: Path, name: str, samples: Path, weights: dict[str, float],
                  override: dict[str, Any]) -> tuple[RunDir, str | None]:
    """Record what the default guard says, then train with the arm's limits (`override`)."""
    run = train(run_config(base, work, name, samples, weights, override), stages=DATA_STAGES)
    refusal = default_refusal(run)
    if refusal:
        print(f"  guard (default limits) refuses {name}: {refusal}")
    run_pipeline(run, ("train",))
    return run, refusal


def control(g0: RunDir, name: str, **train: Any) -> dict[str, Any]:
    """g0 trained again on its own data with other train settings: seed noise, half the tokens."""
    from tokenmill.scaling.sweep import link_data

    data = g0.config.model_dump()
    data["train"].update(train)
    data["name"] = name
    run = RunDir.create(RunConfig.model_validate(data))
    link_data(g0, run)
    run_pipeline(run, ("train",))
    return {"run": str(run.path), "train": train, "real_bpb": real_bpb(run)}


def sample(run: RunDir, docs: int, seed: int) -> dict[str, Any]:
    """`tokenmill synth` on the run (reused when its manifest was made with the same config)."""
    cfg = SynthConfig.model_validate({
        "run": str(run.path), "name": f"samples-{docs}", "docs": docs, "seed": seed, "temperature": 1.0,
        "top_p": 1.0, "max_new_tokens": 127, "min_new_tokens": 127, "batch_size": 128, "prompt": {"tokens": 1},
        "metrics": {"max_tokens": 100_000, "tail": 0.1, "real_docs": 0}})
    manifest = run.sub("synthetic", cfg.name, "manifest.json")
    if manifest.exists() and json.loads(manifest.read_text())["config"] == cfg.model_dump(mode="json"):
        return json.loads(manifest.read_text())
    return synthesize(cfg)


def real_bpb(run: RunDir) -> dict[str, float]:
    """Held-out bits-per-byte per real bucket and over all of them (byte-weighted) at the last step."""
    steps = run.finished("train")["summary"]["steps"]
    buckets = json.loads(run.sub("eval", f"{steps}.json").read_text())["buckets"]
    nll = sum(buckets[b]["loss"] * buckets[b]["tokens"] for b in REAL)
    n_bytes = sum(buckets[b]["bytes"] for b in REAL)
    return {**{b: buckets[b]["bpb"] for b in REAL}, "real": nll / (math.log(2) * n_bytes)}


def guard_event(run: RunDir) -> dict[str, Any] | None:
    events = [e for e in run.events.read() if e["kind"] == "synthetic_mixture"]
    return None if not events else {"share": events[-1]["share"], "generation": events[-1]["generation"]}


def held_out_ids(run: RunDir) -> dict[str, list[str]]:
    """The real buckets' held-out document ids (must be the same in every run)."""
    return {b: sorted(i for p in sorted(run.sub("tokens", b).glob("val-*.docs.parquet"))
                      for i in pq.read_table(p, columns=["id"])["id"].to_pylist()) for b in REAL}


def record(run: RunDir, gen: int, samples: dict[str, Any], refusal: str | None) -> dict[str, Any]:
    m = samples["metrics"]
    return {"generation": gen, "run": str(run.path), "weights": run.config.mixture.weights,
            "guard": guard_event(run), "refused_by_default_limits": refusal,
            "train_seconds": run.finished("train")["summary"]["seconds"],
            "real_bpb": real_bpb(run), "samples": m["samples"], "real_windows": m["real"], "ratio": m["ratio"],
            "sampled_docs": samples["docs"], "sampled_tokens": samples["new_tokens"],
            "sampling_seconds": samples["seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("runs/collapse"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/model_collapse.json"))
    ap.add_argument("--generations", type=int, default=3)
    ap.add_argument("--docs", type=int, default=6400, help="Documents sampled per generation (~128 tokens each).")
    ap.add_argument("--metric-docs", type=int, default=1024, help="Documents sampled from the last generation (figures only).")
    args = ap.parse_args()
    t0 = time.time()
    base = yaml.safe_load(BASE.read_text())
    g0 = train(run_config(base, args.work, "g0", None, None, None))
    tokens = {b: g0.finished("tokenize")["summary"][b]["train"] for b in REAL}
    total = sum(tokens.values())
    capped = {b: 0.5 * n / total for b, n in tokens.items()} | {"synthetic": 0.5}
    arms = {"replace": ({"synthetic": 1.0}, {"max_share": 1.0, "max_generation": args.generations}),
            "capped": (capped, {"max_share": 0.5, "max_generation": args.generations})}
    first = sample(g0, args.docs, seed=0)
    gen0 = record(g0, 0, first, None)
    results: dict[str, list[dict[str, Any]]] = {arm: [gen0] for arm in arms}
    runs = [g0]
    for arm, (weights, override) in arms.items():
        parent_samples = Path(first["samples"])
        for gen in range(1, args.generations + 1):
            print(f"▶ {arm} generation {gen}")
            run, refusal = train_guarded(base, args.work, f"{arm}-g{gen}", parent_samples, weights, override)
            last = gen == args.generations
            out = sample(run, args.metric_docs if last else args.docs, seed=gen)
            results[arm].append(record(run, gen, out, refusal))
            parent_samples, runs = Path(out["samples"]), runs + [run]
            print(f"  real bpb {results[arm][-1]['real_bpb']['real']:.4f}, samples distinct-2 "
                  f"{out['metrics']['samples']['distinct_2']:.4f}, tail mass {out['metrics']['samples']['tail_mass']:.4f}")
    controls = {"g0, train.seed 2 (run-to-run noise)": control(g0, "g0-seed2", seed=2),
                "g0, half the tokens (the real tokens a capped run sees)": control(
                    g0, "g0-half", max_steps=base["train"]["max_steps"] // 2,
                    warmup_steps=base["train"]["warmup_steps"] // 2, ckpt_every=base["train"]["max_steps"] // 2)}
    checks = {"tokenizer_sha256": sorted({r.finished("tokenizer")["summary"]["tokenizer_sha256"] for r in runs}),
              "held_out_identical": all(held_out_ids(r) == held_out_ids(g0) for r in runs),
              "real_train_tokens_identical": all({b: r.finished("tokenize")["summary"][b]["train"] for b in REAL}
                                                 == tokens for r in runs)}
    out = {"machine": {"cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                       "python": platform.python_version(), "torch": torch.__version__, "threads": 1},
           "base_config": str(BASE.relative_to(BASE.parents[2])), "real_train_tokens": tokens, "checks": checks,
           "docs_per_generation": args.docs, "arms": results, "controls": controls, "seconds": round(time.time() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    summary(out)


def summary(out: dict[str, Any]) -> None:
    print(f"checks: {out['checks']}")
    for arm, gens in out["arms"].items():
        for g in gens:
            s = g["samples"]
            print(f"{arm:8s} g{g['generation']}  real bpb {g['real_bpb']['real']:.4f}  distinct-1..4 "
                  f"{s['distinct_1']:.4f} {s['distinct_2']:.4f} {s['distinct_3']:.4f} {s['distinct_4']:.4f}  "
                  f"vocab {s['vocab_used']}  entropy {s['entropy_bits']:.3f}  tail {s['tail_mass']:.4f}  "
                  f"guard {g['guard']}")
    for name, c in out["controls"].items():
        print(f"control {name}: real bpb {c['real_bpb']['real']:.4f}")
    print(f"{out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
