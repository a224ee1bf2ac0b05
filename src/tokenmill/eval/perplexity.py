"""Held-out loss, perplexity and bits-per-byte of a model, per bucket.

Each held-out document is scored on its own: the context starts at EOS (as after the previous
document in training) and every token of the document is predicted exactly once, its closing EOS
excluded, so bits-per-byte = Σ NLL / (ln 2 · UTF-8 bytes of the document text) compares across
tokenizers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from tokenmill.model.objectives import token_nll_batch


@dataclass
class Score:
    """Summed NLL (nats) over a set of documents, with their token and byte counts."""

    nll: float = 0.0
    tokens: int = 0
    bytes: int = 0
    docs: int = 0

    def add(self, other: "Score") -> None:
        self.nll += other.nll
        self.tokens += other.tokens
        self.bytes += other.bytes
        self.docs += other.docs

    def metrics(self) -> dict[str, float | int]:
        loss = self.nll / max(self.tokens, 1)
        return {
            "loss": loss,
            "ppl": math.exp(min(loss, 50.0)),
            "bpb": self.nll / (math.log(2) * max(self.bytes, 1)),
            "tokens": self.tokens,
            "bytes": self.bytes,
            "docs": self.docs,
        }


def doc_targets(doc: np.ndarray) -> np.ndarray:
    """The tokens a document is scored on: the stored document without its closing EOS."""
    return doc[:-1]


def doc_windows(doc: np.ndarray, seq_len: int, eos_id: int) -> list[np.ndarray]:
    """[EOS] + document, cut into windows of seq_len + 1 that overlap by one token, so every
    target is predicted once and the windows' targets concatenate to `doc_targets(doc)`."""
    seq = np.concatenate([np.asarray([eos_id], dtype=np.int64), doc_targets(doc).astype(np.int64)])
    return [seq[i : i + seq_len + 1] for i in range(0, len(seq) - 1, seq_len)]


@dataclass
class _Windows:
    """A batch of padded windows in the shape `token_nll_batch` reads: no packing, a target mask."""

    tokens: torch.Tensor
    loss_mask: torch.Tensor
    positions: torch.Tensor | None = None
    segments: torch.Tensor | None = None


@torch.no_grad()
def windows_nll(model: torch.nn.Module, windows: list[np.ndarray], batch_size: int, device: torch.device, pad_id: int) -> float:
    """Summed NLL of the windows' targets; padding after a window cannot leak into it (causal)."""
    total = 0.0
    order = sorted(range(len(windows)), key=lambda i: len(windows[i]))  # similar lengths together
    for start in range(0, len(order), batch_size):
        batch = [windows[i] for i in order[start : start + batch_size]]
        width = max(len(w) for w in batch)
        tokens = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width - 1), dtype=torch.bool)
        for row, w in enumerate(batch):
            tokens[row, : len(w)] = torch.from_numpy(w)
            mask[row, : len(w) - 1] = True
        # the fused head: per-target NLL without materializing the [B, T, V] logits in fp32
        nll = token_nll_batch(model, _Windows(tokens.to(device), mask.to(device))).float().cpu()
        total += float(nll[mask].double().sum())
    return total
