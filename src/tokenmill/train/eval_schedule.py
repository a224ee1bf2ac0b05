"""When the loop evaluates and looks at the embedding spectrum, and the evaluation itself.

A pure schedule (EvalSchedule) so its steps can be checked without a model, and a small runner
(Evaluator) that puts the model in eval mode on rank 0 while the other ranks wait."""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

from torch import nn

from tokenmill.train.distributed import DistContext, evaluation_model

EvalHook = Callable[[int, nn.Module], None]


class EvalSchedule:
    """Evaluations every `eval_every` steps (0: none), at `max_steps` and at a run's last step (a
    time budget ends it early); the spectrum every `spectrum_every` steps, or at the evaluations'
    steps when 0."""

    def __init__(self, eval_every: int, max_steps: int, spectrum_every: int = 0):
        self.eval_every, self.max_steps, self.spectrum_every = eval_every, max_steps, spectrum_every

    def due(self, step: int, last: bool = False) -> bool:
        return (self.eval_every > 0 and step % self.eval_every == 0) or step == self.max_steps or last

    def spectrum_due(self, step: int, last: bool = False) -> bool:
        if self.spectrum_every > 0:
            return step % self.spectrum_every == 0
        return self.due(step, last)

    def spectrum_checked_at(self, step: int) -> bool:
        """Whether a collapse check belonged to `step` by the periodic rule (a resume replays it)."""
        every = self.spectrum_every or self.eval_every
        return every > 0 and step % every == 0


class Evaluator:
    """Runs `on_eval(step, model)` in eval mode on rank 0 (FSDP: a gathered copy), then a barrier.
    Outside the hang watchdog (`unwatched`): an evaluation takes longer than a step."""

    def __init__(
        self,
        on_eval: EvalHook | None,
        model: nn.Module,
        ctx: DistContext,
        unwatched: Callable[[], ContextManager[object]] = contextlib.nullcontext,
    ):
        self.on_eval, self.model, self.ctx, self.unwatched = on_eval, model, ctx, unwatched

    def __call__(self, step: int) -> None:
        if self.on_eval is None:
            return
        with self.unwatched():  # rank 0 evaluates while the others wait in the barrier
            eval_model = evaluation_model(self.model, self.ctx)  # rank 0 only
            if eval_model is not None:
                eval_model.eval()
                try:
                    self.on_eval(step, eval_model)
                finally:
                    eval_model.train()
            self.ctx.barrier()  # the other ranks wait for rank 0's evaluation
