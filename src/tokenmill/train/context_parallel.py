"""Context parallelism: every sequence split over the `cp` ranks of a group, so a long phase (32 k
tokens) keeps only 1/cp of its activations on each rank.

    train.parallel.cp = 2        # world = dp · cp (tp and pp stay 1 with cp > 1)

Each cp rank of a data-parallel group reads the same micro-batch and keeps its own share of the
positions of every row. Everything per token (embedding, norms, projections, FFN, the loss) runs
on the share alone; attention needs every key, so each block all-gathers K and V over the cp
group (after RoPE, before the GQA repeat: the gathered tensors are the n_kv_heads ones). The
gather's backward sums every rank's gradient for a chunk and keeps this rank's: a reduce-scatter
(all-reduce + slice on gloo, which has no reduce-scatter). This is the all-gather form of context
parallelism (Llama 3's), not a ring: simpler, one collective per block, and its extra memory is one
layer's full K and V at a time, small next to the per-token activations of all the blocks.

Which share. Under causal attention the queries late in a row see more keys, so with contiguous
chunks the last rank scores (2·cp − 1)× the key–query pairs of the first; a kernel that skips
masked tiles (flash, FlexAttention) then leaves the first ranks idle at each block's gather. The
share here is the zig-zag one: the row cut into 2·cp chunks, rank r keeps chunks r and 2·cp−1−r,
so every rank scores the same number of pairs and holds the same number of tokens. Softmax does
not care about the order of the keys, so K and V are gathered in rank order and the mask is built
from each key's global position: causal (key ≤ query), same document (the run index of the
whole row's segments, which every rank has), inside the sliding window when the model has one.
The mask is a dense boolean [B, 1, T/cp, T] for SDPA (1/cp of one process's).

Losses: the model returns the per-token NLL of the whole row with zeros outside this rank's share,
so the trainer's Σ NLL / (targets of the global batch) on a rank is its share of the global loss,
and the loss and gradients of the step are sums over dp × cp — cp is one more data axis for the
reduction (DDP or FSDP2 over the whole world, which is dp × cp when tp = pp = 1).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from tokenmill.model.transformer import ContextShard, Transformer, _document_runs


def zigzag_index(T: int, cp: int, rank: int, device: torch.device | None = None) -> torch.Tensor:
    """Global positions [T / cp] of the tokens rank `rank` of `cp` keeps: chunks rank and 2·cp−1−rank."""
    if T % (2 * cp):
        raise ValueError(f"context parallelism over cp={cp} needs rows of a multiple of {2 * cp} tokens, got {T}")
    c = T // (2 * cp)
    first, second = rank * c, (2 * cp - 1 - rank) * c
    return torch.cat([torch.arange(first, first + c, device=device), torch.arange(second, second + c, device=device)])


class _GatherSeq(torch.autograd.Function):
    """All-gather of x [B, H, t, hd] along the sequence over `group`, in rank order; backward: Σ of
    every rank's gradient of this rank's chunk (reduce-scatter)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        group = ctx.group
        n, r = dist.get_world_size(group), dist.get_rank(group)
        chunks = [c.contiguous() for c in grad.chunk(n, dim=2)]
        if dist.get_backend(group) == "gloo":  # no reduce-scatter on gloo
            full = torch.cat(chunks, dim=2)
            dist.all_reduce(full, group=group)
            return full.chunk(n, dim=2)[r].contiguous(), None
        out = torch.empty_like(chunks[r])
        dist.reduce_scatter(out, chunks, group=group)
        return out, None


class ContextParallel:
    """Attached to a Transformer as `model.context_parallel`: its training forward then runs this
    rank's share of every row (`forward`). `group` is the cp process group."""

    def __init__(self, group: Any):
        self.group = group
        self.cp = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return _GatherSeq.apply(x, self.group)

    def mask(self, q_pos: torch.Tensor, k_pos: torch.Tensor, segments: torch.Tensor | None, window: int | None) -> torch.Tensor:
        """Boolean [B or 1, 1, Tq, Tk]: key k_pos[j] visible from query q_pos[i] (global positions)."""
        allowed = k_pos[None, :] <= q_pos[:, None]
        if window is not None:
            allowed = allowed & (q_pos[:, None] - k_pos[None, :] < window)
        if segments is None:
            return allowed[None, None]
        runs = _document_runs(segments)
        return (allowed[None] & (runs[:, q_pos, None] == runs[:, None, k_pos])).unsqueeze(1)

    def forward(
        self,
        model: Transformer,
        idx: torch.Tensor,
        positions: torch.Tensor | None,
        segments: torch.Tensor | None,
        targets: torch.Tensor | None,
    ) -> torch.Tensor:
        """Per-token NLL [B, T] of full rows `idx` [B, T]: this rank's share computed, zeros elsewhere."""
        if targets is None:
            raise ValueError("context parallelism runs the training forward with targets (the per-token NLL)")
        B, T = idx.shape
        mine = zigzag_index(T, self.cp, self.rank, idx.device)
        keys = torch.cat([zigzag_index(T, self.cp, r, idx.device) for r in range(self.cp)])  # the gather's order
        pos = mine.expand(B, -1) if positions is None else positions[:, mine]
        x = model.embed(idx[:, mine], pos)
        cos = sin = None
        if model.embed_positions is None:  # RoPE at each token's global position
            cos, sin = model.rope_cos[pos].unsqueeze(1), model.rope_sin[pos].unsqueeze(1)
        shard = ContextShard(self.mask(mine, keys, segments, model.config.sliding_window), self.gather)
        for layer in model.blocks():
            x = model.run_block(layer, x, cos, sin, shard)
        nll = model.output(x, targets[:, mine])
        return nll.new_zeros(B, T).index_copy(1, mine, nll)


def attach(model: Transformer, group: Any) -> Transformer:
    """Make `model` (a Transformer, not wrapped yet) run its training forward context-parallel."""
    model.context_parallel = ContextParallel(group)
    return model
