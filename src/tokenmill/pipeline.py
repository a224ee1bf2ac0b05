"""Runs stages in order with caching: a stage whose fingerprint matches its finished record is
skipped; a stage that reruns makes every later stage stale.

Stage functions take the RunDir and talk to each other only through files under it.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from rich.console import Console
from rich.text import Text

from tokenmill.runs import STAGES, RunDir
from tokenmill.summaries import summary_line

DATA_STAGES = ("curate", "tokenizer", "tokenize")  # what training reads is rebuilt when one of them reruns

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


def _preflight(run: RunDir, stage: str, rebuilt_from: str | None = None, resume: bool | None = None) -> None:
    """The stage's config checks that need no work, before config.yaml or any output is written,
    moved or deleted. `rebuilt_from`: the first earlier stage that reruns before this one in this
    run (None: the files this stage reads are on disk as it will read them); what those files
    would tell is then checked from the config as far as it can be."""
    if stage == "curate":
        from tokenmill.data.curate import check_config

        check_config(run.config.curate)
    elif stage == "tokenizer":
        from tokenmill.data.curated import curated_buckets
        from tokenmill.tokenizer.stage import given_tokenizer, tokenizer_file

        if rebuilt_from is None:
            curated_buckets(run.sub("curated"))  # no curated data: says so
        given = tokenizer_file(run)
        if given is not None:
            given_tokenizer(given, run.config.tokenizer.n_sentinels)
    elif stage == "train":
        from tokenmill.train.preflight import check_train

        check_train(run, rebuilt_from, resume)
    elif stage == "eval":
        from tokenmill.eval.tasks import check_eval_files

        check_eval_files(run.config.eval)
    elif stage == "tokenize" and rebuilt_from is None and not run.sub("tokenizer", "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{run.sub('tokenizer', 'tokenizer.json')}: no tokenizer here (run `tokenmill tokenizer train CONFIG` first)"
        )


def _continue_or_set_aside(run: RunDir, resume: bool | None, fresh: bool) -> bool | None:
    """Whether training continues from the run's checkpoints. The orchestrator's call (resume=None,
    `tokenmill run`) continues a run whose newest checkpoint matches the config and data; else, and
    under `--force train`, the checkpoints and their evaluations are moved aside, never deleted
    (train/set_aside.py), and the line names where. Runs after every config check passed."""
    from tokenmill.train.checkpoint import checkpoint_fingerprint, latest_checkpoint, list_checkpoints
    from tokenmill.train.set_aside import set_aside

    if resume is not None and not fresh:  # `tokenmill train [--resume]`: the user said
        return resume
    ckpt_dir = run.sub("checkpoints")
    latest = None if fresh else latest_checkpoint(ckpt_dir)
    if not fresh and latest is None:  # none verifies: the trainer says so, and touches nothing
        return bool(list_checkpoints(ckpt_dir)) or None
    if latest is not None and checkpoint_fingerprint(latest) == run.fingerprint("train"):
        console.print(f"train: continuing from {latest}", style="cyan")
        return True
    why, reason = ("forced (--force train)", "forced") if fresh else _what_changed(run, latest)
    where = set_aside(run, reason)
    if where is not None:
        run.events.write("train", "checkpoints_set_aside", path=str(where), reason=reason)
        console.print(f"train: {why}; moved checkpoints/ and eval/ aside to {where}; training starts from step 0", style="yellow")
    return False


def _what_changed(run: RunDir, latest: Any) -> tuple[str, str]:
    """(what the line says, the set-aside directory's reason) for a checkpoint of another setup."""
    from tokenmill.train.checkpoint import read_state
    from tokenmill.train.trainer import setup_changes

    changes = setup_changes(read_state(latest), run.config)
    if not changes:
        return f"the data changed since {latest.name}", "data-changed"
    more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
    return f"config changed since {latest.name} ({', '.join(changes[:3])}{more})", "config-changed"


def _train(run: RunDir, resume: bool | None) -> dict[str, Any]:
    """Training, once run_stage checked the config and decided to continue or start over."""
    from tokenmill.eval.evaluate import in_training_evaluator
    from tokenmill.train.trainer import run_train

    # each in-training evaluation says what it measured, one line per bucket
    return run_train(run, resume=bool(resume), on_eval=in_training_evaluator(run, say=lambda line: console.print(line)))


def stage_function(stage: str, resume: bool | None = None) -> Callable[[RunDir], dict[str, Any]]:
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
        return lambda run: _train(run, resume)
    if stage == "eval":
        from tokenmill.eval.evaluate import run_eval

        return run_eval
    if stage == "report":
        from tokenmill.report.build import run_report

        return run_report
    raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")


def run_stage(run: RunDir, stage: str, resume: bool | None = None, fresh: bool = False) -> dict[str, Any]:
    """Run one stage now (cached or not), record it finished, and mark later stages stale.

    Every config check of the stage comes first; only then are checkpoints moved aside,
    config.yaml rewritten and stage records dropped. For training, resume=None continues a run
    whose checkpoints match the config and data and starts a stale one over (its checkpoints
    moved aside); fresh=True always starts over from step 0, moving them aside too."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: train only, on finished data
        from tokenmill.train.distributed import check_torchrun_stage

        check_torchrun_stage(run, stage)
    main = os.environ.get("RANK", "0") == "0"  # one record of the stage per job: rank 0's
    inputs = _inputs(run, stage)
    _preflight(run, stage, resume=None if fresh else resume)
    if stage == "train" and main:
        resume = _continue_or_set_aside(run, resume, fresh)
    if main:
        run.record_config()  # only now: a config the stage refuses never replaces the run's config.yaml
        run.invalidate_from(stage)
        run.events.write(stage, "stage_start")
        console.print(f"▶ {stage}", style="bold")
    t0 = time.time()
    summary = stage_function(stage, resume)(run) or {}
    summary = {**summary, "seconds": round(time.time() - t0, 2)}
    if main:
        run.mark_done(stage, inputs, summary)
        console.print(Text.assemble((f"✓ {stage}", "green"), f" {summary_line(stage, summary)}"))
    return summary


def _plan(run: RunDir, stages: tuple[str, ...], force: frozenset[str]) -> list[str]:
    """The stages this call runs: from the first forced or stale one on (a stage that reruns makes
    every later one stale), and the report, which always rebuilds."""
    plan: list[str] = []
    for stage in stages:
        if plan or stage in force or stage == "report" or not run.is_fresh(stage, _inputs(run, stage)):
            plan.append(stage)
    return plan


def run_pipeline(run: RunDir, stages: tuple[str, ...] = STAGES, force: frozenset[str] = frozenset()) -> None:
    """Every stage in order; fresh ones are skipped unless forced, and the report always rebuilds.
    The config checks of every stage that will run come before the first one runs: a typo that
    training or evaluation would refuse costs one line, not hours of data stages or checkpoints."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from tokenmill.train.distributed import check_torchrun_stage

        check_torchrun_stage(run, "run")
    plan = _plan(run, stages, force)
    for k, stage in enumerate(plan):
        _preflight(run, stage, rebuilt_from=next((s for s in plan[:k] if s in DATA_STAGES), None))
    for stage in stages:
        if stage not in plan:
            console.print(f"· {stage}: unchanged since it finished, skipped", style="dim")
            continue
        run_stage(run, stage, fresh=stage in force)
