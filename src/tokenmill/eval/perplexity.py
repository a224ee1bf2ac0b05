"""Held-out loss, perplexity and bits-per-byte of a model, per bucket.

Each held-out document is scored on its own: the context starts at EOS (as after the previous
document in training) and every token of the document is predicted exactly once, its closing EOS
excluded, so bits-per-byte = Σ NLL / (ln 2 · UTF-8 bytes of the document text) compares across
tokenizers.

The interval beside it treats documents, not tokens, as the sampling unit: tokens inside one
document share its topic, style and language, so they are far from independent, and a bucket's
bits-per-byte is a ratio of two sums over its documents (see `bpb_interval`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from scipy import stats

from tokenmill.model.objectives import token_nll_batch

CI_LEVEL = 0.95  # the level of every bits-per-byte interval tokenmill prints or stores


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


def bpb_interval(doc_nll: np.ndarray, doc_bytes: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float] | None:
    """The `level` confidence interval of bits-per-byte = Σ nll / (ln 2 · Σ bytes) over documents
    (nll in nats, one value per document), or None under two documents (no spread to measure).

    Why this interval: bits-per-byte is a ratio estimator, so its variance comes from the delta
    method (Cochran, Sampling Techniques, 3rd ed., §6.4): with residuals e_d = bits_d − R·bytes_d,
    Var(R) ≈ n/(n−1) · Σ e_d² / (Σ bytes)², the document-clustered ("sandwich") variance. Long and
    short documents enter with their own weight, as they do in the point estimate. The quantile is
    Student's t with n−1 degrees of freedom, not the normal: with few documents the spread is
    itself uncertain, and t widens the interval for it (with 2 documents, ×6.5 the normal's).
    A bootstrap over documents would be the other choice; with 2–6 documents it has only a handful
    of distinct resamples and its interval never leaves the range of the documents' own
    bits-per-byte, so it is too narrow exactly where the warning matters. Deterministic, no seed."""
    n = len(doc_nll)
    if n < 2:
        return None
    bits = np.asarray(doc_nll, dtype=np.float64) / math.log(2)
    nbytes = np.asarray(doc_bytes, dtype=np.float64)
    total = max(float(nbytes.sum()), 1.0)
    ratio = float(bits.sum()) / total
    resid = bits - ratio * nbytes
    se = math.sqrt(n / (n - 1) * float(np.dot(resid, resid))) / total
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return ratio - half, ratio + half


def interval_fields(doc_nll: np.ndarray, doc_bytes: np.ndarray) -> dict[str, float | None]:
    """The interval as `eval/<step>.json` stores it beside each bucket's bpb (None: under 2 documents)."""
    ci = bpb_interval(doc_nll, doc_bytes)
    return {"bpb_ci_low": ci[0] if ci else None, "bpb_ci_high": ci[1] if ci else None, "bpb_ci_level": CI_LEVEL}


@torch.no_grad()
def windows_nll(model: torch.nn.Module, windows: list[np.ndarray], batch_size: int, device: torch.device, pad_id: int) -> float:
    """Summed NLL of the windows' targets; padding after a window cannot leak into it (causal)."""
    return float(windows_nll_each(model, windows, batch_size, device, pad_id).sum())


@torch.no_grad()
def windows_nll_each(
    model: torch.nn.Module, windows: list[np.ndarray], batch_size: int, device: torch.device, pad_id: int
) -> np.ndarray:
    """The summed NLL of each window's targets, in the windows' order (float64)."""
    out = np.zeros(len(windows), dtype=np.float64)
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
        sums = torch.where(mask, nll.double(), 0.0).sum(dim=1).numpy()
        for row, i in enumerate(order[start : start + batch_size]):
            out[i] = sums[row]
    return out
