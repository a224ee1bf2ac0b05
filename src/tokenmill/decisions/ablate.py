"""`tokenmill ablate ABLATE.yaml`: what each curation step buys in model quality, measured.

FineWeb, DCLM and the Llama 3 report justify every filter by training models with and without
it (the quality of your data is a scaling law: decide on small models,
then extrapolate). An ablation does that with the real pipeline:

  1. evaluation set (ablate_eval.py): the sources through extract + normalize only; a hash of
     the document id picks up to `eval.max_docs` per bucket (plus any `eval.files`). The same
     bytes score every arm.
  2. arms: each arm's curate config (ablate_config.py) runs the real curate stage on the same raw
     sources, with the evaluation set in its decontamination, so no arm trains on an evaluation
     document or a near-copy. Arms that would curate identically are refused.
  3. one tokenizer, trained on `tokenizer_from`'s data (the reference by default); every other
     arm tokenizes with that file (`tokenizer.file`), so bits-per-byte compare like with like.
  4. runs: every arm × size × seed, each a normal run directory linked to its arm's data, trained
     on the size's token budget (equal tokens: an arm with less data repeats it), scored at the
     end on every evaluation slice (as probe sets) and the base config's tasks. Runs go seed by
     seed across arms, so a stopped ablation holds complete pairs.
  5. ablate.json (ablate_stats.py): paired Δ per slice and size with t intervals over seeds, each
     arm's bpb-vs-compute line and whether its gap holds, grows or shrinks with size, the
     data-efficiency multiplier, and the step-off arms ranked by what their step buys.

Layout: <root>/<name>/{ablate.yaml, eval/, arms/<arm>/data/, arms/<arm>/runs/<size>-s<seed>/,
ablate.json, ablate.html}. Running the command again continues: finished curation, tokenization
and training are skipped, an interrupted run resumes from its last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from tokenmill import json_limits
from tokenmill.config import RunConfig, load_config
from tokenmill.decisions.ablate_config import (
    AblateConfig,
    AblateError,
    ArmConfig,
    arm_curate,
    arm_steps,
    check_distinct,
    load_ablate_config,
)
from tokenmill.decisions.ablate_eval import SET_FILE, build_eval_set
from tokenmill.decisions.ablate_stats import POWER, detectable_delta, summarize
from tokenmill.errors import UserError
from tokenmill.eval.config import ProbeConfig
from tokenmill.runs import RunDir, atomic_write_text, sha256_json
from tokenmill.scaling.sweep import DATA_STAGES, link_data
from tokenmill.runs import claim_experiment_dir

RESULT_FILE = "ablate.json"
EXPERIMENT_LINK = "experiment.json"  # in every run of the ablation: the report links the page


def _with(base: RunConfig, **sections: Any) -> RunConfig:
    data = base.model_dump(mode="json")
    data.update(sections)
    return RunConfig.model_validate(data)


def eval_set(cfg: AblateConfig, base: RunConfig, out: Path, progress: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """Curate the sources with extract + normalize only and pick the evaluation set from them.
    The set's directory is named by what it depends on, so a changed set makes every arm's
    decontamination, hence its curation, stale."""
    curate = arm_curate(base, "eval", ArmConfig(steps=["extract", "normalize"]), None, 0.0)
    curate["decontaminate"] = {**curate["decontaminate"], "eval_sets": [], "set_max_overlap": {}}
    rc = _with(base, name="source", root=str(out / "eval"), curate=curate)
    src = RunDir.create(rc, out / "eval" / "source")
    from tokenmill.pipeline import run_pipeline

    progress("evaluation set: the sources through extract + normalize only")
    run_pipeline(src, ("curate",))
    key = sha256_json({"eval": cfg.eval.model_dump(mode="json"), "source": src.finished_record("curate")["fingerprint"]})[:10]
    where = out / "eval" / f"set-{key}"
    manifest = build_eval_set(src.sub("curated"), cfg.eval, where)
    manifest["source_seconds"] = src.finished_record("curate")["summary"].get("seconds", 0)
    progress("evaluation set: " + ", ".join(f"{s} {v['docs']} docs" for s, v in manifest["slices"].items()))
    return where, manifest


def arm_order(cfg: AblateConfig) -> list[str]:
    """The arm that trains the tokenizer first; then the others as listed."""
    first = cfg.tokenizer_from or cfg.reference
    return [first, *(a for a in cfg.arms if a != first)]


def prepare_arms(
    cfg: AblateConfig, base: RunConfig, out: Path, set_dir: Path, progress: Callable[[str], None]
) -> dict[str, RunDir]:
    """Each arm's curated data and token store; one tokenizer for all."""
    from tokenmill.pipeline import run_pipeline

    curates = {a: arm_curate(base, a, cfg.arms[a], set_dir / SET_FILE, cfg.eval.max_overlap) for a in cfg.arms}
    check_distinct(curates)
    order = arm_order(cfg)
    tok_file: str | None = None
    data: dict[str, RunDir] = {}
    for i, a in enumerate(order):
        tokenizer = base.tokenizer.model_dump(mode="json") | ({"file": tok_file} if tok_file else {})
        rc = _with(base, name="data", root=str(out / "arms" / a), curate=curates[a], tokenizer=tokenizer)
        progress(f"arm {a} ({i + 1}/{len(order)}): curate with steps {', '.join(curates[a]['steps'])}")
        data[a] = RunDir.create(rc, out / "arms" / a / "data")
        try:
            run_pipeline(data[a], DATA_STAGES)
        except UserError as exc:  # e.g. a step that empties a bucket: say which arm asked for it
            raise AblateError(f"arm {a!r}: {exc}") from exc
        if tok_file is None:
            tok_file = str(data[a].sub("tokenizer", "tokenizer.json").resolve())
    return {a: data[a] for a in cfg.arms}


