"""Staging a micro-batch: its tensors copied to the device and its attention mask built there once,
ahead of the forward that reads it.

The document mask is a function of the batch's segments alone, so it belongs to the batch, not to
the forward: `prebuild_mask` builds it once per micro-batch with the model's own `mask_for` (the
same function the forward would call, under the same autocast, so the losses are bitwise those of
a model that builds it itself) and the batch carries it into `token_nll_batch`, which hands it to
the forward as `prebuilt_mask`. Gradient accumulation gives each micro-batch its own mask;
activation checkpointing recomputes a block from the mask it was given (an input of the
checkpointed call, never rebuilt); a pipeline stage builds its own mask once per micro-batch
forward on its own device (train/pipeline_parallel.py: the schedule splits its keyword inputs by
rows, which a BlockMask cannot be).

Where the GPU work runs (the flex BlockMask's `create_block_mask` is a few compiled kernels; the
SDPA mask a few elementwise ones): `step_loss_tensor` stages micro-batch m+1 right after issuing
micro-batch m's backward, and micro-batch 0 of a step when the step is launched. On CUDA both are
host calls that return once the copy and the kernels are queued: the host builds the next mask
while the GPU still runs the backward (or, with deferred host reads, the previous step's tail),
so the launch overhead leaves the critical path, and the compiled forward receives a ready mask as
an input (FlexAttention's documented pattern) instead of tracing its construction. The kernels
themselves stay on the default stream, in order, between the backward and the next forward
(tens of µs); a side stream would need the BlockMask's tensors fenced and kept alive across
streams for that little.

Memory: staging after the backward, not before, keeps one mask alive at a time (the previous
micro-batch's is dropped first), and once the forward has run the batch lets go of its mask, so
the step holds what the forward kept of it (autograd's saved tensors, checkpoint's arguments), as
when the model built it: scaling/memory.py's count is unchanged (tests/train/test_staging.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from tokenmill.model.objectives import unwrap
from tokenmill.model.transformer import Transformer
from tokenmill.train.device import autocast


def prebuild_mask(model: nn.Module, batch: Any, dtype: torch.dtype | str) -> Any:
    """`batch` (already on its device) with the attention mask of its segments built for `model`
    (a Transformer, possibly wrapped by DDP or torch.compile); unchanged when it has no segments,
    the model is not tokenmill's, or the batch type carries no mask (the model builds it then)."""
    segments = getattr(batch, "segments", None)
    inner = unwrap(model)
    if segments is None or not isinstance(inner, Transformer) or not hasattr(batch, "prebuilt_mask"):
        return batch
    with autocast(segments.device, dtype), torch.no_grad():  # the kernel choice reads autocast's dtype
        mask = inner.mask_for(segments.shape[1], segments.device, segments)
    return replace(batch, prebuilt_mask=mask)
