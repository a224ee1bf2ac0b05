"""The training budget in tokens, resolved into steps for one world size.

Users think in tokens ("global batch 4M tokens, 1T tokens, warmup 2B tokens"), the
loop thinks in optimizer steps. `resolve_budget` turns the token-denominated knobs into the step
knobs once, before anything is built, so every later consumer (loader, schedule, checkpoints)
sees one consistent TrainConfig:

    grad_accum   = global_batch_tokens / (micro_batch · seq_len · world_size)   exact, or an error
    max_steps    = ⌈max_tokens / tokens_per_step⌉
    warmup_steps = round(warmup_tokens / tokens_per_step)

With global_batch_tokens set, the global batch (and so the data of every step) is the same for any
world size, which is what lets a run resume on a different number of ranks.
"""

from __future__ import annotations

import math

from tokenmill.train.config import TrainConfig
from tokenmill.errors import UserError


class BudgetError(UserError, ValueError):
    """The token budget cannot be laid out on this world size."""


def resolve_budget(tc: TrainConfig, world_size: int = 1) -> TrainConfig:
    """A copy of `tc` whose grad_accum, max_steps and warmup_steps reflect its token-denominated
    fields for `world_size` ranks; fields left at None keep their step values."""
    if world_size < 1:
        raise BudgetError(f"world size must be >= 1, got {world_size}")
    update: dict[str, int] = {}
    grad_accum = tc.grad_accum
    per_micro = tc.micro_batch * tc.seq_len * world_size
    if tc.global_batch_tokens is not None:
        if tc.global_batch_tokens < per_micro or tc.global_batch_tokens % per_micro:
            raise BudgetError(
                f"train.global_batch_tokens={tc.global_batch_tokens:,} is not a whole number of micro-batches: "
                f"micro_batch {tc.micro_batch} × seq_len {tc.seq_len} × {world_size} rank(s) = {per_micro:,} "
                f"tokens per micro-batch round; use a multiple of {per_micro:,}"
            )
        grad_accum = tc.global_batch_tokens // per_micro
        update["grad_accum"] = grad_accum
    tokens_per_step = per_micro * grad_accum
    if tc.max_tokens is not None:
        if tc.max_tokens < tokens_per_step:
            raise BudgetError(f"train.max_tokens={tc.max_tokens:,} is less than one step ({tokens_per_step:,} tokens)")
        update["max_steps"] = math.ceil(tc.max_tokens / tokens_per_step)
    if tc.warmup_tokens is not None:
        update["warmup_steps"] = int(round(tc.warmup_tokens / tokens_per_step))
    return tc.model_copy(update=update) if update else tc


def tokens_per_step(tc: TrainConfig, world_size: int = 1) -> int:
    """Tokens of one optimizer step's global batch (after `resolve_budget`)."""
    return tc.micro_batch * tc.seq_len * tc.grad_accum * world_size