def run_config(cfg: AblateConfig, data: RunDir, arm: str, size: int, seed: int, slices: dict[str, Any]) -> RunConfig:
    """The arm's data config with the size's model, its token budget and the seed; the
    evaluation slices scored as probe sets at the end of training."""
    from tokenmill.train.budget import resolve_budget, tokens_per_step

    s = cfg.sizes[size]
    base = data.config
    tps = tokens_per_step(resolve_budget(base.train))
    steps = max(1, math.ceil(s.tokens / tps))
    train = base.train.model_copy(
        update={
            "max_tokens": steps * tps,
            "max_steps": steps,
            "seed": seed,
            "warmup_tokens": int(cfg.warmup_fraction * steps * tps),
            "eval_every": 0,
        }
    )
    model = base.model.model_copy(update={"d_model": s.d_model, "n_layers": s.n_layers, "n_heads": s.n_heads})
    ev = base.eval.model_copy(update={"probes": [ProbeConfig(name=k, path=v["file"]) for k, v in slices.items()]})
    return _with(
        base,
        name=f"{s.name}-s{seed}",
        root=str(data.path.parent / "runs"),
        model=model.model_dump(mode="json"),
        train=train.model_dump(mode="json"),
        eval=ev.model_dump(mode="json"),
    )


def train_run(rc: RunConfig, data: RunDir, page: Path) -> RunDir:
    """Train the run (a finished one is skipped, an interrupted one resumes)."""
    from tokenmill.pipeline import run_pipeline

    run = RunDir.create(rc, Path(rc.root) / rc.name)
    link_data(data, run)
    atomic_write_text(
        run.sub(EXPERIMENT_LINK),
        json.dumps({"kind": "ablate", "page": os.path.relpath(page, run.path), "name": page.parent.name}),
    )
    run_pipeline(run, ("train",))
    return run


def run_record(run: RunDir, arm: str, size: str, seed: int) -> dict[str, Any]:
    """The figures ablate_stats reads: each slice's bpb (with its bytes), task accuracies, FLOPs."""
    from tokenmill.scaling.flops import flops_per_token
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.trainer import resolve_model_config

    done = run.finished_record("train")["summary"]
    final = json_limits.load_file(run.sub("eval", f"{done['steps']}.json"))
    rc = run.config
    model = resolve_model_config(rc.model, TokenStore(run.sub("tokens")), rc.train.seq_len)
    return {
        "arm": arm,
        "size": size,
        "seed": seed,
        "run": str(run.path),
        "steps": done["steps"],
        "tokens": done["tokens"],
        "flops": flops_per_token(model, rc.train.seq_len) * done["tokens"],
        "seconds": done.get("seconds"),
        "slices": {k: {m: v[m] for m in ("bpb", "loss", "bytes", "tokens", "docs")} for k, v in final["probes"].items()},
        "tasks": {t["name"]: t["acc"] for t in final.get("tasks", [])},
    }


def tokens_digest(tokens: Path) -> str:
    """sha256 over the token store's training files, streamed: two arms whose curation kept the
    same documents train on the same bytes, and their Δ is 0 by construction, not by measurement."""
    h = hashlib.sha256()
    for path in sorted(tokens.glob("*/train-*.bin")):
        h.update(path.relative_to(tokens).as_posix().encode())
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def arm_info(cfg: AblateConfig, base: RunConfig, data: dict[str, RunDir]) -> dict[str, dict[str, Any]]:
    from tokenmill.tokens.store import TokenStore

    out: dict[str, dict[str, Any]] = {}
    for a, d in data.items():
        store = TokenStore(d.sub("tokens"))
        tokens = sum(store.n_tokens(b, "train") for b in store.buckets)
        arm = cfg.arms[a]
        out[a] = {
            "steps": arm_steps(base, arm),
            "without": arm.without,
            "set": arm.set,
            "note": arm.note,
            "train_tokens": tokens,
            "buckets": {b: store.n_tokens(b, "train") for b in store.buckets},
            "epochs": {s.name: s.tokens / tokens if tokens else None for s in cfg.sizes},
            "data_seconds": sum((d.finished(st) or {}).get("summary", {}).get("seconds", 0) for st in DATA_STAGES),
            "data": str(d.path),
        }
    same = same_data({a: tokens_digest(d.sub("tokens")) for a, d in data.items()})
    for a in out:
        out[a]["same_data_as"] = same[a]
    return out


