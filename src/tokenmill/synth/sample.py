"""Documents sampled from a trained checkpoint, seeded per document.

Document i of a call with seed s draws everything random — which prompt document it starts from
and every token — from generators seeded by (s, i) alone (numpy SeedSequence spawn keys), so a
document does not depend on how many documents are sampled or on the batch it shares: the batch
only decides how many sequences go through the model at once (eval/generate.py). (That holds as
long as a row's logits come out the same in any batch, as they do on CPU — the tests check it; a
device whose kernels round differently by batch size could change a rare draw.)

A prompt is either the document separator alone (`tokens: 0`, unconditional: the EOS that
precedes every document in the training stream; tokenmill's training never sees BOS) or the first
K tokens of a document of the named buckets, which is the common and better way (Shumailov et al.
also prompt with training data): with document masking a model is never trained on the first
token of a document, so its unconditional start is weak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from tokenmill.eval.generate import generate_batch
from tokenmill.data.synthetic_lineage import KEY
from tokenmill.tokens.store import TokenStore


@dataclass(frozen=True)
class Prompt:
    """The start of one synthetic document: its tokens and the document they come from."""

    tokens: list[int]
    doc: str | None = None  # curated id of the prompt document (None: unconditional)
    bucket: str | None = None


@dataclass
class Sampled:
    """One sampled document: its index, prompt, new tokens (stop token removed) and why it ended."""

    index: int
    prompt: Prompt
    tokens: list[int]
    stop: str  # "eos" or "length"


def _streams(seed: int, index: int) -> tuple[np.random.Generator, torch.Generator]:
    """The prompt choice and token generators of document `index`: independent streams of (seed, index)."""
    pick = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index, 0)))
    state = np.random.SeedSequence(seed, spawn_key=(index, 1)).generate_state(2, np.uint32)
    return pick, torch.Generator().manual_seed(int(state[0]) << 31 ^ int(state[1]))


def prompt_pool(store: TokenStore, buckets: Sequence[str], split: str, k: int) -> list[Prompt]:
    """The first k tokens of every document of the buckets with more than k tokens (its EOS aside)."""
    pool = []
    for b in buckets:
        for shard in store.shards(b, split):
            ids = shard.doc_table().column("id").to_pylist()
            lengths = np.diff(shard.offsets) - 1
            pool += [Prompt(shard.doc(int(i))[:k].tolist(), ids[i], b) for i in np.flatnonzero(lengths > k)]
    return pool


def pick_prompts(store: TokenStore, n: int, k: int, buckets: Sequence[str], split: str, seed: int) -> list[Prompt]:
    """The prompt of each of n documents: the separator alone (k = 0), else a seeded pick from the pool."""
    if k == 0:
        return [Prompt([store.eos_id])] * n
    pool = prompt_pool(store, buckets, split, k)
    if not pool:
        raise ValueError(
            f"no {split} document of bucket(s) {list(buckets)} has more than {k} tokens to prompt with; "
            f"lower prompt.tokens or pick other buckets"
        )
    return [pool[int(_streams(seed, i)[0].integers(len(pool)))] for i in range(n)]


def sample_documents(
    model: torch.nn.Module,
    prompts: list[Prompt],
    *,
    seed: int,
    batch_size: int,
    stop_id: int,
    max_context: int,
    device: torch.device,
    options: dict[str, Any],
    on_batch: Callable[[int], None] = lambda n: None,
) -> Iterator[Sampled]:
    """Sample every prompt's continuation, batch_size at a time, in index order. `options`:
    temperature, top_k, top_p, max_new_tokens, min_new_tokens (generate_batch's)."""
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start : start + batch_size]
        gens = [_streams(seed, start + j)[1] for j in range(len(batch))]
        outs = generate_batch(
            model,
            [p.tokens for p in batch],
            options["max_new_tokens"],
            max_context=max_context,
            temperature=options["temperature"],
            top_k=options["top_k"],
            top_p=options["top_p"],
            stop_id=stop_id,
            min_new_tokens=options["min_new_tokens"],
            generators=gens,
            device=device,
        )
        for j, (prompt, new) in enumerate(zip(batch, outs)):
            ended = bool(new) and new[-1] == stop_id
            yield Sampled(start + j, prompt, new[:-1] if ended else new, "eos" if ended else "length")
        on_batch(len(batch))


def document_record(s: Sampled, text: str, lineage: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The JSONL record of one sampled document, its lineage under metadata.synthetic."""
    doc_lineage = {
        **lineage,
        "index": s.index,
        "new_tokens": len(s.tokens),
        "stop": s.stop,
        "prompt": {"doc": s.prompt.doc, "bucket": s.prompt.bucket, "tokens": len(s.prompt.tokens) if s.prompt.doc else 0},
    }
    return {"id": f"{prefix}-{s.index:06d}", "text": text, "source": "synthetic", "metadata": {KEY: doc_lineage}}
