"""Sampling from the model: greedy, temperature, top-k, top-p (nucleus), stop token, seeded.

With a KV cache (the default where the model supports it) each new token costs one position's
forward, O(T) attention over the cached keys and values, instead of recomputing the window.
The cache lives here, not in the model: `_CachedDecoder` drives the Transformer's own modules
(norms, q/k/v/o projections, QK-norm, attention scale, FFN, head) one position at a time, so the
model keeps no inference-only state. It covers the configurations it knows (RoPE or learned
positions, no sliding window); anything else, and any model whose cached prompt logits do not
match its full forward (checked once per call), falls back to recomputing the window each step.
`generate_batch` decodes several prompts of one length together (one forward per token for the
batch, each row drawing from its own generator), which is what sampling a corpus needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, cast

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from tokenmill.model.transformer import Attention, Block, Transformer


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most-likely tokens whose probability mass reaches top_p (the
    nucleus); the rest get -inf. Ties at the boundary are broken by sort order."""
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    probs, order = torch.sort(torch.softmax(logits.float(), -1), descending=True)
    before = probs.cumsum(-1) - probs  # mass of the tokens strictly more likely than this one
    drop_sorted = before >= top_p  # already reached p without this token: outside the nucleus
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def _pick(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator | None
) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(_filter(logits[None], temperature, top_k, top_p)[0], -1)
    return int(torch.multinomial(probs, 1, generator=generator))


class _CachedDecoder:
    """Incremental forward of a tokenmill Transformer with per-layer key/value caches, for a batch
    of sequences of one length."""

    def __init__(self, model: torch.nn.Module):
        self.m = cast("Transformer", model)  # built only for a model supports() admitted: a Transformer
        self.k: list[torch.Tensor | None] = [None] * len(self.m.layers)
        self.v: list[torch.Tensor | None] = [None] * len(self.m.layers)
        self.length = 0

    @staticmethod
    def supports(model: torch.nn.Module) -> bool:
        from tokenmill.model.transformer import Attention, Block, Transformer

        cfg = getattr(model, "config", None)
        return (
            isinstance(model, Transformer)
            and getattr(cfg, "sliding_window", None) is None
            and all(type(layer) is Block and type(layer.self_attn) is Attention for layer in model.layers)
        )

    def _attend(self, i: int, attn: Attention, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = attn.project_qkv(x)
        if attn.q_norm is not None and attn.k_norm is not None:  # both or neither (cfg.qk_norm)
            q, k = attn.q_norm(q), attn.k_norm(k)
        if self.m.embed_positions is None:
            from tokenmill.model.transformer import apply_rope

            cos, sin = self.m.rope_cos[pos], self.m.rope_sin[pos]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        past_k, past_v = self.k[i], self.v[i]
        if past_k is not None and past_v is not None:
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        self.k[i], self.v[i] = k, v
        rep = attn.n_heads // attn.n_kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        # new queries sit at the end: query j sees every cached key and the new keys up to itself
        S = k.shape[2]
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=getattr(attn, "scale", None))
        return attn.o_proj(y.transpose(1, 2).reshape(B, T, attn.n_heads * attn.head_dim))

    def keep_rows(self, rows: list[int]) -> None:
        """Forget the cached keys and values of every batch row not in `rows` (finished sequences)."""
        self.k = [None if k is None else k[rows] for k in self.k]
        self.v = [None if v is None else v[rows] for v in self.v]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] for idx [B, T] appended after the cached positions."""
        from tokenmill.model.transformer import held

        m = self.m
        pos = torch.arange(self.length, self.length + idx.shape[1], device=idx.device)
        x = held(m.embed_tokens, "embed_tokens")(idx)
        if m.embed_positions is not None:
            x = x + m.embed_positions(pos)
        for i, module in enumerate(m.blocks()):
            layer = cast("Block", module)  # supports() admitted only Blocks of plain Attention
            x = x + self._attend(i, layer.self_attn, layer.input_layernorm(x), pos)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        self.length += idx.shape[1]
        logits = held(m.lm_head, "lm_head")(held(m.norm, "norm")(x))
        if getattr(m.config, "mup", False):
            logits = logits * m.output_mult
        return logits


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompt: list[int],
    max_new_tokens: int,
    *,
    max_context: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_id: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
    kv_cache: bool = True,
) -> list[int]:
    """Continue `prompt` by up to max_new_tokens tokens; stops early at `stop_id`.

    temperature <= 0 is greedy; otherwise top-k then top-p filter the tempered distribution and
    `generator` makes the draw reproducible. The model always sees the last max_context tokens;
    once the sequence outgrows that window the cache is rebuilt from the window each step (the
    same logits as without a cache, at the uncached cost).
    """
    device = device or torch.device("cpu")
    ids = list(prompt)
    cache = _start_cache(model, ids, max_context, device) if kv_cache and max_new_tokens > 0 else None
    for n in range(max_new_tokens):
        if cache is not None and n == 0:
            logits = cache[1]
        elif cache is not None and len(ids) <= max_context:
            logits = cache[0].forward(torch.tensor([ids[-1:]], device=device))[0, -1]
        else:
            logits = model(torch.tensor([ids[-max_context:]], dtype=torch.long, device=device))[0, -1]
        nxt = _pick(logits.float().cpu(), temperature, top_k, top_p, generator)
        ids.append(nxt)
        if stop_id is not None and nxt == stop_id:
            break
    return ids[len(prompt) :]


def _cache_matches(model: torch.nn.Module, ids: torch.Tensor) -> bool:
    """Whether the cached forward computes what the model's own forward does on the first row of
    `ids` [B, T]: checked in fp32 with autocast off, so the check sees the model's structure
    (a module the cache does not know changes the logits by far more than 1e-4), not the rounding
    of a bf16 autocast, under which the two orders of the same ops differ by ~1e-2 and a cache
    that is right would be turned down."""
    probe = ids[:1]
    with torch.autocast(ids.device.type, enabled=False):
        cached = _CachedDecoder(model).forward(probe)[:, -1]
        full = model(probe)[:, -1]
    return torch.allclose(cached.float(), full.float(), rtol=1e-4, atol=1e-4)


def _start_cache(
    model: torch.nn.Module, ids: list[int], max_context: int, device: torch.device
) -> tuple[_CachedDecoder, torch.Tensor] | None:
    """(decoder, last-position logits) after prefilling the prompt window, or None where the
    cache is unsupported or does not compute what the model's own forward does."""
    if not ids:
        return None
    ctx = torch.tensor([ids[-max_context:]], dtype=torch.long, device=device)
    started = _start_cache_batch(model, ctx, max_context)
    return None if started is None else (started[0], started[1][0])


