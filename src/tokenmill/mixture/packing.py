"""Rows of a micro-batch and what the model and the loss need to know about them.

A row holds T+1 tokens: the model reads tokens[:T] and is scored on tokens[1:]. Two layouts:

packed (default)  a window of a bucket's document stream (documents end to end, each closed by
                  its EOS), so no position is ever padding. With document masking on, each
                  document run in the row is a segment: positions restart at 0 where a run
                  starts (the first run of a row also starts at 0 — the model cannot see the
                  part of that document in the previous row, so its own position is what it
                  sees), and a target that belongs to another document than its input — the
                  token after an EOS — is left out of the loss: with attention blocked at the
                  boundary nothing in its context predicts it. That costs
                  one target per document boundary, the packing waste r_pad.
padded            one document per row, cut to T+1 tokens, the rest PAD. The padding forms its
                  own last segment (positions restart there too) and none of its targets count;
                  r_pad is the share of padded targets.

r_pad of a batch = share of its B·T targets that do not count = 1 - mean(loss_mask).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch


@dataclass
class Batch:
    """One micro-batch: tokens and the masks a doc-masked model and a masked loss need."""

    tokens: torch.Tensor  # long [B, T+1]; inputs tokens[:, :-1], targets tokens[:, 1:]
    positions: torch.Tensor | None  # long [B, T] position ids of the inputs (None: doc masking off)
    segments: torch.Tensor | None  # int32 [B, T] document index of each input within its row (None: off)
    loss_mask: torch.Tensor  # bool [B, T]: whether target tokens[:, t+1] counts in the loss
    step: int = 0
    micro: int = 0
    phase: str = ""
    # the model's attention mask for `segments`, built once on the device the batch was staged to
    # (train/staging.py); None: the model builds it in its forward. Never carried by `to()`.
    prebuilt_mask: Any = None

    @property
    def n_targets(self) -> int:
        """Targets that count in the loss."""
        return int(self.loss_mask.sum())

    @property
    def r_pad(self) -> float:
        """Share of the B·T target positions that do not count (padding / packing waste)."""
        return 1.0 - self.n_targets / self.loss_mask.numel()

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return replace(
            self,
            prebuilt_mask=None,  # built for the device the batch was on: the model rebuilds it there
            tokens=self.tokens.to(device, non_blocking=non_blocking),
            positions=move(self.positions),
            segments=move(self.segments),
            loss_mask=self.loss_mask.to(device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> "Batch":
        def pin(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.pin_memory()

        return replace(
            self,
            tokens=self.tokens.pin_memory(),
            positions=pin(self.positions),
            segments=pin(self.segments),
            loss_mask=self.loss_mask.pin_memory(),
        )


@dataclass
class RowMasks:
    """Per-row arrays of a micro-batch, filled row by row then turned into a Batch."""

    tokens: np.ndarray  # int64 [B, T+1]
    positions: np.ndarray  # int64 [B, T]
    segments: np.ndarray  # int32 [B, T]
    loss_mask: np.ndarray  # bool [B, T]

    @classmethod
    def empty(cls, rows: int, seq_len: int) -> "RowMasks":
        return cls(
            np.empty((rows, seq_len + 1), np.int64),
            np.empty((rows, seq_len), np.int64),
            np.empty((rows, seq_len), np.int32),
            np.empty((rows, seq_len), np.bool_),
        )

    def to_batch(self, doc_masking: bool, step: int, micro: int, phase: str) -> Batch:
        return Batch(
            tokens=torch.from_numpy(self.tokens),
            positions=torch.from_numpy(self.positions) if doc_masking else None,
            segments=torch.from_numpy(self.segments) if doc_masking else None,
            loss_mask=torch.from_numpy(self.loss_mask),
            step=step,
            micro=micro,
            phase=phase,
        )


def packed_masks(
    run_lengths: list[int], seq_len: int, doc_masking: bool, positions: np.ndarray, segments: np.ndarray, loss_mask: np.ndarray
) -> None:
    """Fill one packed row's masks from the lengths of its document runs (Σ = seq_len + 1)."""
    if not doc_masking:
        loss_mask[:] = True
        return
    run = np.repeat(np.arange(len(run_lengths), dtype=np.int32), run_lengths)  # [T+1]
    starts = np.cumsum([0, *run_lengths[:-1]])
    segments[:] = run[:seq_len]
    positions[:] = np.arange(seq_len) - starts[run[:seq_len]]
    np.equal(run[:seq_len], run[1:], out=loss_mask)


def padded_row(
    doc: np.ndarray,
    seq_len: int,
    pad_id: int,
    tokens: np.ndarray,
    positions: np.ndarray,
    segments: np.ndarray,
    loss_mask: np.ndarray,
) -> int:
    """Fill one padded row with a document cut to seq_len + 1 tokens; returns the tokens kept."""
    n = min(int(doc.size), seq_len + 1)
    tokens[:n] = doc[:n]
    tokens[n:] = pad_id
    t = np.arange(seq_len)
    loss_mask[:] = t + 1 < n
    segments[:] = t >= n  # the document is segment 0, the padding segment 1
    positions[:] = np.where(t < n, t, t - n)
    return n
