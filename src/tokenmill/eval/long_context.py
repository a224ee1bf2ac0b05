"""Does a model use its long context? Loss by position and a passkey probe (the
needle/passkey test of Mohtashami & Jaggi 2023; docs/training.md "Context extension").

- `position_bpb`: held-out documents at least `seq_len` tokens long, the first seq_len + 1 tokens
  of each ([EOS] + document) scored as one window; every target's NLL goes to the bucket of its
  position, and bits per byte divides by the UTF-8 bytes of those target tokens. A model that
  uses its context predicts later positions better; one whose RoPE does not reach past its
  trained length gets worse there.
- `passkey`: Mohtashami & Jaggi (2023): a five-digit key inside repeated filler, asked for at
  the end. Teacher-forced, a trial is right when every token of the key is the model's top
  prediction (what greedy decoding would write); accuracy is reported by the distance between
  the key and the question, so a trained-length horizon shows as a cliff.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from tokenmill.eval.perplexity import _Windows, doc_targets
from tokenmill.model.objectives import token_nll_batch
from tokenmill.tokens.store import TokenStore
from tokenmill.train.device import autocast

if TYPE_CHECKING:
    from tokenmill.model.config import ModelConfig
    from tokenmill.model.transformer import Transformer

FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
INTRO = (
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
    "remember it. I will ask you about it."
)
KEY = " The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = " What is the pass key? The pass key is"


def bucket_edges(seq_len: int, buckets: int, trained: int | None = None) -> list[int]:
    """Position bucket edges over [0, seq_len]: equal widths, with the trained length as an edge
    when it lies inside (so 'before' and 'beyond' the trained context never share a bucket)."""
    edges = {round(seq_len * k / buckets) for k in range(buckets + 1)}
    if trained is not None and 0 < trained < seq_len:
        edges.add(trained)
    return sorted(edges)


def long_documents(
    store: TokenStore,
    seq_len: int,
    max_docs: int,
    data_buckets: list[str] | None = None,
) -> list[np.ndarray]:
    """Up to max_docs held-out windows of [EOS] + the first seq_len document tokens, taken in
    store order from every bucket in turn (documents shorter than seq_len are skipped)."""
    names = data_buckets or list(store.buckets)
    pools = [iter(store.docs(b, "val")) for b in names if b in store.buckets]
    out: list[np.ndarray] = []
    while pools and len(out) < max_docs:
        for pool in list(pools):
            for shard, i in pool:
                targets = doc_targets(shard.doc(i))
                if len(targets) >= seq_len:
                    out.append(np.concatenate([[store.eos_id], targets[:seq_len]]).astype(np.int64))
                    break
            else:
                pools.remove(pool)
            if len(out) >= max_docs:
                break
    return out


@torch.no_grad()
def _nll_rows(model: torch.nn.Module, rows: list[np.ndarray], batch_size: int, device: torch.device, dtype: str) -> np.ndarray:
    """Per-target NLL [N, T] of equal-length rows of T + 1 tokens."""
    out = []
    with autocast(device, dtype):
        for start in range(0, len(rows), batch_size):
            tokens = torch.from_numpy(np.stack(rows[start : start + batch_size])).to(device)
            mask = torch.ones((tokens.shape[0], tokens.shape[1] - 1), dtype=torch.bool, device=device)
            out.append(token_nll_batch(model, _Windows(tokens, mask)).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0))


def position_bpb(
    model: torch.nn.Module,
    store: TokenStore,
    piece_bytes: np.ndarray,
    seq_len: int,
    edges: list[int],
    max_docs: int,
    batch_size: int,
    device: torch.device,
    dtype: str = "auto",
    data_buckets: list[str] | None = None,
) -> dict[str, Any]:
    """{"seq_len", "docs", "buckets": [{"from", "to", "tokens", "bytes", "loss", "bpb"}]}: position p is
    the p-th predicted token of a document (0: predicted from EOS alone)."""
    rows = long_documents(store, seq_len, max_docs, data_buckets)
    was = model.training
    model.eval()
    try:
        nll = _nll_rows(model, rows, batch_size, device, dtype)
    finally:
        model.train(was)
    nbytes = np.stack([piece_bytes[r[1:]] for r in rows]) if rows else np.zeros((0, seq_len))
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        n, b = float(nll[:, lo:hi].astype(np.float64).sum()), int(nbytes[:, lo:hi].sum())
        tokens = int(nll[:, lo:hi].size)
        out.append(
            {
                "from": lo,
                "to": hi,
                "tokens": tokens,
                "bytes": b,
                "loss": n / max(tokens, 1),
                "bpb": n / (math.log(2) * b) if b else float("nan"),
            }
        )
    return {"seq_len": seq_len, "docs": len(rows), "buckets": out}


def passkey_trial(encode: Any, eos_id: int, seq_len: int, depth: float, key: str) -> tuple[list[int], int, int]:
    """(token ids, index of the first key token in the answer, distance in tokens from the key in
    the text to the question's end) for one trial of seq_len tokens with the key at `depth` ∈ [0, 1]
    of the filler. Pieces are encoded on their own: each starts at a space, where the byte-level
    pre-tokenizer splits anyway."""
    intro, filler, needle = encode(INTRO), encode(FILLER), encode(KEY.format(key=key))
    question, answer = encode(QUESTION), encode(" " + key)
    room = seq_len + 1 - 1 - len(intro) - len(needle) - len(question) - len(answer)  # +1 target, -1 EOS
    if room < len(filler):
        raise ValueError(f"passkey: {seq_len} tokens leave no room for filler (the fixed text takes {seq_len - room} tokens)")
    total = room // len(filler)
    before = round(total * depth)
    head = [eos_id, *intro, *filler * before]
    ids = [*head, *needle, *filler * (total - before), *question, *answer]
    key_at = len(head) + len(encode(KEY.split("{key}")[0]))  # the key's first token in the needle
    answer_at = len(ids) - len(answer)
    return ids, answer_at, answer_at - key_at


def answer_logits(model: torch.nn.Module, x: torch.Tensor, start: int) -> torch.Tensor:
    """Logits [T - start, V] of row 0's positions start.. . A tokenmill Transformer runs its head on
    those rows only: the whole [T, V] logits of a 32k-token context and a 128k vocabulary would take
    16 GB; any other module is called whole."""
    if not hasattr(model, "block_inputs"):
        return model(x)[0, start:]
    tm = cast("Transformer", model)  # only a Transformer has block_inputs
    h = tm.embed(x)
    cos, sin, mask = tm.block_inputs(x.shape[1], x.device)
    for layer in tm.blocks():
        h = tm.run_block(layer, h, cos, sin, mask)
    return tm.output(h[:, start:])[0]


@torch.no_grad()
def passkey(
    model: torch.nn.Module,
    encode: Any,
    eos_id: int,
    seq_len: int,
    trials: int,
    edges: list[int],
    device: torch.device,
    dtype: str = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """Passkey accuracy at seq_len tokens over `trials` keys at depths spread over the filler,
    overall and by key-to-question distance bucket (`edges`), with the key's mean log-probability."""
    rng = random.Random(seed)
    results = []
    was = model.training
    model.eval()
    try:
        with autocast(device, dtype):
            for t in range(trials):
                key = str(rng.randrange(10_000, 100_000))
                depth = (t + 0.5) / trials
                ids, at, distance = passkey_trial(encode, eos_id, seq_len, depth, key)
                x = torch.tensor([ids[:-1]], device=device)
                logits = answer_logits(model, x, at - 1).float()  # predictions of the answer's tokens
                want = torch.tensor(ids[at:], device=device)
                logp = logits.log_softmax(-1).gather(1, want[:, None]).sum().item()
                results.append({"distance": distance, "correct": bool((logits.argmax(-1) == want).all()), "logprob": logp})
    finally:
        model.train(was)
    by = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = [r for r in results if lo <= r["distance"] < hi]
        if inside:
            by.append(
                {
                    "from": lo,
                    "to": hi,
                    "trials": len(inside),
                    "accuracy": sum(r["correct"] for r in inside) / len(inside),
                    "logprob": sum(r["logprob"] for r in inside) / len(inside),
                }
            )
    return {
        "seq_len": seq_len,
        "trials": trials,
        "accuracy": sum(r["correct"] for r in results) / max(len(results), 1),
        "logprob": sum(r["logprob"] for r in results) / max(len(results), 1),
        "by_distance": by,
    }


def evaluate_long_context(
    model: torch.nn.Module,
    store: TokenStore,
    tokenizer: Any,
    cfg: Any,
    trained: int,
    batch_size: int,
    device: torch.device,
    dtype: str = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """Both measures at cfg.seq_len (None: the model's max_seq_len) for `tokenmill eval`; `trained` is
    the run's base sequence length, an edge of the buckets. cfg: eval.long_context."""
    from tokenmill.tokenizer.bpe import token_bytes

    mcfg = cast("ModelConfig", model.config)  # a tokenmill model's config; nn.Module's __getattr__ reads Tensor | Module
    seq_len = cfg.seq_len or mcfg.max_seq_len
    if seq_len > mcfg.max_seq_len:
        raise ValueError(f"eval.long_context.seq_len={seq_len} exceeds the checkpoint's model.max_seq_len={mcfg.max_seq_len}")
    edges = bucket_edges(seq_len, cfg.position_buckets, trained)
    pieces = np.array([len(b) for b in token_bytes(tokenizer)], dtype=np.int64)
    out: dict[str, Any] = {
        "trained_seq_len": trained,
        "rope": {k: getattr(mcfg, k) for k in ("rope_theta", "rope_scaling", "rope_scaling_factor", "rope_original_max_seq_len")},
        "positions": position_bpb(model, store, pieces, seq_len, edges, cfg.max_docs, batch_size, device, dtype),
    }
    if cfg.passkey_trials:

        def encode(text: str) -> list[int]:
            return tokenizer.encode(text, add_special_tokens=False).ids

        out["passkey"] = passkey(model, encode, store.eos_id, seq_len, cfg.passkey_trials, edges, device, dtype, seed)
    return out