def _filter(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Rows of logits [B, V] tempered, then top-k, then top-p filtered: `_pick`'s filter per row."""
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        logits = top_p_filter(logits, top_p)
    return logits


def _pick_rows(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generators: list[torch.Generator]
) -> list[int]:
    """One token per row by inverse-CDF sampling: row i draws one uniform from generators[i]
    only, so what a row samples does not depend on which other rows share its batch (one
    torch.multinomial call per row cost 6x the model's forward at batch 128, vocabulary 4096)."""
    if temperature <= 0:
        return torch.argmax(logits, -1).tolist()
    cdf = torch.softmax(_filter(logits, temperature, top_k, top_p), -1).double().cumsum(-1)
    u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    # the first token whose cumulative mass exceeds u: a token of mass 0 is never the first
    picks = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    return picks.clamp_(max=cdf.shape[-1] - 1).tolist()


@torch.no_grad()
def generate_batch(
    model: torch.nn.Module,
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    max_context: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_id: int | None = None,
    min_new_tokens: int = 0,
    generators: list[torch.Generator] | None = None,
    device: torch.device | None = None,
    stop: Callable[[list[int]], bool] | None = None,
) -> list[list[int]]:
    """Several prompts of one length continued at once: one forward per new token for the whole
    batch, through the KV cache while the sequences fit max_context. The same filters as
    `generate` (temperature, top-k, top-p); row i draws only from generators[i], so a row samples
    the same tokens in any batch; a row that reaches stop_id, or whose new tokens so far satisfy
    `stop` (e.g. their text holds a stop string), leaves the batch. The stop token is not sampled
    before min_new_tokens new tokens. Returns each row's new tokens (the stop token included)."""
    device = device or torch.device("cpu")
    if len({len(p) for p in prompts}) > 1 or not prompts or not prompts[0]:
        raise ValueError("generate_batch needs non-empty prompts of one length")
    gens = generators or [torch.Generator().manual_seed(i) for i in range(len(prompts))]
    ids = torch.tensor(prompts, dtype=torch.long, device=device)
    out: list[list[int]] = [[] for _ in prompts]
    active = list(range(len(prompts)))
    cache = _start_cache_batch(model, ids, max_context) if max_new_tokens > 0 else None
    logits = cache[1] if cache is not None else None
    for n in range(max_new_tokens):
        if logits is None:  # no cache, or the sequences outgrew it: recompute the window
            logits = model(ids[:, -max_context:])[:, -1]
        logits = logits.float().cpu()
        if stop_id is not None and n < min_new_tokens:
            logits = logits.index_fill(-1, torch.tensor([stop_id]), float("-inf"))
        picks = _pick_rows(logits, temperature, top_k, top_p, [gens[i] for i in active])
        for row, tok in zip(active, picks):
            out[row].append(tok)
        keep = [j for j, tok in enumerate(picks) if tok != stop_id and not (stop is not None and stop(out[active[j]]))]
        if not keep:
            break
        nxt = torch.tensor(picks, dtype=torch.long, device=device)[:, None]
        if len(keep) < len(picks):  # finished rows leave the batch, and the cache
            active, nxt, ids = [active[j] for j in keep], nxt[keep], ids[keep]
            if cache is not None:
                cache[0].keep_rows(keep)
        ids = torch.cat([ids, nxt], dim=1)
        logits = None
        if cache is not None and ids.shape[1] <= max_context:
            logits = cache[0].forward(nxt)[:, -1]
    return out


def _start_cache_batch(model: torch.nn.Module, ids: torch.Tensor, max_context: int) -> tuple[_CachedDecoder, torch.Tensor] | None:
    """`_start_cache` for a batch [B, T] of prompts: (decoder, last-position logits [B, V])."""
    if ids.shape[1] > max_context or not _CachedDecoder.supports(model) or not _cache_matches(model, ids):
        return None
    dec = _CachedDecoder(model)
    return dec, dec.forward(ids)[:, -1]