def same_data(digests: dict[str, str]) -> dict[str, str | None]:
    """For each arm, the first arm listed before it with the same training data (None: its own)."""
    first: dict[str, str] = {}
    return {a: (f if (f := first.setdefault(d, a)) != a else None) for a, d in digests.items()}


def run_ablate(path: Path, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Build the evaluation set, curate and tokenize every arm, train every run not yet finished,
    and write ablate.json (rewritten after every run, so a stopped ablation shows what it has)."""
    t0 = time.time()
    cfg = load_ablate_config(path)
    base = load_config(cfg.base, cfg.set, f"{path}: set:")
    out = Path(cfg.root) / cfg.name
    claim_experiment_dir(out, "ablate", cfg.name, "ablate.yaml")
    atomic_write_text(out / "ablate.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    set_dir, manifest = eval_set(cfg, base, out, progress)
    data = prepare_arms(cfg, base, out, set_dir, progress)
    arms = arm_info(cfg, base, data)
    page = out / "ablate.html"
    planned = planned_power(cfg)
    if planned is not None:
        progress(
            f"this design ({planned['seeds']} seeds, expected paired sd {planned['paired_sd']:.4f}) detects "
            f"a Δ bpb of {planned['detectable_bpb']:.4f} or more with {planned['power']:.0%} power"
        )
    plan = [(seed, size, arm) for size in range(len(cfg.sizes)) for seed in cfg.seeds for arm in arm_order(cfg)]
    records: list[dict[str, Any]] = []
    train_start = time.time()
    for k, (seed, size, arm) in enumerate(plan):
        s = cfg.sizes[size].name
        eta = "" if k == 0 else f", about {(time.time() - train_start) / k * (len(plan) - k) / 60:.0f} min left"
        progress(f"run {k + 1}/{len(plan)}: arm {arm}, size {s}, seed {seed}{eta}")
        run = train_run(run_config(cfg, data[arm], arm, size, seed, manifest["slices"]), data[arm], page)
        records.append(run_record(run, arm, s, seed))
        if k + 1 == len(plan) or plan[k + 1][0] != seed:  # a complete set of pairs: write what it shows
            _write(out, cfg, manifest, arms, records, t0)
    return _write(out, cfg, manifest, arms, records, t0)


def planned_power(cfg: AblateConfig) -> dict[str, Any] | None:
    """The smallest Δ bpb the design detects, from the spread the user expects (before any run)."""
    if cfg.expected_paired_sd is None:
        return None
    n = len(cfg.seeds)
    return {
        "seeds": n,
        "paired_sd": cfg.expected_paired_sd,
        "power": POWER,
        "detectable_bpb": detectable_delta(cfg.expected_paired_sd, n, cfg.confidence),
    }


def _write(
    out: Path, cfg: AblateConfig, manifest: dict[str, Any], arms: dict[str, Any], records: list[dict[str, Any]], t0: float
) -> dict[str, Any]:
    ran = {r["arm"] for r in records}
    result = {
        "dir": str(out),
        "name": cfg.name,
        "reference": cfg.reference,
        "baseline": cfg.baseline_arm,
        "tokenizer_from": cfg.tokenizer_from or cfg.reference,
        "confidence": cfg.confidence,
        "sizes": [s.model_dump() for s in cfg.sizes],
        "seeds": cfg.seeds,
        "eval_set": manifest,
        "arms": arms,
        "runs": records,
        "planned_power": planned_power(cfg),
        "wall_seconds": time.time() - t0,
        "train_seconds": sum(r["seconds"] or 0 for r in records),
        "data_seconds": sum(a["data_seconds"] for a in arms.values()) + manifest.get("source_seconds", 0),
    }
    if cfg.reference in ran and len(ran) > 1:
        result.update(
            summarize(
                records,
                {a: v for a, v in arms.items() if a in ran},
                [s.model_dump() for s in cfg.sizes],
                cfg.reference,
                cfg.baseline_arm,
                cfg.confidence,
            )
        )
    atomic_write_text(out / RESULT_FILE, json.dumps(result, indent=1))
    return result
