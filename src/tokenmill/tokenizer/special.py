"""Special tokens: fixed ids at the start of the vocabulary, the same in every run."""

from __future__ import annotations

EOS = "<|endoftext|>"
BOS = "<|bos|>"
PAD = "<|pad|>"
SPECIAL_TOKENS: tuple[str, ...] = (EOS, BOS, PAD)
EOS_ID, BOS_ID, PAD_ID = 0, 1, 2
