"""Batch builders for the non-causal objectives: masked LM (BERT, Devlin et al. 2019),
T5 span corruption (Raffel et al. 2020) and prefix LM.

Each builder takes the loader's packed `tokens[B, T+1]` (plus optional `segments[B, T]`) and
returns a `CorruptedBatch`: model inputs [B, T], labels [B, T] (IGNORE where nothing is scored)
and a boolean attention mask [B, T, T] (True = query t may attend to key s) that REPLACES the
causal rule in `Transformer.forward(..., attn_mask=...)`.

- MLM (BERT): a share `prob` of the non-special input tokens is selected; of those 80% become
  MASK, 10% a random ordinary token, 10% stay; labels only at the selected positions; attention
  bidirectional (within documents when segments are given). Inputs are `tokens[:, :-1]`, so
  positions/segments of the loader's batch describe them unchanged.
- Prefix LM: the first P tokens of a row attend to each other bidirectionally, the rest causally;
  only targets in the suffix (target index t+1 >= P) are scored, so no scored target is ever
  visible to the query that predicts it.
- Span corruption (T5), trained decoder-only in the "prefix" formulation: a row becomes
  `corrupted input ++ targets`, where the input has each dropped span replaced by a sentinel and
  the targets list each sentinel followed by its span. The input part is a bidirectional prefix,
  the targets are predicted causally, and only target tokens are scored. The row is treated as one
  stream (document boundaries are ignored: an EOS inside a span simply moves to the targets),
  and its original length is cut so that input + targets fit in T+1 tokens (the tail is PAD, not
  scored). Spans are capped at the number of sentinels (longer mean spans on very long rows).

Randomness comes from a CPU generator seeded by (seed, step, micro, objective), so a batch's
corruption is a pure function of them — resumable and replayable like the loader itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from tokenmill.tokenizer.special import DEFAULT_N_SENTINELS, FIRST_SENTINEL_ID, MASK_ID, PAD_ID

IGNORE = -100  # same as objectives.IGNORE (F.cross_entropy's ignore_index)


@dataclass
class CorruptedBatch:
    inputs: torch.Tensor  # long [B, T]
    labels: torch.Tensor  # long [B, T]: the token to predict at t, IGNORE where not scored
    attn_mask: torch.Tensor  # bool [B, T, T]: True where query t may attend to key s
    positions: torch.Tensor | None = None  # long [B, T] RoPE positions (None: 0..T-1)


def corruption_generator(seed: int, step: int, micro: int, tag: str) -> torch.Generator:
    """A CPU generator that depends on (seed, step, micro, tag) only (hash-mixed, so neighbouring
    steps do not get correlated streams)."""
    digest = hashlib.sha256(f"{seed}:{step}:{micro}:{tag}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def n_special(n_sentinels: int = DEFAULT_N_SENTINELS) -> int:
    """Ids below this are special (EOS, BOS, PAD, MASK, sentinels): never selected or drawn."""
    return FIRST_SENTINEL_ID + n_sentinels


def _runs(segments: torch.Tensor) -> torch.Tensor:
    """Run index per token: +1 at every change of segment (same rule as the model's doc mask)."""
    change = (segments[:, 1:] != segments[:, :-1]).to(torch.int32)
    return torch.cat([torch.zeros_like(change[:, :1]), change.cumsum(1, dtype=torch.int32)], dim=1)


def bidirectional_mask(B: int, T: int, segments: torch.Tensor | None = None, device: torch.device | None = None) -> torch.Tensor:
    """[B, T, T] all True, or True exactly where query and key lie in the same document."""
    if segments is None:
        return torch.ones(B, T, T, dtype=torch.bool, device=device)
    runs = _runs(segments)
    return runs[:, :, None] == runs[:, None, :]


def prefix_lm_mask(prefix_len: torch.Tensor, T: int, segments: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T, T]: query t sees key s iff s <= t or s < P (P = prefix_len[b]), within documents."""
    ar = torch.arange(T, device=prefix_len.device)
    causal = ar[None, :, None] >= ar[None, None, :]
    in_prefix = ar[None, None, :] < prefix_len[:, None, None]
    mask = causal | in_prefix
    if segments is not None:
        mask = mask & bidirectional_mask(segments.shape[0], segments.shape[1], segments=segments)
    return mask


# --------------------------------------------------------------------------- MLM
def mlm_corrupt(
    tokens: torch.Tensor, vocab_size: int, generator: torch.Generator, prob: float = 0.15, n_sentinels: int = DEFAULT_N_SENTINELS
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) for ids [B, T]: BERT's 80/10/10 on a Bernoulli(prob) selection of the
    non-special tokens; labels are the original token at selected positions, IGNORE elsewhere."""
    lo = n_special(n_sentinels)
    if vocab_size <= lo:
        raise ValueError(f"vocab_size={vocab_size} leaves no ordinary token above the {lo} special ids")
    shape = tokens.shape
    u_select = torch.rand(shape, generator=generator).to(tokens.device)
    u_action = torch.rand(shape, generator=generator).to(tokens.device)
    random_ids = torch.randint(lo, vocab_size, shape, generator=generator).to(tokens.device)
    selected = (u_select < prob) & (tokens >= lo)
    inputs = torch.where(selected & (u_action < 0.8), torch.full_like(tokens, MASK_ID), tokens)
    inputs = torch.where(selected & (u_action >= 0.8) & (u_action < 0.9), random_ids, inputs)
    labels = torch.where(selected, tokens, torch.full_like(tokens, IGNORE))
    return inputs, labels


def mlm_batch(
    tokens: torch.Tensor,
    segments: torch.Tensor | None,
    positions: torch.Tensor | None,
    vocab_size: int,
    generator: torch.Generator,
    prob: float = 0.15,
    n_sentinels: int = DEFAULT_N_SENTINELS,
) -> CorruptedBatch:
    """MLM over the loader's inputs tokens[:, :-1] (the extra target column is unused)."""
    x = tokens[:, :-1]
    inputs, labels = mlm_corrupt(x, vocab_size, generator, prob, n_sentinels)
    mask = bidirectional_mask(x.shape[0], x.shape[1], segments=segments, device=x.device)
    return CorruptedBatch(inputs, labels, mask, positions)


# --------------------------------------------------------------------------- prefix LM
def sample_prefix_len(B: int, T: int, generator: torch.Generator, fraction: float | None = None) -> torch.Tensor:
    """Prefix lengths [B] in [1, T-1]: round(fraction·T), or uniform per row when fraction is None."""
    if T < 2:
        raise ValueError("prefix LM needs rows of at least 2 inputs")
    if fraction is not None:
        return torch.full((B,), min(max(round(fraction * T), 1), T - 1), dtype=torch.long)
    return torch.randint(1, T, (B,), generator=generator)


def prefix_lm_batch(
    tokens: torch.Tensor,
    segments: torch.Tensor | None,
    positions: torch.Tensor | None,
    loss_mask: torch.Tensor | None,
    prefix_len: torch.Tensor,
) -> CorruptedBatch:
    """Inputs tokens[:, :-1]; label t = tokens[:, t+1] only in the suffix (t >= P-1) and where the
    loader's loss_mask counts it."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    B, T = inputs.shape
    prefix_len = prefix_len.to(tokens.device)
    scored = torch.arange(T, device=tokens.device)[None, :] >= (prefix_len[:, None] - 1)
    if loss_mask is not None:
        scored = scored & loss_mask
    labels = targets.masked_fill(~scored, IGNORE)
    return CorruptedBatch(inputs, labels, prefix_lm_mask(prefix_len, T, segments), positions)


# --------------------------------------------------------------------------- span corruption
def _random_partition(total: int, parts: int, generator: torch.Generator) -> list[int]:
    """`total` split into `parts` positive integers, uniformly over the compositions."""
    if parts == 1:
        return [total]
    cuts = (torch.randperm(total - 1, generator=generator)[: parts - 1] + 1).sort().values.tolist()
    bounds = [0, *cuts, total]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:])]


def span_counts(length: int, density: float, mean_span: float, n_sentinels: int = DEFAULT_N_SENTINELS) -> tuple[int, int]:
    """(noise tokens, spans) for a row of `length` tokens, as T5 rounds them (spans capped at the
    sentinel count and at the number of kept tokens, so every span has a kept token before it)."""
    n_noise = min(max(round(length * density), 1), length - 1)
    n_spans = max(round(n_noise / mean_span), 1)
    return n_noise, min(n_spans, n_sentinels, length - n_noise)


def random_spans_noise_mask(
    length: int, density: float, mean_span: float, generator: torch.Generator, n_sentinels: int = DEFAULT_N_SENTINELS
) -> torch.Tensor:
    """bool [length]: True on dropped tokens. Kept and dropped runs alternate, starting kept (T5)."""
    n_noise, n_spans = span_counts(length, density, mean_span, n_sentinels)
    kept = _random_partition(length - n_noise, n_spans, generator)
    noise = _random_partition(n_noise, n_spans, generator)
    mask = torch.zeros(length, dtype=torch.bool)
    pos = 0
    for k, n in zip(kept, noise):
        mask[pos + k : pos + k + n] = True
        pos += k + n
    return mask


def span_corrupt(seq: list[int], noise_mask: list[bool], first_sentinel: int = FIRST_SENTINEL_ID) -> tuple[list[int], list[int]]:
    """(input, targets): each dropped span becomes sentinel i in the input; the targets are
    sentinel i followed by span i, for every span in order."""
    inp: list[int] = []
    tgt: list[int] = []
    n_spans = 0
    for i, (tok, noisy) in enumerate(zip(seq, noise_mask)):
        if noisy:
            if i == 0 or not noise_mask[i - 1]:
                inp.append(first_sentinel + n_spans)
                tgt.append(first_sentinel + n_spans)
                n_spans += 1
            tgt.append(tok)
        else:
            inp.append(tok)
    return inp, tgt


def span_reassemble(
    inp: list[int], tgt: list[int], first_sentinel: int = FIRST_SENTINEL_ID, n_sentinels: int = DEFAULT_N_SENTINELS
) -> list[int]:
    """Inverse of span_corrupt: put each target span back in place of its sentinel."""
    is_sent = range(first_sentinel, first_sentinel + n_sentinels).__contains__
    spans: dict[int, list[int]] = {}
    current: list[int] | None = None
    for tok in tgt:
        if is_sent(tok):
            current = spans.setdefault(tok, [])
        elif current is not None:
            current.append(tok)
    out: list[int] = []
    for tok in inp:
        out.extend(spans[tok] if is_sent(tok) else [tok])
    return out


def span_source_length(total: int, density: float, mean_span: float, n_sentinels: int = DEFAULT_N_SENTINELS) -> int:
    """Longest original length L whose input + targets (L + 2·spans tokens) fit in `total`."""
    for length in range(total, 1, -1):
        if length + 2 * span_counts(length, density, mean_span, n_sentinels)[1] <= total:
            return length
    raise ValueError(f"rows of {total} tokens are too short for span corruption")


def span_batch(
    tokens: torch.Tensor,
    generator: torch.Generator,
    density: float = 0.15,
    mean_span: float = 3.0,
    n_sentinels: int = DEFAULT_N_SENTINELS,
) -> CorruptedBatch:
    """Decoder-only span corruption over rows tokens[B, T+1] (see the module docstring).

    Row b becomes seq = input ++ targets ++ PAD…, of length T+1; the model reads seq[:-1] with the
    input part (length P) as a bidirectional prefix and is scored on target tokens only.
    """
    B, T1 = tokens.shape
    length = span_source_length(T1, density, mean_span, n_sentinels)
    rows, prefix, n_scored = [], [], []
    for row in tokens[:, :length].tolist():
        noise = random_spans_noise_mask(length, density, mean_span, generator, n_sentinels).tolist()
        inp, tgt = span_corrupt(row, noise)
        seq = inp + tgt
        rows.append(seq + [PAD_ID] * (T1 - len(seq)))
        prefix.append(len(inp))
        n_scored.append(len(tgt))
    seq_t = torch.tensor(rows, dtype=torch.long, device=tokens.device)
    prefix_len = torch.tensor(prefix, dtype=torch.long, device=tokens.device)
    end = prefix_len + torch.tensor(n_scored, dtype=torch.long, device=tokens.device)
    t1 = torch.arange(1, T1, device=tokens.device)[None, :]  # index of the target token of input t
    scored = (t1 >= prefix_len[:, None]) & (t1 < end[:, None])
    batch = prefix_lm_batch(seq_t, None, None, scored, prefix_len)
    return batch
