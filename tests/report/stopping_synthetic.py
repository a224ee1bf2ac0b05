"""Synthetic runs for the stopping-signal tests: a train_start with its plan, a train_step per
step and eval records with chosen losses, in memory or written to a run directory."""

import json
from typing import Callable

from tokenmill.runs import RunDir

TOKENS_PER_STEP = 1000
LAW = {"E": 1.8, "A": 300.0, "B": 500.0, "alpha": 0.3, "beta": 0.3}


def plan(max_steps: int, epochs: dict[str, float], weights: dict[str, float]) -> dict:
    """A one-phase packed plan (seq_len 10, 100 rows a step) whose buckets are read `epochs` times."""
    samples = {b: round(w * 100 * max_steps) for b, w in weights.items()}
    return {"world_size": 1, "grad_accum": 1, "max_steps": max_steps, "packing": "packed",
            "token_budget": max_steps * TOKENS_PER_STEP,
            "phases": [{"name": "all", "start_step": 1, "end_step": max_steps, "steps": max_steps, "seq_len": 10,
                        "rows_per_micro_batch": 100, "weights": weights, "samples": sum(samples.values()),
                        "bucket_samples": samples}],
            "buckets": {b: {"available_tokens": samples[b] * 10 / e, "docs": 10, "tokens": samples[b] * 10,
                            "epochs": e} for b, e in epochs.items()}}


def events(steps: list[int], heldout: Callable[[int], dict[str, float]], train: Callable[[int], float], *,
           non_embedding: int, params: int | None = None,
           run_plan: dict | None = None) -> tuple[list[dict], list[dict]]:
    """train_start, a train_step per step (loss `train(step)`) and an eval record at each of
    `steps` with per-bucket losses `heldout(step)` (every bucket 100 held-out tokens)."""
    last = steps[-1]
    out = [{"kind": "train_start", "step": 0, "params": params or non_embedding, "non_embedding_params": non_embedding,
            "tokens_per_step": TOKENS_PER_STEP, "plan": run_plan}]
    out += [{"kind": "train_step", "step": s, "loss": train(s), "tokens": s * TOKENS_PER_STEP}
            for s in range(1, last + 1)]
    evals = [{"step": s, "buckets": {b: {"loss": v, "tokens": 100} for b, v in heldout(s).items()}} for s in steps]
    return out, evals


def write_run(run: RunDir, evs: list[dict], evals: list[dict]) -> RunDir:
    """Write `events` output to the run's events.jsonl and eval/<step>.json."""
    for e in evs:
        e = dict(e)
        run.events.write("train", e.pop("kind"), **e)
    run.sub("eval").mkdir(exist_ok=True)
    for rec in evals:
        run.sub("eval", f"{rec['step']}.json").write_text(json.dumps(rec))
    return run
