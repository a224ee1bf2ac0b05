"""What training would refuse, checked before anything of the run is moved, rewritten or deleted.

A typo in the config (a mixture bucket that is not in the token store, an `init_from` path that is
not there) must cost one line, not the run's checkpoints: the pipeline runs these checks for the
whole run before its first stage, and again just before training starts, ahead of the decision
to continue or set the old checkpoints aside (train/set_aside.py). Only reads: the token store's
_meta.json, the curated bucket names, checkpoint state.json files, init_from's headers.
"""

from __future__ import annotations

import os
from pathlib import Path

from tokenmill.runs import RunDir
from tokenmill.train.errors import TrainError, already_trained


def check_train(run: RunDir, rebuilt_from: str | None = None, resume: bool | None = None) -> None:
    """Refuse, in one line, a train config the trainer would refuse. `rebuilt_from`: the first
    data stage that reruns before training in this run (None: the token store on disk is the one
    training reads); the mixture's bucket names are then checked against the curated buckets (the
    tokenizer or tokenize stage reruns) or those the curate config can produce (curate reruns).
    `resume`: False (`train` without --resume) refuses a run that has checkpoints; True refuses
    checkpoints of another training setup; None (`run`) lets the pipeline continue or set aside."""
    from tokenmill.train.checkpoint import list_checkpoints
    from tokenmill.train.init_from import check_source

    cfg = run.config
    existing = list_checkpoints(run.sub("checkpoints"))
    if resume is False and existing:
        raise TrainError(already_trained(run.sub("checkpoints"), existing[-1][0]))
    if cfg.train.init_from and not (resume and existing):  # a resumed run restores its own weights
        check_source(cfg.train.init_from)
    single = int(os.environ.get("WORLD_SIZE", "1")) == 1  # ranks of a torchrun job check their layout themselves
    if rebuilt_from is None:
        _check_with_store(run, single)
    else:
        _check_bucket_names(run, rebuilt_from)
    if resume and existing:  # after the checks above: a typo is named as a typo, not as another setup
        _check_same_setup(run, existing[-1][1])
    if cfg.train.max_seconds is not None and len(cfg.mixture.phases) > 1:
        raise TrainError(
            f"train.max_seconds={cfg.train.max_seconds} runs the LR schedule on elapsed time, but the "
            f"curriculum's {len(cfg.mixture.phases)} phases are placed by step: use one phase "
            f"(mixture.phases: []) or a step budget (train.max_steps)"
        )


def _check_same_setup(run: RunDir, newest: Path) -> None:
    """`train --resume` on checkpoints another setup wrote: refused as the trainer would (a
    state.json that cannot be read is left to the trainer, which skips corrupt checkpoints)."""
    from tokenmill.train.checkpoint import read_state
    from tokenmill.train.trainer import check_same_setup

    try:
        state = read_state(newest)
    except (OSError, ValueError):
        return
    check_same_setup(state, run.fingerprint("train"), run.config, newest)


def _check_with_store(run: RunDir, single: bool) -> None:
    """The mixture (every phase's weights, replay) and the model against the token store."""
    from tokenmill.mixture.curriculum import build_phases
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.budget import resolve_budget
    from tokenmill.train.init_from import check_store_tokenizer
    from tokenmill.train.trainer import resolve_model_config

    cfg = run.config
    store = TokenStore(run.sub("tokens"))
    resolve_model_config(cfg.model, store, cfg.train.seq_len)
    if cfg.train.init_from:
        check_store_tokenizer(cfg.train.init_from, store.tokenizer_sha256, store.root)
    available = {b: store.n_tokens(b, "train") for b in store.buckets}
    if single:  # one process: the budget in steps is the trainer's (several ranks: their world size)
        tc = resolve_budget(cfg.train)
        build_phases(cfg.mixture, available, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps)
    else:
        from tokenmill.mixture.curriculum import check_bucket_names

        check_bucket_names(cfg.mixture, sorted(available), "are not in the token store")


def _check_bucket_names(run: RunDir, rebuilt_from: str) -> None:
    """The token store is built in this run: its buckets are the curated ones, or (curation runs
    too) those the curate config can send a document to."""
    from tokenmill.data.curate import bucket_names
    from tokenmill.data.curated import curated_buckets
    from tokenmill.mixture.curriculum import check_bucket_names

    curated = run.sub("curated")
    if rebuilt_from != "curate" and curated.is_dir():
        check_bucket_names(run.config.mixture, curated_buckets(curated), f"are not in the curated data {curated}")
    else:
        names = sorted(set(bucket_names(run.config.curate)))
        check_bucket_names(run.config.mixture, names, "no curate source, bucket rule or classifier produces")
