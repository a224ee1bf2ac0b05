"""Runs stages in order with caching: a stage whose fingerprint matches its finished record is
skipped; a stage that reruns makes every later stage stale.

Stage functions take the RunDir and talk to each other only through files under it.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any, Callable

from rich.console import Console
from rich.text import Text

from tokenmill.runs import STAGES, RunDir

# paths and summaries are data: rich must not read markup from them (styles go in style=)
console = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)


def _inputs(run: RunDir, stage: str) -> Any:
    """Raw inputs outside the run directory that a stage depends on: curation's sources, and the
    tokenizer stage's `tokenizer.file` when it is given one."""
    if stage == "tokenizer":
        from tokenmill.tokenizer.stage import tokenizer_file_sha256

        return tokenizer_file_sha256(run)
    if stage != "curate":
        return None
    from tokenmill.data.curate import curate_inputs_fingerprint

    return curate_inputs_fingerprint(run.config.curate)


def _preflight(run: RunDir, stage: str) -> None:
    """The stage's config checks that need no work, before config.yaml or any output is written."""
    if stage == "curate":
        from tokenmill.data.curate import check_config

        check_config(run.config.curate)
    elif stage == "tokenizer":
        from tokenmill.data.curated import curated_buckets
        from tokenmill.tokenizer.stage import given_tokenizer, tokenizer_file

        curated_buckets(run.sub("curated"))  # no curated data: says so
        given = tokenizer_file(run)
        if given is not None:
            given_tokenizer(given, run.config.tokenizer.n_sentinels)
    elif stage == "train" and run.config.train.init_from:
        from tokenmill.train.checkpoint import latest_checkpoint
        from tokenmill.train.init_from import check_source

        if latest_checkpoint(run.sub("checkpoints")) is None:  # a resumed run restores its own weights
            check_source(run.config.train.init_from)
    elif stage == "tokenize" and not run.sub("tokenizer", "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{run.sub('tokenizer', 'tokenizer.json')}: no tokenizer here (run `tokenmill tokenizer train` first)"
        )


def _train(run: RunDir, resume: bool | None, fresh: bool = False) -> dict[str, Any]:
    from tokenmill.eval.evaluate import in_training_evaluator
    from tokenmill.train.checkpoint import checkpoint_fingerprint, latest_checkpoint
    from tokenmill.train.trainer import run_train

    ckpt_dir = run.sub("checkpoints")
    if fresh and ckpt_dir.exists():  # `run --force train`: retrain from step 0
        console.print(f"train: forced, removing {ckpt_dir}", style="yellow")
        shutil.rmtree(ckpt_dir)
        shutil.rmtree(run.sub("eval"), ignore_errors=True)
    latest = latest_checkpoint(ckpt_dir)
    if resume is None:  # the orchestrator decides: continue a matching run, restart a stale one
        resume = latest is not None and checkpoint_fingerprint(latest) == run.fingerprint("train")
        if latest is not None and not resume:
            console.print(f"train: config or data changed since {latest.name}; starting over", style="yellow")
            shutil.rmtree(ckpt_dir)
            shutil.rmtree(run.sub("eval"), ignore_errors=True)
        elif resume:
            console.print(f"train: continuing from {latest}", style="cyan")
    return run_train(run, resume=resume, on_eval=in_training_evaluator(run))


def stage_function(stage: str, resume: bool | None = None, fresh: bool = False) -> Callable[[RunDir], dict[str, Any]]:
    if stage == "curate":
        from tokenmill.data.curate import run_curate

        return run_curate
    if stage == "tokenizer":
        from tokenmill.tokenizer.stage import run_tokenizer

        return run_tokenizer
    if stage == "tokenize":
        from tokenmill.tokens.tokenize import run_tokenize

        return run_tokenize
    if stage == "train":
        return lambda run: _train(run, resume, fresh)
    if stage == "eval":
        from tokenmill.eval.evaluate import run_eval

        return run_eval
    if stage == "report":
        from tokenmill.report.build import run_report

        return run_report
    raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")


def run_stage(run: RunDir, stage: str, resume: bool | None = None, fresh: bool = False) -> dict[str, Any]:
    """Run one stage now (cached or not), record it finished, and mark later stages stale.

    For training, resume=None continues a run whose checkpoints match the config and restarts a
    stale one; fresh=True always restarts from step 0."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: train only, on finished data
        from tokenmill.train.distributed import check_torchrun_stage

        check_torchrun_stage(run, stage)
    main = os.environ.get("RANK", "0") == "0"  # one record of the stage per job: rank 0's
    inputs = _inputs(run, stage)
    _preflight(run, stage)
    if main:
        run.record_config()  # only now: a config the stage refuses never replaces the run's config.yaml
        run.invalidate_from(stage)
        run.events.write(stage, "stage_start")
        console.print(f"▶ {stage}", style="bold")
    t0 = time.time()
    summary = stage_function(stage, resume, fresh)(run) or {}
    summary = {**summary, "seconds": round(time.time() - t0, 2)}
    if main:
        run.mark_done(stage, inputs, summary)
        console.print(Text.assemble((f"✓ {stage}", "green"), f" {summary}"))
    return summary


def run_pipeline(run: RunDir, stages: tuple[str, ...] = STAGES, force: frozenset[str] = frozenset()) -> None:
    """Every stage in order; fresh ones are skipped unless forced, and the report always rebuilds."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from tokenmill.train.distributed import check_torchrun_stage

        check_torchrun_stage(run, "run")
    if "train" in stages and run.config.train.init_from:  # a corrupt source model: refused before hours of data stages
        from tokenmill.train.init_from import check_source

        check_source(run.config.train.init_from)
    for stage in stages:
        if stage not in force and stage != "report" and run.is_fresh(stage, _inputs(run, stage)):
            console.print(f"· {stage}: unchanged since it finished, skipped", style="dim")
            continue
        run_stage(run, stage, fresh=stage in force)
